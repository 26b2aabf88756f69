"""The pieces that let incidents read only the events they need give what reading every event gave: the fold
of copies (sessions, open groups), the first-line signature computed by polars, the coverage index (spans
from a frame, counted by bisection), and the correlations fired only where they can matter."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import polars as pl
import pytest

from forensics.correlate import Timeline, correlate_views, find_matches, resolve
from forensics.correlation_packs import load_correlations
from forensics.coverage import Coverage, CoverageReport, SourceSpan
from forensics.eventview import SYSTEMD_KINDS, EventView, entities_of
from forensics.correlate_local import LocalMatcher, independent
from forensics.correlate_store import (
    _DUP_US,
    PY_WHITESPACE,
    _sessions,
    _signature_expr,
    fold_copies,
    host_local,
    signature,
    units_by_pid,
)

T0 = datetime(2025, 5, 25, 20, 0, 0, tzinfo=timezone.utc)


# ---------------------------------------------------------------------------------------- references
# the implementations these replaced, kept here as the definition of the result


def _ref_fold(evs: list[EventView]) -> tuple[list[EventView], dict[str, tuple[EventView, ...]]]:
    ts_rank = {"exact": 0, "boot_anchored": 1, "zone_assumed": 2, "year_inferred": 3}

    def compatible(a: EventView, b: EventView) -> bool:
        for ent in ("unit", "pid"):
            va, vb = a.entities.get(ent), b.entities.get(ent)
            if va is not None and vb is not None and va != vb:
                return False
        return True

    def score(e: EventView) -> tuple:
        return (e.entities.get("unit") is None, e.host is None, ts_rank.get(e.ts_source, 5), -len(e.fields),
                e.path, e.line)

    groups: list[list[EventView]] = []
    by_key: dict[tuple, list[int]] = {}
    for e in evs:
        key = (e.kind, e.host, signature(e))
        placed = False
        for gi in by_key.get(key, []):
            g = groups[gi]
            head = g[0]
            same = [x for x in g if x.source_id == e.source_id]
            if same and (e.kind not in SYSTEMD_KINDS or min(abs(x.line - e.line) for x in same) <= 5):
                continue
            if (head.t is None) != (e.t is None):
                continue
            if head.t is not None and abs(head.t - e.t) > 2.0:
                continue
            if all(compatible(x, e) for x in g):
                g.append(e)
                placed = True
                break
        if not placed:
            by_key.setdefault(key, []).append(len(groups))
            groups.append([e])
    prim, copies = [], {}
    for g in groups:
        g.sort(key=score)
        p = g[0]
        ents = dict(p.entities)
        for x in g[1:]:
            for k, v in x.entities.items():
                ents.setdefault(k, v)
        if ents != p.entities:
            p = replace(p, entities=ents, unit=ents.get("unit"))
        prim.append(p)
        if len(g) > 1:
            copies[p.id] = tuple(g[1:])
    prim.sort(key=lambda e: e.seq)
    return prim, copies


def _ref_report(spans: list[SourceSpan], host: str | None, unit: str | None, at: datetime, since: datetime,
                until: datetime) -> CoverageReport:
    from forensics.coverage import _log_words, hms as _hms

    spans = sorted(spans, key=lambda s: (s.path, s.host or "", s.log, s.unit or ""))
    spans = [s for s in spans if s.host == host or s.host is None]
    ingested: dict[str, dict[str, list[str]]] = {}
    notes: list[str] = []
    for s in spans:
        if s.first is not None and s.last is not None and s.first <= until and s.last >= since:
            units = ingested.setdefault(s.path, {}).setdefault(s.log, [])
            if s.unit and s.log != "kernel" and s.unit not in units:
                units.append(s.unit)
    kernel_spans = [s for s in spans if s.log == "kernel"]
    kernel = any(s.first is not None and s.last is not None and s.first <= at
                 and s.last >= at - timedelta(seconds=5) for s in kernel_spans)
    for s in kernel_spans:
        if s.untimed:
            notes.append(f"{s.path}: {s.untimed} kernel line(s) have no wall-clock time (kernel seconds not "
                         f"anchored to a boot time), so they cannot be placed in the window.")
        elif not kernel and s.last is not None and s.last < at:
            notes.append(f"{s.path}: the kernel log ends at {_hms(s.last)}, before {_hms(at)}.")
        elif not kernel and s.first is not None and s.first > at:
            notes.append(f"{s.path}: the kernel log starts at {_hms(s.first)}, after {_hms(at)}.")
    unit_output = False
    for s in spans:
        if s.log != "service" or s.first is None or s.last is None:
            continue
        if unit is not None and s.unit not in (unit, None):
            continue
        reaches = max((o.last for o in spans if o.path == s.path and o.last is not None), default=s.last)
        if s.first <= at and reaches >= at - timedelta(seconds=60):
            unit_output = True
    missing = []
    h = host or "the host"
    if not kernel:
        missing.append(f"the kernel log (dmesg or journalctl -k) of {h} around {_hms(at)}")
    if not unit_output:
        missing.append(f"the service's own output (journalctl -u {unit})" if unit else "the service's own output")
    ing = tuple(f"{p} (" + ", ".join(_log_words(log, us, unit) for log, us in sorted(logs.items())) + ")"
                for p, logs in sorted(ingested.items()))
    return CoverageReport(kernel=kernel, unit_output=unit_output, ingested=ing, missing=tuple(missing),
                          notes=tuple(dict.fromkeys(notes)))


# ---------------------------------------------------------------------------------------- helpers


def _view(seq: int, t: float | None, kind: str, message: str, *, source: str = "s1", line: int = 1,
          host: str | None = "h", unit: str | None = None, pid: int | None = None, fields: dict | None = None,
          ts_source: str = "exact") -> EventView:
    fields = fields or {}
    ts = None if t is None else T0 + timedelta(seconds=t)
    ents = entities_of(kind, host, unit, pid, fields)
    return EventView(seq=seq, id=f"{source}:{line}:r.{kind}", ts=ts, t=None if ts is None else ts.timestamp(),
                     ts_source=ts_source, kind=kind, rule=f"r.{kind}", severity="info", role="context", host=host,
                     unit=ents.get("unit"), pid=pid, title=kind, fields=fields, message=message, source_id=source,
                     path=f"{source}.log", line=line, line_end=line, format="x", entities=ents)


def _random_events(rng: random.Random, n: int) -> list[EventView]:
    kinds = ["service_started", "segfault", "oom_kill", "python_traceback"]
    texts = ["x.service: Started.", "[2025-05-25 20:00:01 TP0] boom", "  kill\\n more", "\x1cweird\x1c", "a"]
    out = []
    t = 0.0
    for i in range(n):
        t += rng.choice([0.0, 0.3, 1.0, 1.9, 2.0, 2.1, 5.0])
        src = rng.choice(["s1", "s2", "s3"])
        out.append(_view(0, None if rng.random() < 0.05 else t, rng.choice(kinds), rng.choice(texts), source=src,
                         line=rng.randint(1, 40), host=rng.choice(["h", "h", "g", None]),
                         unit=rng.choice([None, None, "x.service", "y.service"]),
                         pid=rng.choice([None, 7, 8]), ts_source=rng.choice(["exact", "year_inferred"]),
                         fields=rng.choice([{}, {"pid": 7}, {"a": 1, "b": 2}])))
    out.sort(key=lambda e: (e.t is None, e.t or 0.0, e.path, e.line))
    return [replace(e, seq=i) for i, e in enumerate(out)]


# ---------------------------------------------------------------------------------------- the fold


@pytest.mark.parametrize("seed", range(30))
def test_fold_is_the_pairwise_fold(seed: int) -> None:
    evs = units_by_pid(_random_events(random.Random(seed), 120))
    assert fold_copies(evs) == _ref_fold(evs)


def test_fold_of_a_long_run_of_one_line_is_linear() -> None:
    # the same journal line every 3 s for a day: the pairwise fold looked at every earlier group each time
    evs = [_view(i, 3.0 * i, "service_started", "x.service: Started x.", line=10 * i + 1) for i in range(30000)]
    prim, copies = fold_copies(evs)
    assert len(prim) == 30000 and not copies


def _ref_sessions(keyed: pl.DataFrame) -> list[set[int]]:
    """The sessions by their definition: per (kind, host, signature), timed events in time order chained while
    no more than DUP apart, the untimed ones together."""
    groups: dict[tuple, list[tuple]] = {}
    for seq, kind, host, sig, t in keyed.iter_rows():
        groups.setdefault((kind, host, sig, t is None), []).append((t, seq))
    out = []
    for (_, _, _, untimed), evs in groups.items():
        evs.sort(key=lambda x: (x[0] or 0, x[1]))
        cur: set[int] = set()
        for i, (t, seq) in enumerate(evs):
            if cur and not untimed and t - evs[i - 1][0] > _DUP_US:
                out.append(cur)
                cur = set()
            cur.add(seq)
        out.append(cur)
    return sorted(out, key=min)


def _partition(sess: pl.DataFrame) -> list[set[int]]:
    by: dict[int, set[int]] = {}
    for seq, s in sess.iter_rows():
        by.setdefault(s, set()).add(seq)
    return sorted(by.values(), key=min)


@pytest.mark.parametrize("seed", range(8))
def test_fold_sessions_are_runs_of_one_kind_host_and_line(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The narrow frame's fold sessions (found by a stable sort on a hash of the keys) are the sessions by their
    definition; and when two groups share a hash (made to here: every hash the same), the keys are sorted on."""
    rng = random.Random(seed)
    rows = []
    for _ in range(400):
        t = None if rng.random() < 0.15 else rng.choice([0, 1, 2, 3, 50, 51, 400]) * _DUP_US // 2 + rng.randrange(3)
        rows.append((rng.choice(["a", "b", ""]), rng.choice(["h1", "h2", None]), rng.randrange(4), t))
    rows.sort(key=lambda r: (r[3] is None, r[3] or 0))  # seq order: time order, the untimed last
    keyed = pl.DataFrame({"_seq": list(range(len(rows))), "kind": [r[0] for r in rows],
                          "host": [r[1] for r in rows], "_sig": [r[2] for r in rows], "t_us": [r[3] for r in rows]},
                         schema={"_seq": pl.UInt32, "kind": pl.String, "host": pl.String, "_sig": pl.UInt64,
                                 "t_us": pl.Int64})
    want = _ref_sessions(keyed)
    assert _partition(_sessions(keyed)) == want
    monkeypatch.setattr("forensics.correlate_store._group_hash", lambda: pl.lit(0, dtype=pl.UInt64))
    assert _partition(_sessions(keyed)) == want


def test_polars_signature_is_the_python_one() -> None:
    assert PY_WHITESPACE == "".join(c for c in map(chr, range(0x110000)) if c.isspace())
    rng = random.Random(3)
    alphabet = [" ", "\t", "\n", "\x1c", "\x85", "\u3000", "a", "[", "]", "2", "-", ":", "T", "P", "_", "0", "x", "é"]
    msgs = ["", " [2025-05-25 20:00:00.123 TP0 DP1] hello ", "\x1f[2025-05-25 1:2:3,4] x\ny",
            "[2025-05-25 20:00:00 TP0]x", "\u2003[2025-05-25 20:00:00] \u2003 z \n w"]
    msgs += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(2000)]
    got = pl.DataFrame({"message": msgs}).select(_signature_expr())["message"].to_list()
    want = [signature(_view(0, 0.0, "segfault", m)) for m in msgs]
    assert got == want


# ---------------------------------------------------------------------------------------- coverage


def _random_spans(rng: random.Random) -> list[SourceSpan]:
    out = []
    for _ in range(rng.randint(1, 60)):
        first = None if rng.random() < 0.1 else T0 + timedelta(seconds=rng.randint(0, 4000))
        last = None if first is None else first + timedelta(seconds=rng.choice([0, 30, 200, 900, 5000, 90000]))
        out.append(SourceSpan(path=rng.choice(["a.log", "b.log", "c.log"]), format="f",
                              host=rng.choice(["h", "g", None]), log=rng.choice(["kernel", "systemd", "service"]),
                              unit=rng.choice([None, "", "u1.service", "u2.service", "u3.service", "u4.service"]),
                              first=first, last=last, records=1, untimed=rng.choice([0, 0, 3])))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_coverage_reports_are_the_scan_reports(seed: int) -> None:
    rng = random.Random(seed)
    spans = _random_spans(rng)
    frame = pl.DataFrame([vars(s) for s in spans], schema={
        "path": pl.String, "format": pl.String, "host": pl.String, "log": pl.String, "unit": pl.String,
        "first": pl.Datetime("us", "UTC"), "last": pl.Datetime("us", "UTC"), "records": pl.UInt32,
        "untimed": pl.UInt32})
    covs = [Coverage(spans), Coverage.from_frame(frame)]
    for _ in range(30):
        at = T0 + timedelta(seconds=rng.randint(-300, 5000))
        since, until = at - timedelta(seconds=rng.choice([60, 180])), at + timedelta(seconds=60)
        host, unit = rng.choice(["h", "g", None]), rng.choice([None, "u1.service", "u2.service", "zz"])
        want = _ref_report(spans, host, unit, at, since, until)
        for cov in covs:
            assert cov.report(host, unit, at, since, until) == want
    assert Coverage.from_frame(frame).spans == Coverage(spans).spans


# ---------------------------------------------------------------------------------------- local firing


def _storm(rng: random.Random) -> list[EventView]:
    """Crash-looping units, SIGKILLs, OOM kills, child failures and tracebacks on two hosts."""
    kinds = ["service_exited", "service_failed", "service_killed", "oom_kill", "child_failed", "python_traceback",
             "cgroup_kill_failed", "cuda_oom", "server_config", "server_ready", "nccl_timeout", "gpu_xid"]
    out = []
    for i in range(400):
        kind = rng.choice(kinds)
        unit = rng.choice(["a.service", "b.service"])
        fields: dict = {"signal": "KILL"} if kind == "service_killed" else {}
        if kind == "oom_kill":
            fields = {"pid": rng.choice([10, 11]), "task_memcg": f"/system.slice/{unit}"}
        if kind == "gpu_xid":
            fields = {"xid": 79, "pci": rng.choice(["0000:01:00", "0000:02:00"])}
        e = _view(0, rng.uniform(0, 20000), kind, f"{kind} {i}", source=rng.choice(["j", "k"]), line=i + 1,
                  host=rng.choice(["h1", "h2"]), unit=None if kind in ("oom_kill", "gpu_xid") else unit,
                  fields=fields)
        out.append(replace(e, severity="error" if kind in ("service_killed", "oom_kill", "cuda_oom") else "info",
                           role="cause" if kind in ("oom_kill", "nccl_timeout") else "context"))
    out.sort(key=lambda e: (e.t, e.line))
    return [replace(e, seq=i) for i, e in enumerate(out)]


@pytest.mark.parametrize("seed", range(6))
def test_local_firing_gives_the_findings_that_matter(seed: int) -> None:
    from forensics.clustering import cluster, significant

    corrs = load_correlations()
    assert host_local(corrs)
    assert any(independent(c) for c in corrs) and not all(independent(c) for c in corrs)
    evs = _storm(random.Random(seed))
    cov = Coverage([])
    full = correlate_views(evs, corrs, cov)
    lm = LocalMatcher(Timeline(evs), corrs, cov)
    for e in evs:
        if significant(e):
            lm.ask_near(e, roles_only=False)
    while True:
        found = resolve(lm.run())
        clusters = cluster(evs, found, 900.0)
        if not sum(lm.ask_span(c.host, c.start, c.end) for c in clusters if c.start is not None):
            break
    def attached(fs: list, cl: list) -> list:
        ids = {e.id for c in cl for e in c.events}
        return [json.dumps([f.conclusion.statement, f.event_ids, f.rules], default=str) for f in fs
                if ids & {f.anchor, f.conclusion.cause_event, *f.conclusion.explains, *f.event_ids}
                or any(c.host == e.host and c.start <= e.t <= c.end for c in cl for e in evs if e.id == f.anchor)]

    full_clusters = cluster(evs, full, 900.0)
    assert [[e.id for e in c.events] for c in clusters] == [[e.id for e in c.events] for c in full_clusters]
    assert attached(found, clusters) == attached(full, full_clusters)


def test_local_firing_leaves_far_firings_alone() -> None:
    """A unit that exits and fails every 3 minutes all day, and one SIGKILL: only the firings around it."""
    corrs = load_correlations()
    evs = []
    for i in range(400):
        evs.append(_view(0, 180.0 * i, "service_exited", f"x.service: Main process exited {i}", source="j",
                         line=3 * i + 1, unit="x.service"))
        evs.append(_view(0, 180.0 * i + 1, "service_failed", f"x.service: Failed {i}", source="j", line=3 * i + 2,
                         unit="x.service"))
    kill = _view(0, 180.0 * 200 + 90, "service_killed", "y.service: killed", source="j", line=5000, unit="y.service",
                 fields={"signal": "KILL"})
    evs.append(replace(kill, severity="error"))
    evs.sort(key=lambda e: (e.t, e.line))
    evs = [replace(e, seq=i) for i, e in enumerate(evs)]
    lm = LocalMatcher(Timeline(evs), corrs, Coverage([]))
    lm.ask_near(evs[[e.kind for e in evs].index("service_killed")], roles_only=False)
    lm.run()
    every = sum(len(find_matches(Timeline(evs), c, Coverage([]))) for c in corrs)
    assert every >= 400 and len(lm.matches) < 20


# ---------------------------------------------------------------------------------------- loading by windows


def _events_frame(seed: int, n: int = 400) -> pl.LazyFrame:
    rnd = random.Random(seed)
    kinds = ["service_started", "service_failed", "python_traceback", "journal_suppressed", "oom_kill"]
    rows = []
    for i in range(n):
        untimed = rnd.random() < 0.1
        ts = None if untimed else T0 + timedelta(seconds=rnd.randrange(0, 80) / 4)  # many on a window's edges
        rows.append({"ts": ts, "ts_source": "exact", "kind": rnd.choice(kinds), "rule": "r",
                     "severity": rnd.choice(["error", "info"]), "role": rnd.choice(["cause", "symptom", "context"]),
                     "host": rnd.choice(["a", "b", None]), "unit": rnd.choice(["x.service", "y.service", None, ""]),
                     "pid": rnd.choice([None, 7, 8]), "title": "t", "fields": "{}", "message": f"m{rnd.randrange(5)}",
                     "source_id": "s", "path": rnd.choice(["p1", "p2"]), "line": i + 1, "line_end": i + 1,
                     "format": "journal-short-iso"})
    from forensics.schema import EVENT_SCHEMA
    return pl.DataFrame(rows, schema=EVENT_SCHEMA).lazy().with_row_index("_row")


@pytest.mark.parametrize("seed", range(6))
def test_load_windows_is_the_masks_load(seed: int) -> None:
    """Loading by windows (slices of the time-ordered narrow frame) prepares and returns what the `any_horizontal`
    of the windows' masks did, at the edges of a window too (its slack), and when the frame were out of order."""
    from forensics.correlate_store import EventSource, unit_may_be, window_mask

    rnd = random.Random(seed)
    lf = _events_frame(seed)
    base = T0.timestamp()
    windows = []
    for _ in range(rnd.randrange(1, 6)):
        lo = base + rnd.randrange(0, 80) / 4
        hi = lo + rnd.choice([0, 0.25, 1, 3])
        mask = (pl.col("host") == rnd.choice(["a", "b"])) & unit_may_be([rnd.choice(["x.service", "y.service"])])
        if rnd.random() < 0.5:
            mask = mask & pl.col("kind").is_in(["service_started", "journal_suppressed"])
        windows.append((lo, hi, mask))

    def ids(evs: list[EventView]) -> list[str]:
        return [e.id for e in evs]

    ref = EventSource(lf, None)
    want = ref.load(pl.any_horizontal([window_mask(lo, hi) & m for lo, hi, m in windows]))
    got_src = EventSource(lf, None)
    got = got_src.load_windows(windows)
    assert ids(got) == ids(want)
    assert sorted(got_src.primaries) == sorted(ref.primaries)
    assert got_src.copies.keys() == ref.copies.keys()
    shuffled = EventSource(lf, None)
    shuffled.narrow = shuffled.narrow.sample(fraction=1.0, shuffle=True, seed=seed)
    assert ids(shuffled.load_windows(windows)) == ids(want)
    assert EventSource(lf, None).load_windows([]) == []
