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

What an ingest is asked (`IngestOptions`) is in `ingestoptions`; a source's files made final (events retimed, the
summary, a rewrite with moved times) in `landed`; the times fixed across landed sources in `crosstimes`.
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

from . import __version__, journalfile
from .ansi import strip_lines, strip_series
from .cutlines import cut as cut_lines, cut_lengths, merge as merge_cut, note as cut_note
from .podprefix import Pods, strip_series as pod_lines
from .vllmprefix import Repeats
from .anchor import BootAnchor, apply_anchor, boot_time_anchor
from .boothosts import BootHosts
from .crosstimes import ZoneResult, anchor_kernel_clocks, anchored_note, infer_zones
from .detect import Detection, detect
from .formats import FORMATS, StructuredFormat
from .ingestoptions import IngestOptions, changed_options, describe_change, read_with, reading_options
from .landed import REWRITE_TRIES, final_events, out_of_range_note, records_summary, warm_profile
from .normalise import normalise_batch, open_block
from .timeparse import MONTHS
from .timefix import EXTRA, SourceClock, YearAnchor
from .parse import ParseContext, parse_lines, parse_structured, resolve
from .regexbudget import RegexBudget, RuleTimeout
from .slots import WorkSlots
from .schema import EVENT_SCHEMA, RECORD_SCHEMA, YEAR_OWN, TimeSource, empty_events, empty_records
from .sources import JOURNAL, MAX_LINE, ReadStats, Source, SourceError, expand, head_bytes, read_batches
from .sourcefile import remember
from .store import SourceEntry, Store, StoreError, plain_name, sink_parquet, write_parquet


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
    """The rule set to match with (None: --no-rules), loaded while the inputs are detected (`ingest` runs this on a
    thread of its own); the matcher's module is imported there too, off the first source's path."""
    if not opts.match:
        return None
    import importlib

    from .rulepacks import load_rules

    importlib.import_module(".match", __package__)
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
                final = final_events(events, records_file, sid, times)
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
                entry = replace(entry, time_anchor=anchored_note(anchor, entry.ts_sources, " (the file's last boot)"))
        if lost:
            entry = replace(entry, notes=[*entry.notes, "truncated: " + lost.removeprefix(f"{src.display}: ")])
        return entry, lost


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
    notes.extend(out_of_range_note(records_file))
    summary = records_summary(records_file)
    return SourceEntry(
        source_id=sid, path=src.display, sha256=sha, size=_size(src), format=det.primary, formats=list(det.formats),
        confidence=det.confidence, host=host, records=summary["records"], lines=stats.lines, unparsed=unparsed,
        invalid_utf8=stats.invalid_utf8, first_ts=summary["first_ts"], last_ts=summary["last_ts"],
        time_anchor=anchor, ts_sources=summary["ts_sources"], events=events, tool_version=__version__,
        fingerprint=fp, reversed=rev, notes=notes,
    )


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
