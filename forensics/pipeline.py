"""The whole ingest flow on one page: sources -> detect -> parse -> normalise -> match -> store -> anchor.

    sources run on two workers, largest first (a year-less one waits for the full-date ones only at its end):
        read batches of lines (one batch ahead, on a reader thread) -> parse with the detected formats -> normalise
        -> time observations (boots, year wraps) -> on a second thread, one batch behind: prefilter the rules
           (candidates gathered, the rules run over many batches at once) and stage the batch as an Arrow part
        fix times over the whole source (boots, year, zone) -> stream the parts into Parquet -> commit to the store
    then anchor dmesg monotonic clocks by pairing kernel lines with the journal, and re-commit those sources.
    The heavy phases of all sources (parse, staging, flush, streaming write, profile) share one slot per worker
    (`HEAVY`): memory holds at most that many phases' transient buffers, whatever the input size. The prefilter,
    which holds no such buffer, runs outside them.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

import polars as pl

from . import __version__, journalfile, profile
from .ansi import strip_lines, strip_series
from .cutlines import cut as cut_lines, cut_lengths, merge as merge_cut, note as cut_note
from .podprefix import Pods, strip_series as pod_lines
from .vllmprefix import Repeats
from .anchor import BootAnchor, apply_anchor, boot_time_anchor, find_anchors
from .boothosts import BootHosts
from .detect import Detection, detect
from .formats import FORMATS, StructuredFormat
from .normalise import normalise_batch, open_block
from .timeparse import MONTHS
from .timefix import EXTRA, SourceClock, YearAnchor
from .zonefix import (KERNEL, MARK as ZONE_MARK, ZoneFinding, disagreement, find_offset, inferred_zone, keyed,
                      key_step, sampled, source_key, unique_pairs, zone_note)
from .parse import ParseContext, parse_lines, parse_structured, resolve
from .regexbudget import RegexBudget, RuleTimeout
from .slots import WorkSlots
from .schema import EVENT_SCHEMA, OUT_OF_RANGE, RECORD_SCHEMA, YEAR_OWN, TimeSource, empty_events, empty_records
from .sources import JOURNAL, MAX_LINE, ReadStats, Source, SourceError, expand, head_bytes, read_batches
from .sourcefile import remember
from .store import SourceEntry, Store, StoreError, plain_name, sink_parquet, write_parquet


@dataclass(frozen=True)
class IngestOptions:
    fmt: str | None = None
    host: str | None = None
    year: int | None = None
    tz: str = "UTC"
    boot_time: datetime | None = None
    force: bool = False
    rules_dirs: tuple[str, ...] = ()
    match: bool = True                 # False: store records only (`forensics rescan` extracts events later)
    # the read options (`read_with`'s keys) given on the command line; None: those that differ from the defaults
    given: tuple[str, ...] | None = None


def read_with(opts: IngestOptions) -> dict[str, str | int | None]:
    """The options that change how a source's lines are read, as its manifest entry keeps them (JSON)."""
    return {"format": opts.fmt, "host": opts.host, "year": opts.year, "tz": opts.tz,
            "boot_time": None if opts.boot_time is None else opts.boot_time.astimezone(timezone.utc).isoformat()}


# the read options: their keys in `read_with`, and their fields of IngestOptions (also the CLI's parameter names)
READ_OPTIONS = {"format": "fmt", "host": "host", "year": "year", "tz": "tz", "boot_time": "boot_time"}


def _given(opts: IngestOptions) -> tuple[str, ...]:
    asked, default = read_with(opts), read_with(IngestOptions())
    return opts.given if opts.given is not None else tuple(k for k in asked if asked[k] != default[k])


def _read_with_of(entry: SourceEntry) -> dict[str, str | int | None]:
    """The options a stored source was read with (an entry from before they were kept: the defaults)."""
    return {**read_with(IngestOptions()), **entry.read_with}


def reading_options(entry: SourceEntry, opts: IngestOptions) -> IngestOptions:
    """The options a stored source is read again with (--force, or a changed option): those given, and for the
    others the ones it was read with (a later `ingest --host h` keeps the boot time an earlier one gave)."""
    stored, given = _read_with_of(entry), _given(opts)
    kept = {name: stored[key] for key, name in READ_OPTIONS.items() if key not in given}
    if kept.get("boot_time") is not None:
        kept["boot_time"] = datetime.fromisoformat(kept["boot_time"])
    return replace(opts, **kept)


def changed_options(entry: SourceEntry, opts: IngestOptions) -> list[str]:
    """The read options asked for (given) that the stored source was not read with and that bear on it: the same
    bytes are read again with them rather than left as they are. An option not given never counts (a later
    `ingest dir/` with no options keeps each source as it was read), nor one its records show it does not need
    (`ingest --year 2024 logs/` reads again the year-less sources only)."""
    asked, stored, given = read_with(opts), _as_read(entry), _given(opts)
    return [k for k in asked if k in given and asked[k] != stored[k] and _bears_on(entry, k)]


def _as_read(entry: SourceEntry) -> dict[str, str | int | None]:
    """The options a stored source's times stand as read with: a zone read off other lines (`zonefix`) counts as
    one, so that `--tz UTC` given after it reads the source again, with UTC."""
    stored = _read_with_of(entry)
    zone = inferred_zone(entry.time_anchor)
    return {**stored, "tz": f"{zone}, inferred from its lines"} if zone else stored


def _bears_on(entry: SourceEntry, key: str) -> bool:
    """Whether a read option can change this stored source, by how its times were obtained: a year only year-less
    stamps, a zone only stamps that print none, a boot time only kernel seconds, a host only a source that names
    none (or was given one); a format always."""
    kinds = {k for k, n in entry.ts_sources.items() if n}
    if key == "year":
        return TimeSource.YEAR_INFERRED.value in kinds
    if key == "tz":
        return bool(kinds & {TimeSource.YEAR_INFERRED.value, TimeSource.ZONE_ASSUMED.value})
    if key == "boot_time":
        return bool(kinds & {TimeSource.MONOTONIC_ONLY.value, TimeSource.BOOT_ANCHORED.value})
    if key == "host":
        return entry.host is None or _read_with_of(entry)["host"] is not None
    return True


def describe_change(entry: SourceEntry, opts: IngestOptions, keys: Sequence[str]) -> str:
    """`read again, with --boot-time 2025-05-25T08:00:00+00:00 (it was read with none)`, each changed option."""
    asked, stored = read_with(opts), _as_read(entry)
    return "read again, with " + "; ".join(
        f"--{k.replace('_', '-')} {asked[k] if asked[k] is not None else '(none)'} "
        f"(it was read with {stored[k] if stored[k] is not None else 'none'})" for k in keys)


@dataclass
class SourceResult:
    path: str
    status: str                   # ingested, unchanged, failed
    entry: SourceEntry | None = None    # also for a failed source whose lines before a fault landed
    error: str | None = None
    timeouts: tuple[RuleTimeout, ...] = ()   # `engine: regex` rules that timed out on this source
    warnings: list[str] = field(default_factory=list)   # what landed but is not as written (file:line: ...)
    again: str | None = None      # why a source in the store was read again (an option changed, the file grew)


@dataclass
class IngestReport:
    results: list[SourceResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)   # inputs that could not even be opened
    skipped: list[str] = field(default_factory=list)  # what a directory held that is left out (a store, a binary)
    anchors: list[BootAnchor] = field(default_factory=list)
    zones: list[ZoneResult] = field(default_factory=list)   # zones read off lines a source with exact times holds

    @property
    def failed(self) -> bool:
        return bool(self.errors) or any(r.status == "failed" for r in self.results)


Progress = Callable[[int], None]
WORKERS = int(os.environ.get("FORENSICS_WORKERS", "0")) or min(2, os.cpu_count() or 1)  # sources ingested at once
# One source at a time writes its store files: this end phase reads or writes a whole source and costs the
# most memory of its ingest (at 4 GiB, two overlapping ones went past 400 MiB together)
LANDING = threading.Lock()
BATCH_BYTES = 4 << 20  # bytes of input per batch: bounds memory (records, matching, parts) whatever the size
# The phases of all sources that hold transient buffers share one slot per worker: a batch's parse (with its
# normalise), its staging or a matching flush takes one (its prefilter none: see `_Sink.put`); a source's
# streaming write of its records and a landed source's profile take them all (the profiles are computed once
# every source has landed: a 4 GiB journal's holds about 150 MB, its 285 k units' counts merged, on top of
# whatever else is held). A flush taking them all waited
# for the slot in use to be given back, and a core idled meanwhile (3 s of a 1 GiB ingest); with the write
# alone, a flush never meets it, and the peak is the same (1 GiB: 345-365 MiB, 4 GiB: 369-374 MiB)
HEAVY = WorkSlots(WORKERS)
FLUSH_WEIGHT = 1
LAND_WEIGHT = PROFILE_WEIGHT = WORKERS
SMALL_PROFILE_RECORDS = 100_000   # a source of at most these many records has its profile computed beside another's


def ingest(store: Store, inputs: list[str], opts: IngestOptions,
           progress: Callable[[Source], Progress] | None = None) -> IngestReport:
    store.init()
    report = IngestReport()
    # the packs are loaded (every pattern compiled and checked: 0.3 s) while the inputs are detected
    with ThreadPoolExecutor(1, thread_name_prefix="rules") as loading:
        rules_loaded = loading.submit(_load_rules, opts)
        planned = _plan(inputs, opts, report)
        rules = rules_loaded.result()  # a pack's error is raised here, before any source streams

    def one(item: tuple[Source, Detection], dated: DatedWait | None = None) -> SourceResult:
        try:
            return ingest_source(store, item[0], item[1], opts, rules, progress, dated)
        except SourceError as e:
            return SourceResult(item[0].display, "failed", error=str(e))

    first, later, again = [], [], []
    seen: set[str] = set()
    for p in planned:  # a second copy of the same bytes waits for the first to land (then it is a no-op)
        fp = fingerprint(p[0])
        (again if fp in seen else later if _needs_year(p[1]) else first).append(p)
        seen.add(fp)
    results = _Schedule(first, later, one, store).run(WORKERS)
    report.results.extend(results[id(p)] for p in (*first, *later))
    report.results.extend(one(p) for p in again)
    if any(r.entry is not None and r.status != "unchanged" for r in report.results):
        report.zones = infer_zones(store, opts)   # before the kernel clocks: they pair with the times it moves
    report.anchors = anchor_kernel_clocks(store, opts, rules)
    # once nothing streams: a big journal's profile is the largest single phase, and takes every slot; small
    # sources' profiles take one each, two at a time (one after the other, 40 small files spent 0.6 s here)
    landed = [r.entry for r in report.results if r.entry is not None and r.status != "unchanged"]

    def profile_one(e: SourceEntry) -> None:
        with HEAVY.hold(PROFILE_WEIGHT if e.records > SMALL_PROFILE_RECORDS else 1):
            warm_profile(store, e.source_id)

    with ThreadPoolExecutor(max(1, min(WORKERS, len(landed))), thread_name_prefix="profile") as pool:
        list(pool.map(profile_one, landed))
    if rules is not None:  # the texts a report reads of the packs, from the rule set loaded to match
        from .rulepacks import keep_loaded_texts

        keep_loaded_texts(store.cache_dir)
    store.settle()  # the staged parts, deleted meanwhile on a thread of their own
    return report


def _plan(inputs: list[str], opts: IngestOptions, report: IngestReport) -> list[tuple[Source, Detection]]:
    """The inputs as sources with their detected formats, full-date sources first (their dates anchor the year of
    year-less sources of the same host); what cannot be opened or is not text goes to `report`."""
    sources, errors = expand(inputs, report.skipped)
    report.errors.extend(errors)

    def plan_one(src: Source) -> tuple[Source, Detection] | SourceResult | str:
        try:
            kind = binary_kind(head_bytes(src, 64 << 10))
            if kind and not opts.fmt:
                fix = ARCHIVE_FIX.get(kind, "If it really is a log, force a format with --format").format(
                    file=shlex.quote(src.display))
                if src.in_dir:   # a directory's wtmp, lastlog, binaries: left out, said so (named, an error)
                    return (f"{src.display}: not a text log ({kind}); a file that is not text in a directory is left "
                            f"out" + (f". {fix}" if kind in ARCHIVE_FIX else ""))
                raise SourceError(f"{src.display}: not a text log ({kind}); nothing ingested from it. {fix}")
            return src, detect(_sample_lines(src), src.display, forced=opts.fmt)
        except SourceError as e:
            return SourceResult(src.display, "failed", error=str(e))

    # the sources' detections on the workers (mostly polars, which lets go of the interpreter): many small files
    # spent half their ingest here, one after the other
    with ThreadPoolExecutor(max(1, min(WORKERS, len(sources))), thread_name_prefix="plan") as pool:
        outcomes = list(pool.map(plan_one, sources))
    planned: list[tuple[Source, Detection]] = []
    for out in outcomes:
        if isinstance(out, str):
            report.skipped.append(out)
        elif isinstance(out, SourceResult):
            report.results.append(out)
        else:
            planned.append(out)
    planned.sort(key=lambda p: (_needs_year(p[1]), sources.index(p[0])))
    return planned


DatedWait = Callable[[], dict[str, YearAnchor]]   # a year-less source waits for its host anchors (_Schedule.wait_anchors)


class _Schedule:
    """Sources on `workers` threads, largest first. A year-less source may need a year from another source of
    the same host (a host anchor): only at its very end does it wait (`wait_anchors`), until every other source
    of the run has landed or waits too; meanwhile a worker thread of its own takes its place (so the sources not
    started yet go on, and no thread holds another source's state on its stack). The anchors are then those of
    the full-date sources and of the year-less ones that took their year from their own lines; the sources
    waiting are left out, so the answer does not depend on which finished first, and the waiting sources never
    wait on each other: they all go on at once. Full-date sources never wait: no deadlock."""

    def __init__(self, dated: list, yearless: list, run_one: Callable, store: Store):
        self.yearless = {id(p) for p in yearless}
        self.pending = sorted([*dated, *yearless], key=lambda p: -_size(p[0]))  # stable: ties in input order
        self.run_one, self.store = run_one, store
        self.left = len(self.pending)       # sources neither landed nor waiting for anchors
        self.waited: dict[int, str] = {}    # the sources that waited, their paths (counted out of `left` then)
        self.cond = threading.Condition()
        self.threads: list[threading.Thread] = []
        self.results: dict[int, SourceResult] = {}
        self.errors: list[Exception] = []   # raised in a worker: raised again in the caller's thread
        self._anchors: dict[str, YearAnchor] | None = None

    def run(self, workers: int) -> dict[int, SourceResult]:
        with self.cond:
            for _ in range(max(1, workers) - 1):
                self._spawn()
        try:
            self._work()
        finally:
            while True:  # the workers, those started while sources waited too
                with self.cond:
                    alive = [t for t in self.threads if t.is_alive()]
                if not alive:
                    break
                for t in alive:
                    t.join()
        if self.errors:
            raise self.errors[0]
        return self.results

    def _spawn(self) -> None:  # under the lock
        t = threading.Thread(target=self._work, name=f"ingest-{len(self.threads)}")
        self.threads.append(t)
        t.start()

    def _do(self, p) -> None:
        wait = partial(self.wait_anchors, p) if id(p) in self.yearless else None
        try:
            self.results[id(p)] = self.run_one(p, wait)
        except Exception as e:  # noqa: BLE001 - the other sources go on; the caller sees it at the end
            self.errors.append(e)
        finally:
            with self.cond:
                if id(p) not in self.waited:
                    self.left -= 1
                    self.cond.notify_all()

    def _work(self) -> None:
        while True:
            with self.cond:
                p = self.pending.pop(0) if self.pending else None
            if p is None:
                return
            self._do(p)

    def wait_anchors(self, p) -> dict[str, YearAnchor]:  # noqa: ANN001 - p: (Source, Detection)
        """The host anchors for year-less source `p`, once every other source of this run has landed or waits
        for them too (those are left out)."""
        with self.cond:
            self.waited[id(p)] = p[0].display
            self.left -= 1
            self.cond.notify_all()
            if self.pending:  # the sources not started yet: another thread, while this one waits
                self._spawn()
            while self.left:
                self.cond.wait()
            if self._anchors is None:
                self._anchors = host_anchors(self.store, exclude=set(self.waited.values()))
            return self._anchors


def _size(src: Source) -> int:
    """The bytes of `src` (0 when its file cannot be read now: reading it says why)."""
    try:
        return src.real.stat().st_size if src.real is not None else len(src.stdin_data or b"")
    except OSError:
        return 0


BINARY_MAGIC = ((b"\x7fELF", "an ELF executable"), (b"\x89PNG\r\n\x1a\n", "a PNG image"), (b"%PDF-", "a PDF"),
                (b"PK\x03\x04", "a zip archive"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"),
                (b"SQLite format 3\x00", "an SQLite database"), (b"LPKSHHRH", "a compressed systemd journal file"))


TAR = "a tar archive"
# an archive's logs are files of their own (each with its format, host and line numbers): they are not read as
# one text glued from the members and the archive's headers (a sosreport's `.tar.xz` was one `journal-short` source)
ARCHIVE_FIX = {"a compressed systemd journal file": ("Decompress it and ingest the `.journal` file, which forensics "
                                                      "reads through journalctl"),
               TAR: "Extract it (`tar xf {file}`) and ingest the logs in it (a directory is read recursively: "
                    "`forensics ingest DIR`)",
               "a zip archive": "Extract it (`unzip {file}`) and ingest the logs in it (a directory is read "
                                "recursively: `forensics ingest DIR`)"}


def binary_kind(head: bytes) -> str | None:
    """What a source is when it is plainly not text: a known magic number (a tar archive's, POSIX or GNU, at
    byte 257 of its first header), or mostly control bytes."""
    for magic, name in BINARY_MAGIC:
        if head.startswith(magic):
            return name
    if head[257:262] == b"ustar" and _tar_checksum_ok(head[:512]):
        return TAR
    if not head:
        return None
    text = head.replace(b"\x00", b"")  # NUL holes are handled as text (a half-written log)
    if len(text) < len(head):   # NULs between short pieces: fixed-size records padded with NULs (wtmp, lastlog);
        frags = [len(x) for x in re.split(rb"\x00+", head[:65536]) if x]   # a log's holes lie between whole lines
        if len(frags) >= 2 and sum(frags) < 32 * len(frags):
            return "binary data"
    ctrl = sum(1 for b in text[:65536] if b < 9 or 13 < b < 32)
    return "binary data" if text and ctrl > 0.3 * min(len(text), 65536) else None


def _tar_checksum_ok(header: bytes) -> bool:
    """A tar header's checksum (octal, bytes 148-155) is the sum of its 512 bytes with that field as spaces: a
    text that merely holds `ustar` at byte 257 is not taken for an archive."""
    if len(header) < 512:
        return False
    try:
        want = int(header[148:156].replace(b"\x00", b" ").strip() or b"x", 8)
    except ValueError:
        return False
    return want == sum(header[:148]) + 8 * 32 + sum(header[156:512])


def _needs_year(det: Detection) -> bool:
    return any(FORMATS[f].stamp.value == "syslog_noyear" for f in det.formats)


def _sample_lines(src: Source) -> pl.Series:
    data = head_bytes(src)
    cut = data.rfind(b"\n")
    if cut > 0 and len(data) >= (256 << 10):
        data = data[:cut]
    text = data.replace(b"\x00", b"").decode("utf-8", "replace").replace("\r\n", "\n").removeprefix("\ufeff")
    return pl.Series(text.split("\n")[:4000], dtype=pl.String)


def _no_format(src: Source) -> str:
    """The warning for a source in which no format was found: where it starts, and what to do."""
    lines = _sample_lines(src)
    at = lines.str.strip_chars().ne("").arg_true()
    first = f" (line {at[0] + 1}: `{_clip(lines[at[0]])}`)" if at.len() else ""
    # journalctl and syslog daemons print the month in the locale's language (`мая 25 20:17:19`, `Mai 25 ...`)
    local = lines.str.extract(r"^(\S{1,12}) +\d{1,2} \d{2}:\d{2}:\d{2} \S").drop_nulls()
    local = local.filter(~local.is_in(list(MONTHS)))
    hint = (f"; its stamps name the month in another language (`{_clip(local[0], 12)}`): export them again with "
            f"`LC_ALL=C` (`LC_ALL=C journalctl ...`)" if local.len() * 2 > at.len() > 0 else "")
    return (f"{src.display}: no log format found in its first lines{first}; its lines are kept as untimed text "
            f"records, searchable, with no time and only the events their text alone shows{hint}. "
            f"`forensics formats` lists the formats read; `--format NAME` forces one")



def _clip(line: str, n: int = 80) -> str:
    line = "".join(c if c.isprintable() else "\ufffd" for c in line)
    return line if len(line) <= n else line[:n - 3] + "..."


def _load_rules(opts: IngestOptions):  # -> RuleSet | None
    if not opts.match:
        return None
    try:
        from .match import match_records  # noqa: F401
        from .rulepacks import load_rules
    except ImportError:
        return None
    from pathlib import Path

    return load_rules([Path(d) for d in opts.rules_dirs], keep=True)


class _Sink:
    """The back of a source's stream: count unparsed lines, match (events spilled to disk as they come) and stage
    each batch of records as an Arrow part for the final fix."""

    def __init__(self, staging: Path, det: Detection, matcher) -> None:  # matcher: match.Matcher | None
        self.staging, self.det, self.matcher = staging, det, matcher
        self.schema: pl.Schema | None = None     # the records' columns, as parsed (the parts may lack some)
        self.constants: list[dict[str, object]] = []  # the columns each part was staged without, and their value
        self.parts: list[Path] = []
        self.events: list[Path] = []
        self.unparsed = 0

    def put(self, recs: pl.DataFrame) -> None:
        # the prefilter outside the slots: one pass over the batch's messages that keeps only its few candidates
        # (no buffer of the batch's size), so it runs beside the other phases on a core that would idle: a 1 GiB
        # ingest 16.9 -> 16.2 s (medians of eight alternating pairs), at the same peak (4 GiB: 366 MiB)
        due = self.matcher.keep(recs) if self.matcher else False  # it reads only the record columns
        with HEAVY.hold():
            self.unparsed += _unparsed(recs, self.det)
            part = self.staging / f"part-{len(self.parts):05d}.arrow"
            if self.schema is None:
                self.schema = recs.schema
            # staging only: uncompressed, the fastest to write and re-read; without the columns the landing
            # knows anyway (see `slim`)
            staged, constants = slim(recs)
            staged.write_ipc(part, compression="uncompressed")
            self.parts.append(part)
            self.constants.append(constants)
        if due:
            self._flush(final=False)

    def close(self) -> tuple[list[Path], list[Path], int]:
        if self.matcher:
            self._flush(final=True)
        return self.parts, self.events, self.unparsed

    def _flush(self, final: bool) -> None:
        with HEAVY.hold(FLUSH_WEIGHT):
            self._spill(self.matcher.finish() if final else self.matcher.flush())

    def _spill(self, ev: pl.DataFrame) -> None:
        if ev.height:
            part = self.staging / f"events-{len(self.events):05d}.parquet"
            ev.write_parquet(part, compression="lz4", statistics=False)
            self.events.append(part)


# string columns that often hold one value in every record of a batch (the other string columns never do: testing
# them would cost more than it saves)
_OFTEN_CONSTANT = ("path", "source_id", "format", "ts_source", "host", "ident", "unit", "level", "boot_id", "ts_anchor")


def slim(recs: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, object]]:
    """A batch's records as staged, and the columns left out of them with their one value: a column null in every
    record, or (of `_OFTEN_CONSTANT`) holding one value in every record (a source's path and temporary id; its
    format, time source and host most of the time). Arrow writes 16 bytes a row for a string column even where
    it is null; a journal batch had seven such columns, a third of the 2.6 bytes staged for each byte read."""
    if recs.height == 0 or "line" not in recs.columns:  # nothing to save; and a part of only constants would read
        return recs, {}                                   # back as one row (the `line` of every record is kept)
    nulls = dict(zip(recs.columns, recs.null_count().row(0)))
    constants: dict[str, object] = {c: None for c, n in nulls.items() if n == recs.height and c != "line"}
    for c in _OFTEN_CONSTANT:
        if c in nulls and not nulls[c]:
            col = recs.get_column(c)
            first = col[0]
            if (col == first).all():
                constants[c] = first
    return (recs.drop(list(constants)) if constants else recs), constants


def unslim(parts: Sequence[Path], constants: Sequence[Mapping[str, object]], schema: pl.Schema) -> pl.LazyFrame:
    """The staged parts (each without the columns `slim` found constant in it) as one lazy frame with every column
    of `schema` (the batches', as parsed), in its order and type: each part's constants put back."""
    return pl.concat([pl.scan_ipc(str(p)).select(
        pl.col(n).cast(t) if n not in consts else pl.lit(consts[n], dtype=t).alias(n) for n, t in schema.items())
        for p, consts in zip(parts, constants)])


def _matcher(rules, budget: RegexBudget | None = None):  # -> match.Matcher | None
    if rules is None:
        return None
    from .match import Matcher

    return Matcher(rules, budget=budget, carry=EXTRA)  # the events keep what the final fix of times reads


def warm_profile(store: Store, sid: str) -> None:
    """Compute the landed source's profile (what the incident queries read instead of its records: its spans
    and ranks; the environment hits, which read every message, are left to the first query) now, while its
    records are in the page cache. Only a cache: a failure here is left to the first query to redo."""
    try:
        profile.of_source(store, sid, env=False)
    except (OSError, pl.exceptions.PolarsError):
        pass


def _versions(store: Store, src: Source) -> tuple[list[SourceEntry], list[SourceEntry]]:
    """The stored sources of the same path with other bytes: (those these bytes extend, as a log grows by lines
    appended; the others). Only a plain file can be told to extend one (its first bytes hashed as the old
    version's were); a compressed one is always another version. Standard input has no path: none."""
    if src.real is None:
        return [], []
    older = store.of_path(src.display)
    grown: list[SourceEntry] = []
    if older and src.compression is None and not src.encoding:
        size = _size(src)
        grown = [e for e in older if e.size < size and _head_sha256(src.real, e.size) == e.sha256]
    return grown, [e for e in older if e not in grown]


def _head_sha256(path: Path, n: int) -> str:
    """sha256 of the first `n` bytes of the file."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while n > 0 and (chunk := fh.read(min(n, 8 << 20))):
            h.update(chunk)
            n -= len(chunk)
    return h.hexdigest()


def fingerprint(src: Source) -> str:
    """Cheap identity of a source's bytes (size, head, tail) to find a possible no-op re-ingest."""
    h = hashlib.sha256()
    if src.real is None:
        h.update(src.stdin_data or b"")
        return h.hexdigest()
    size = src.real.stat().st_size
    h.update(str(size).encode())
    with open(src.real, "rb") as fh:
        h.update(fh.read(1 << 20))
        if size > (2 << 20):
            fh.seek(size - (1 << 20))
            h.update(fh.read())
    return h.hexdigest()


def raw_sha256(src: Source) -> str:
    h = hashlib.sha256()
    if src.real is None:
        h.update(src.stdin_data or b"")
        return h.hexdigest()
    with open(src.real, "rb") as fh:
        while chunk := fh.read(8 << 20):
            h.update(chunk)
    return h.hexdigest()


def host_anchors(store: Store, exclude: Collection[str] = frozenset()) -> dict[str, YearAnchor]:
    """A full date per host from the sources in the store (but `exclude`d paths): the last time of the first
    source (by path) with exact or zone-assumed stamps; for a host with none, of the first whose year-less stamps
    took their year from the source itself (`--year`, or its own lines: timefix.YEAR_OWN), said as such."""
    out: dict[str, YearAnchor] = {}
    entries = [e for e in store.sources() if e.path not in exclude and e.host and e.last_ts]
    for e in entries:
        if e.host not in out and (e.ts_sources.get(TimeSource.EXACT.value)
                                  or e.ts_sources.get(TimeSource.ZONE_ASSUMED.value)):
            if (last := _iso_time(e.last_ts)) is not None:
                out[e.host] = YearAnchor(last, f"the dates in {e.path}")
    for e in entries:
        if e.host not in out and e.year_from in YEAR_OWN and (last := _iso_time(e.last_ts)) is not None:
            how = e.time_anchor.removeprefix("year inferred: ").split("; zone assumed")[0]
            out[e.host] = YearAnchor(last, f"the year inferred for {e.path} from {how}")
    return out


def _iso_time(iso: str) -> datetime | None:
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:  # a stamp outside Python's datetime range anchors nothing
        return None


def ingest_source(store: Store, src: Source, det: Detection, opts: IngestOptions, rules,
                  progress: Callable[[Source], Progress] | None = None, dated: DatedWait | None = None) -> SourceResult:
    """Stream one source into the store: batches are parsed, normalised, matched and written as parts;
    the year and the source id are fixed at the end in one lazy pass over the parts."""
    fp = fingerprint(src)
    same = store.find_fingerprint(fp)
    replace_ids: tuple[str, ...] = ()
    again = None
    if same:
        sha = raw_sha256(src)
        hit = [e for e in same if e.sha256 == sha]
        changed = changed_options(hit[0], opts) if hit else []
        if hit and not opts.force and not changed:
            return SourceResult(src.display, "unchanged", hit[0])
        again = describe_change(hit[0], opts, changed) if changed else None
        if hit:
            planned = opts.fmt
            opts = reading_options(hit[0], opts)
            if opts.fmt != planned:  # read again in the format it was forced to, not the one detected now
                det = detect(_sample_lines(src), src.display, forced=opts.fmt)
        replace_ids = tuple(e.source_id for e in hit)
    warnings: list[str] = []
    if not replace_ids:  # new bytes: is an earlier version of the same path in the store?
        grown, other = _versions(store, src)
        if grown:  # the log grew since it was read: the new version holds every line of the old one
            replace_ids = tuple(e.source_id for e in grown)
            again = ("it grew from " + " and ".join(f"{e.size:,}" for e in grown) + f" to {_size(src):,} bytes since "
                     f"it was read: read again, in place of what was read then")
        for e in other:
            warnings.append(f"{src.display}: the store also holds another version of this path ({e.records:,} "
                            f"records, sha256 {e.sha256[:12]}, read by forensics {e.tool_version}), which these "
                            f"bytes do not extend: both are kept, and lines the two share show twice in a timeline "
                            f"(`forensics store remove {e.sha256[:12]}` takes the other out)")
    staging = store.staging()
    budget = RegexBudget()
    try:
        entry, lost = _stream_source(store, src, det, opts, rules, fp, staging, progress, dated, budget)
        entry = replace(entry, read_with=read_with(opts))
        store.commit(entry, staging / "records.parquet", staging / "events.parquet", replace_ids)
    finally:
        store.cleanup(staging)
    warnings += [f"{src.display}:{n.removeprefix('line ')}" for n in entry.notes if n.startswith("line ")]
    if det.primary == "text" and not opts.fmt and entry.records:
        warnings.append(_no_format(src))
    if lost:  # the lines before a fault of the stream landed; the source still failed
        return SourceResult(src.display, "failed", entry, error=lost, warnings=warnings, timeouts=budget.timeouts(),
                            again=again)
    return SourceResult(src.display, "ingested", entry, warnings=warnings, timeouts=budget.timeouts(), again=again)


def _stream_source(store: Store, src: Source, det: Detection, opts: IngestOptions, rules, fp: str, staging: Path,
                   progress: Callable[[Source], Progress] | None, dated: DatedWait | None = None,
                   budget: RegexBudget | None = None) -> tuple[SourceEntry, str | None]:
    """The source's entry (its files written to `staging`), and the error that ended its stream early (the
    lines before it are kept) or None."""
    stats = ReadStats()
    try:
        before = os.stat(src.real) if src.real is not None else None
    except OSError:
        before = None
    tmp_id = "t" + hashlib.sha256(f"{src.display}{fp}".encode()).hexdigest()[:15]
    ctx = ParseContext(path=src.display, tz=opts.tz, source_id=tmp_id)
    formats = resolve(det)
    structured = formats[0] if len(formats) == 1 and isinstance(formats[0], StructuredFormat) else None
    # host anchors (a year for year-less stamps from another source) are only needed, and only waited for, at the end
    clock = SourceClock(tz=opts.tz, year=opts.year, mtime=src.mtime, source_id=tmp_id)
    if not structured:
        sample = pod_lines(strip_series(_sample_lines(src)))
        head = pl.DataFrame({"line": pl.int_range(1, sample.len() + 1, eager=True, dtype=pl.Int64), "text": sample})
        with HEAVY.hold():
            clock.decide_order(parse_lines(head, formats, ctx, final=True)[0])
    tick = progress(src) if progress else None
    sink = _Sink(staging, det, _matcher(rules, budget))
    behind = ThreadPoolExecutor(1, thread_name_prefix="sink")  # matching and staging overlap the next batch's parse
    pending: list[Future] = []

    boots = BootHosts.of(det.formats)   # the host a raw dmesg names at each boot

    def prepare(recs: pl.DataFrame) -> pl.DataFrame:
        recs = normalise_batch(recs)
        if opts.host:
            recs = recs.with_columns(pl.coalesce(pl.col("host"), pl.lit(opts.host)).alias("host"))
        recs = clock.observe(recs)
        boots.observe(recs)
        return recs

    def emit(recs: pl.DataFrame) -> None:
        while pending:  # one batch in the sink at a time: memory stays bounded, parts stay in order
            pending.pop().result()
        pending.append(behind.submit(sink.put, recs))

    lost = None
    try:
        carry = pl.DataFrame(schema={"line": pl.Int64, "text": pl.String})
        pods = Pods()  # kubectl logs --prefix: the pod of each line, its records' host
        repeats = Repeats() if "vllm" in det.formats else None  # vLLM's prefix on every line of a message
        try:
            for batch in read_batches(src, stats, BATCH_BYTES):
                with HEAVY.hold():
                    if not structured:  # a structured format's values are kept as written
                        batch, n = strip_lines(batch)
                        stats.ansi_lines += n
                        merge_cut(stats.cut_lengths, cut_lengths(batch))
                        batch = pods.take(batch)
                        if repeats is not None:
                            batch = repeats.take(batch)
                    if carry.height:
                        batch = pl.concat([carry, batch])
                    recs, carry = (parse_structured(structured, batch, ctx, final=False) if structured
                                   else parse_lines(batch, formats, ctx, final=False))
                    recs = pods.name(recs)
                    held = None if structured else open_block(recs)
                    if held is not None:  # a traceback that may go on in the next batch: parsed again with it
                        recs, carry = recs.filter(pl.col("line") < held), batch.filter(pl.col("line") >= held)
                    pods.keep_from(carry)
                    del batch
                    recs = prepare(recs)
                emit(recs)
                if tick:
                    tick(stats.bytes)
        except SourceError as e:  # a cut or damaged compressed stream: what was read before lands
            if not stats.lines:
                raise
            lost = str(e)
        if carry.height:
            with HEAVY.hold():
                recs, _ = (parse_structured(structured, carry, ctx, final=True) if structured
                           else parse_lines(carry, formats, ctx, final=True))
                recs = prepare(pods.name(recs))
            emit(recs)
        while pending:
            pending.pop().result()
        stats.pod_lines = pods.lines
    finally:
        behind.shutdown(wait=True, cancel_futures=True)
    sha = stats.sha.hexdigest() if (stats.sha and src.compression is None and not src.encoding) else raw_sha256(src)
    sid = sha[:16]
    if stats.index is not None and before is not None:  # what a report's first quote of the file would hash again
        remember(src.real, before, sha, stats.index, store.cache_dir / "files")
    if clock.wants_host_anchor():
        clock.anchors = dated() if dated else host_anchors(store)
    exprs, how = clock.finish()
    with LANDING:  # the end phase: the last candidates matched, the parts fixed into the records file, the events
        parts, events, unparsed = sink.close()
        fix = [*exprs, pl.lit(sid).alias("source_id"), pl.col("boot_id").str.replace(tmp_id, sid, literal=True)]
        named_host = boots.host_expr()
        if named_host is not None:
            fix.append(named_host)
        anchor = None
        if opts.boot_time is not None and clock.kinds.get(TimeSource.MONOTONIC_ONLY.value):
            anchor = boot_time_anchor([f"dmesg:{sid}#{clock.boot_n}"], opts.boot_time, opts.host)
        records_file = staging / "records.parquet"
        with HEAVY.hold(LAND_WEIGHT):  # the other source's batches wait: this streaming write is the ingest's peak
            if parts:  # the parts, fixed, streamed into one Parquet file (polars' streaming sink: bounded memory)
                assert sink.schema is not None  # set by the first part
                fixed = unslim(parts, sink.constants, sink.schema).with_columns(fix).drop(*EXTRA)
                sink_parquet(apply_anchor(fixed, anchor, opts.host) if anchor else fixed, records_file, RECORD_SCHEMA)
            else:
                write_parquet(empty_records(), records_file, RECORD_SCHEMA)
            # the events, streamed (a source's events are never all in memory at once), still with both slots:
            # with one, their write met the other source's flush (2x the rules: 431-486 MiB, not 409-431)
            events_file = staging / "events.parquet"
            if events:  # the fix's expressions of the times events have (a boot anchor: the records file's)
                times = None if anchor else [e for e in exprs if e.meta.output_name() in ("ts", "ts_source")]
                final = _final_events(events, records_file, sid, times)
                sink_parquet(final if named_host is None else final.with_columns(named_host), events_file,
                             EVENT_SCHEMA)
            else:
                write_parquet(empty_events(), events_file, EVENT_SCHEMA)
            n_events = pl.scan_parquet(events_file).select(pl.len()).collect().item()
            entry = replace(_entry(src, det, sid, sha, fp, stats, records_file, n_events, how, bool(clock.rev),
                                   unparsed, clock.host_counts + boots.counts()), year_from=clock.year_from)
            if boots.note():
                entry = replace(entry, notes=[*entry.notes, boots.note()])
            if anchor:  # the last boot anchored by --boot-time: said as an anchor found later says it
                entry = replace(entry, time_anchor=_anchored(anchor, entry.ts_sources, " (the file's last boot)"))
        if lost:
            entry = replace(entry, notes=[*entry.notes, "truncated: " + lost.removeprefix(f"{src.display}: ")])
        return entry, lost


def retime_events(events: pl.DataFrame, records_file: Path, final: pl.DataFrame | None = None) -> pl.DataFrame:
    """Events were matched on provisional times; give them their record's final time, in order (`final`: the
    times of their lines, `final_times`, when already read). An event without a host takes its record's: anchoring
    a kernel clock to a host's journal names the host of the records it anchors."""
    if events.height == 0:
        return events
    if final is None:
        final = final_times(events.get_column("line"), records_file)
    out = events.join(final, on="line", how="left", maintain_order="left")
    return out.with_columns(pl.coalesce(pl.col("_ts"), pl.col("ts")).alias("ts"),
                            pl.coalesce(pl.col("_tss"), pl.col("ts_source")).alias("ts_source"),
                            pl.coalesce(pl.col("host"), pl.col("_host")).alias("host")).drop("_ts", "_tss", "_host")


def final_times(lines: pl.Series, records_file: Path) -> pl.DataFrame:
    """(line, _ts, _tss, _host): the final time (and host) of each of these lines' records."""
    return (pl.scan_parquet(records_file).filter(pl.col("line").is_in(lines.unique().implode()))
            .select("line", pl.col("ts").alias("_ts"), pl.col("ts_source").alias("_tss"), pl.col("host").alias("_host"))
            .collect())


def _final_events(parts: list[Path], records_file: Path, sid: str,
                  times: Sequence[pl.Expr] | None) -> pl.LazyFrame:
    """The spilled events parts, streamed, with the source id and their records' final times. `times`: the final
    fix's expressions of the events' time columns, applied to the events themselves, which carry the record
    columns they read (`EXTRA`); none when the fix moves no time (no year inferred). None (a boot anchor), or
    parts without those columns: the times are read from the records file (`_retime_parts`)."""
    have = set(pl.read_parquet_schema(parts[0])) if parts else set()
    alike = all(set(pl.read_parquet_schema(p)) == have for p in parts)  # one scan reads them all
    if times is None or not alike or not all(set(e.meta.root_names()) <= have for e in times):
        return pl.scan_parquet([str(p) for p in _retime_parts(parts, records_file, sid)])
    out = pl.scan_parquet([str(p) for p in parts]).with_columns(pl.lit(sid).alias("source_id"), *times)
    return out.drop([c for c in EXTRA if c in have])


def _retime_parts(parts: list[Path], records_file: Path, sid: str) -> list[Path]:
    """Each spilled events part given its records' final times from the records file and the source id, as a
    new part (both left to the staging's cleanup). A part at a time: a lazy join over all of them buffered
    every event of the source (a 4 GiB journal's 900 k: +220 MB)."""
    final = final_times(pl.scan_parquet([str(p) for p in parts]).select("line").collect().get_column("line"),
                        records_file)
    out = []
    for p in parts:
        ev = pl.read_parquet(p).with_columns(pl.lit(sid).alias("source_id"))
        q = p.with_name("retimed-" + p.name)
        retime_events(ev, records_file, final).drop([c for c in EXTRA if c in ev.columns]).write_parquet(
            q, compression="lz4", statistics=False)
        del ev
        out.append(q)
    return out


def _unparsed(recs: pl.DataFrame, det: Detection) -> int:
    """Lines no format claimed (kept as `text` records), less blank lines, journal banners and prompts."""
    if det.primary == "text":
        return 0
    text = recs.filter(pl.col("format") == "text")
    if text.height == 0:
        return 0
    msg = text["message"]
    benign = (msg.str.strip_chars() == "") | msg.str.contains(r"^-- .* --$") | msg.str.starts_with("$ ")
    return int((~benign).sum())


def _iso(v: datetime | None) -> str | None:
    return None if v is None else v.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _summary(records_file: Path) -> dict:
    """Span, record count and time sources of a written records file (formatted by polars: stamps beyond
    Python's datetime range, year 0 or 10000 in UTC, must not crash the ingest)."""
    lf = pl.scan_parquet(records_file)
    fmt = "%Y-%m-%dT%H:%M:%S%.6fZ"
    span = lf.select(pl.col("ts").min().dt.strftime(fmt).alias("a"), pl.col("ts").max().dt.strftime(fmt).alias("b"),
                     pl.len().alias("n")).collect()
    counts = lf.group_by("ts_source").len().sort("ts_source").collect()
    return {"first_ts": span["a"][0], "last_ts": span["b"][0], "records": int(span["n"][0]),
            "ts_sources": dict(zip(counts["ts_source"].to_list(), counts["len"].to_list()))}


def _out_of_range(records_file: Path) -> list[str]:
    """The note (`line N: ...`, also printed as a warning) on records whose stamp lies outside years 1..9999
    once in UTC (kept with no time; `normalise`); [] when there are none (row groups of no such record are
    skipped by their statistics)."""
    hit = (pl.scan_parquet(records_file).filter(pl.col("ts_anchor") == OUT_OF_RANGE)
           .select(pl.len().alias("n"), pl.col("line").min().alias("first")).collect())
    n, first = hit.row(0)
    if not n:
        return []
    return [f"line {first}: {n} record(s) stamped outside years 1..9999 once in UTC, the first here, are kept "
            f"with no time (ts_source none): the clock that wrote them was wrong; their lines are all stored"]


def _entry(src: Source, det: Detection, sid: str, sha: str, fp: str, stats: ReadStats, records_file: Path,
           events: int, anchor: str, rev: bool, unparsed: int, hosts: Counter) -> SourceEntry:
    host = sorted(hosts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0] if hosts else None
    notes = []
    if stats.invalid_utf8:
        notes.append(f"{stats.invalid_utf8} line(s) held invalid UTF-8 (decoded with U+FFFD)")
    if stats.nul_bytes > stats.hole_bytes:
        notes.append(f"{stats.nul_bytes - stats.hole_bytes} NUL byte(s) replaced with U+FFFD")
    if stats.hole_bytes:
        notes.append(f"{stats.hole_bytes} NUL byte(s) in long runs (holes of a file copied half-written) kept as "
                     f"`\ufffd<N NUL bytes>` markers")
    if stats.crlf:
        notes.append(f"{stats.crlf} line(s) ended in CRLF")
    if stats.long_lines:
        notes.append(f"line {stats.long_first}: {stats.long_lines} line(s) longer than {MAX_LINE >> 20} MiB, the first "
                     f"here, were cut to their first {MAX_LINE >> 20} MiB ({stats.long_bytes} bytes left out): no log "
                     f"format writes such lines; if the file is a log, look for a binary or one-line dump inside it")
    if src.compression == JOURNAL:
        ver = journalfile.version()
        notes.append(f"a binary systemd journal file, read through `{journalfile.command(src.display)}`"
                     + (f" ({ver})" if ver else "") + ": line N is its N-th entry")
    if src.encoding:
        notes.append(f"{src.encoding.upper().replace('UTF-16-', 'UTF-16')} text, read as UTF-8 (line numbers are "
                     f"the file's)")
    if stats.pod_lines:
        notes.append(f"{stats.pod_lines} line(s) behind kubectl's `[pod/NAME/CONTAINER]` prefix (logs --prefix): "
                     f"the pod is the host of their records")
    if stats.ansi_lines:
        notes.append(f"{stats.ansi_lines} line(s) held terminal colour codes (ANSI escape sequences), taken out "
                     f"before parsing")
    if (cuts := cut_lines(stats.cut_lengths)) is not None:
        notes.append(cut_note(*cuts))
    notes.extend(_out_of_range(records_file))
    summary = _summary(records_file)
    return SourceEntry(
        source_id=sid, path=src.display, sha256=sha, size=_size(src), format=det.primary, formats=list(det.formats),
        confidence=det.confidence, host=host, records=summary["records"], lines=stats.lines, unparsed=unparsed,
        invalid_utf8=stats.invalid_utf8, first_ts=summary["first_ts"], last_ts=summary["last_ts"],
        time_anchor=anchor, ts_sources=summary["ts_sources"], events=events, tool_version=__version__,
        fingerprint=fp, reversed=rev, notes=notes,
    )


@dataclass(frozen=True)
class ZoneResult:
    path: str
    said: str          # the source's new time note, or why its zone stays assumed
    moved: bool        # its times were moved by the offset found
    warning: bool      # pairs were found but do not settle the zone


_ASSUMED_ZONE = (TimeSource.ZONE_ASSUMED.value, TimeSource.YEAR_INFERRED.value)


def _zone_candidate(e: SourceEntry) -> bool:
    """A source whose stamps print no zone, read with the default UTC, whose zone was not read off other lines
    before."""
    return (any(e.ts_sources.get(k) for k in _ASSUMED_ZONE) and _read_with_of(e)["tz"] == "UTC"
            and ZONE_MARK not in e.time_anchor)


def infer_zones(store: Store, opts: IngestOptions) -> list[ZoneResult]:
    """Read the zone of sources whose stamps print none (an SGLang log, `dmesg -T`) off the lines a source with exact
    times also holds (the journal: `zonefix`); move their times when it is not UTC. Not when --tz was given."""
    if "tz" in _given(opts):
        return []
    entries = store.sources()
    todo = [e for e in entries if _zone_candidate(e)]
    exact = [e for e in entries if e.ts_sources.get(TimeSource.EXACT.value)]
    if not todo or not exact:
        return []
    try:  # the keys and lines alone of the lines that can pair, streamed: a 4 GiB corpus's journal holds 1.5 M of
        # them, whose times, paths and hosts kept too took the ingest's peak 90 MiB up (to 428 MiB)
        step = key_step(sum(x.records for x in exact))
        keys = pl.concat([_exact_lines(store, x).select("_h", "line", pl.lit(i, pl.UInt16).alias("_x"))
                          .filter(sampled(step)) for i, x in enumerate(exact)]).collect(engine="streaming")
    except FileNotFoundError:   # another process replaced a source meanwhile: its next ingest reads the zones
        return []
    out: list[ZoneResult] = []
    if keys.is_empty():
        return out
    for e in todo:
        for _ in range(REWRITE_TRIES):
            done = _zone_source(store, e, exact, keys, step)
            if done is not False:
                if done is not None:
                    out.append(done)
                break
            e = store.entry(e.source_id)
            if e is None or not _zone_candidate(e):
                break
    return out


def _exact_lines(store: Store, e: SourceEntry) -> pl.LazyFrame:
    """The records of `e` with exact times that can pair (the kernel's lines, those that begin as an SGLang line
    does), with their key `_h`."""
    return keyed(store.records_of(e).filter(pl.col("ts_source") == TimeSource.EXACT.value))


def _zone_source(store: Store, e: SourceEntry, exact: Sequence[SourceEntry], keys: pl.DataFrame,
                 step: int) -> ZoneResult | None | bool:
    """One source's zone from the lines of the `exact` sources (`keys`: the key, line and index in `exact` of
    theirs, 1 in `step` of them): the result, None when no line pairs, False when another process rewrote a source
    meanwhile (nothing changed then)."""
    try:
        src = store.records_of(e)
        assumed = pl.col("ts_source").is_in(_ASSUMED_ZONE)
        mine = (src.filter(assumed, pl.col("ts").is_not_null(), KERNEL | pl.col("ts_text").str.starts_with("["))
                .select(source_key(), "ts").filter(sampled(step), pl.col("_h").is_in(keys.get_column("_h").implode()))
                .collect(engine="streaming"))
        if mine.is_empty():
            return None
        theirs = keys.filter(pl.col("_h").is_in(mine.get_column("_h").implode()))
        held = pl.concat([  # the few lines paired, read by their line numbers (not their text again)
            store.records_of(exact[i]).filter(pl.col("line").is_in(part.get_column("line").implode()))
            .select(pl.col("ts").alias("ts_exact"), "path", "line", "host").collect()
            .join(part.select("_h", "line"), on="line")
            for (i,), part in theirs.group_by("_x", maintain_order=True)])
        held = held.select("_h", "ts_exact", "path", "line", "host")
        if e.host is not None:  # a source that names its host pairs with that host's lines only
            held = held.filter(pl.col("host").is_null() | (pl.col("host") == e.host))
        pairs = unique_pairs(mine, held)
    except FileNotFoundError:
        return False
    f: ZoneFinding | None = find_offset(pairs)
    if f is None:
        return None
    if f.offset is None:
        return ZoneResult(e.path, disagreement(f), moved=False, warning=True)
    note = zone_note(e.time_anchor, f, _holders(pairs))
    if f.offset == 0:
        ok = store.update(replace(e, time_anchor=note), based_on=e)
        return ZoneResult(e.path, note, moved=False, warning=False) if ok else False
    moved = pl.when(assumed).then(pl.col("ts") - pl.duration(seconds=f.offset)).otherwise(pl.col("ts"))
    if not _rewrite_times(store, e, src.with_columns(moved.alias("ts")),
                          lambda _, summary: replace(e, first_ts=summary["first_ts"], last_ts=summary["last_ts"],
                                                     time_anchor=note)):
        return False
    return ZoneResult(e.path, note, moved=True, warning=False)


def _holders(pairs: pl.DataFrame) -> str:
    """`journal-k26.log`, or `a.log and b.log`, or `a.log and 2 other sources`: the sources of the exact lines."""
    paths = sorted(set(pairs.get_column("path").to_list()))
    if len(paths) == 1:
        return paths[0]
    return f"{paths[0]} and {paths[1]}" if len(paths) == 2 else f"{paths[0]} and {len(paths) - 1} other sources"


def anchor_kernel_clocks(store: Store, opts: IngestOptions, rules) -> list[BootAnchor]:
    """Pair monotonic-only kernel records with wall-timed kernel records; rewrite the sources anchored."""
    mono_sources = [e for e in store.sources() if e.ts_sources.get(TimeSource.MONOTONIC_ONLY.value)]
    found: list[BootAnchor] = []
    for e in mono_sources:
        for _ in range(REWRITE_TRIES):
            anchors = _anchor_source(store, e, opts)
            if anchors is not None:
                found.extend(anchors)
                break
            e = store.entry(e.source_id)  # another process rewrote the source meanwhile: from what it wrote
            if e is None or not e.ts_sources.get(TimeSource.MONOTONIC_ONLY.value):
                break
        else:
            raise StoreError(f"{e.path}: its store files kept changing while its dmesg clock was anchored "
                             f"({REWRITE_TRIES} tries); run the ingest again once the other writers are done")
    return found


def _anchored(anchors: Mapping[str, BootAnchor], ts_sources: Mapping[str, int], which: str = "") -> str:
    """A source's time note once boots of it are anchored: how (`which` boots, when not all), and how many
    records of other boots are still monotonic only."""
    left = ts_sources.get(TimeSource.MONOTONIC_ONLY.value, 0)
    how = "; ".join(sorted({a.how for a in anchors.values()}))
    return how + (f"{which}; {left} record(s) of other boots still monotonic only" if left else "")


REWRITE_TRIES = 5  # a source rewritten by another process meanwhile is computed again, up to this many times


def kernel_timestamp_anchor(store: Store, mono: pl.LazyFrame, host: str | None) -> dict[str, BootAnchor]:
    """The boot time `systemctl show` printed (`KernelTimestamp=`, the manager's property: when the kernel
    started) for a source whose unanchored records (`mono`) are of one boot (a raw dmesg is the current boot's ring
    buffer, the boot `systemctl show` describes when both were copied off the box together). Only when the store's
    `systemctl show` outputs name one such time; {} otherwise. The source's boots are read only when the store
    holds a `systemctl show` output."""
    shows = [e for e in store.sources() if "systemctl-show" in (e.formats or [e.format])]
    if not shows:
        return {}
    boots = mono.select(pl.col("boot_id").unique()).collect().get_column("boot_id").to_list()
    if len(boots) != 1:
        return {}
    found: dict[datetime, str] = {}
    for e in shows:
        try:
            rows = (store.records_of(e).filter(pl.col("message").str.starts_with("KernelTimestamp="),
                                               pl.col("ts").is_not_null())
                    .select("ts", "path", "line").collect())
        except FileNotFoundError:
            continue
        for ts, path, line in rows.iter_rows():
            found.setdefault(ts, f"{path}:{line}")
    if len(found) != 1:
        return {}
    (bt, where), = found.items()
    how = (f"boot time {bt.strftime('%Y-%m-%d %H:%M:%S')} UTC from systemctl show's KernelTimestamp= ({where}), "
           f"read as the boot of this dmesg (the current one when both were copied)")
    return {boots[0]: BootAnchor(boots[0], host, bt, 0, 0.0, how)}


def _anchor_source(store: Store, e: SourceEntry, opts: IngestOptions) -> list[BootAnchor] | None:
    """Anchor one source's monotonic-only records (its files as `e` lists them). The anchors applied, or
    None when another process rewrote the source's files meanwhile (nothing changed then)."""
    try:
        src = store.records_of(e)
        mono_only = pl.col("ts_source") == TimeSource.MONOTONIC_ONLY.value
        # the messages in both are found by their hashes first (8 bytes each, not the text of every kernel line),
        # then the few that share a hash are compared whole
        h = pl.col("message").hash(seed=0)
        mono_h = src.filter(mono_only).select(h.alias("_h")).unique().collect(engine="streaming")
        walled = (store.records()
                  .filter(pl.col("ident") == "kernel", pl.col("ts").is_not_null(),
                          pl.col("ts_source") != TimeSource.BOOT_ANCHORED.value,
                          h.is_in(mono_h.get_column("_h").implode()))
                  .select("ts", "message", "host").collect(engine="streaming"))
        anchors: dict[str, BootAnchor] = {}
        if walled.height:
            walled_h = walled.select(h.alias("_h")).unique().get_column("_h")
            mono = (src.filter(mono_only, h.is_in(walled_h.implode())).select("boot_id", "mono", "message", "host")
                    .collect(engine="streaming"))
            walled = walled.join(mono.select("message").unique(), on="message", how="semi", maintain_order="left")
            mono = mono.join(walled.select("message").unique(), on="message", how="semi", maintain_order="left")
            anchors = {a.boot_id: a for a in find_anchors(mono, walled)}
        if not anchors:
            anchors = kernel_timestamp_anchor(store, src.filter(mono_only), opts.host)
    except FileNotFoundError:
        return None  # its files were replaced (and the old ones deleted) since `e` was read
    if not anchors:
        return []
    def anchored(records_file: Path, summary: dict) -> SourceEntry:
        hosts = pl.scan_parquet(records_file).select(pl.col("host").drop_nulls().mode().sort().first()).collect()
        return replace(e, first_ts=summary["first_ts"], last_ts=summary["last_ts"], ts_sources=summary["ts_sources"],
                       host=hosts.item() or e.host, time_anchor=_anchored(anchors, summary["ts_sources"]))

    if not _rewrite_times(store, e, apply_anchor(src, anchors, opts.host), anchored):
        return None
    return list(anchors.values())


def _rewrite_times(store: Store, e: SourceEntry, records: pl.LazyFrame,
                   entry_for: Callable[[Path, dict], SourceEntry]) -> bool:
    """Replace a listed source's records with `records` (the same, their times moved: a boot anchor, a zone) and its
    events with theirs retimed to match; its entry becomes `entry_for(records file, its _summary)`, and its profile
    is computed again. False when another process rewrote the source meanwhile (nothing changed then)."""
    staging = store.staging()
    try:
        records_file = staging / "records.parquet"
        try:
            sink_parquet(records, records_file, RECORD_SCHEMA)
            events = retime_events(store.events_of(e).collect(), records_file)
        except FileNotFoundError:
            return False
        write_parquet(events, staging / "events.parquet", EVENT_SCHEMA)
        entry = entry_for(records_file, _summary(records_file))
        if not store.update(entry, records_file, staging / "events.parquet", based_on=e):
            return False
    finally:
        store.cleanup(staging)
    warm_profile(store, e.source_id)
    return True


RESCAN_ROWS = 131_072   # records read at a time: the matcher keeps only their candidates


def _rescan_events(lf: pl.LazyFrame, n: int, rules, budget: RegexBudget) -> list[pl.DataFrame]:
    """The events of a stored source's records, read a slice at a time and matched as ingest matches a stream
    (a context pattern reads across the slices' cuts)."""
    if rules is None:
        return []
    from .match import Matcher

    matcher = Matcher(rules, budget=budget)
    events = []
    for i in range(0, max(n, 1), RESCAN_ROWS):
        if matcher.keep(lf.slice(i, RESCAN_ROWS).collect()):
            events.append(matcher.flush())
    return [*events, matcher.finish()]


def rescan(store: Store, opts: IngestOptions, on_timeout: Callable[[RuleTimeout], None] | None = None) -> int:
    """Re-apply the rule packs to every stored source, in slices; returns the number of events. A source
    whose records another process rewrote meanwhile (dmesg anchoring) is matched again from the new ones.
    Each `engine: regex` rule that timed out on a source is passed to `on_timeout`."""
    rules = _load_rules(opts)
    total = 0
    for sid in [e.source_id for e in store.sources()]:
        for _ in range(REWRITE_TRIES):
            e = store.entry(sid)
            if e is None:
                break  # the source went away meanwhile
            try:
                lf = store.records_of(e)
                budget = RegexBudget()
                events = _rescan_events(lf, e.records, rules, budget)
            except FileNotFoundError:
                continue  # its records were replaced since `e` was read
            ev = pl.concat(events) if events else empty_events()
            staging = store.staging()
            try:
                write_parquet(ev, staging / "e.parquet", EVENT_SCHEMA)
                done = store.update_events(sid, staging / "e.parquet", ev.height,
                                           records_name=e.records_name or plain_name(sid))
            finally:
                store.cleanup(staging)
            if done:
                for t in budget.timeouts():
                    if on_timeout is not None:
                        on_timeout(t)
                total += ev.height
                break
        else:
            raise StoreError(f"{store.path}: the records of source {sid} kept changing while they were "
                             f"matched ({REWRITE_TRIES} tries); run `forensics rescan` again once the other "
                             f"writers are done")
    store.settle()
    return total


__all__ = ["ingest", "rescan", "IngestOptions", "IngestReport", "SourceResult"]
