"""Property tests of the correlation engine: window edges, ordering (with slack), entity joins, an exhaustive
oracle for ordered sequences, determinism, and templates that never raise."""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timedelta, timezone

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.correlate import Timeline, correlate_views, match_at
from forensics.correlation_packs import Correlation, Join, Step
from forensics.yamlread import Location
from forensics.coverage import Coverage, CoverageReport
from forensics.eventview import views
from forensics.statements import Filler, fill, fill_prose
from forensics.model import Confidence
from forensics.schema import EVENT_SCHEMA

T0 = datetime(2025, 5, 25, 20, 0, 0, tzinfo=timezone.utc)
LOC = Location("test", 1)


def frame(rows: list[dict]) -> pl.DataFrame:
    out = []
    for i, r in enumerate(rows, start=1):
        out.append({"ts": None if r.get("t") is None else T0 + timedelta(seconds=r["t"]), "ts_source": "exact",
                    "kind": r["kind"], "rule": f"t.{r['kind']}", "severity": "error", "role": "cause",
                    "host": r.get("host", "h"), "unit": r.get("unit"), "pid": None, "title": r["kind"],
                    "fields": json.dumps(r.get("fields", {})), "message": r["kind"], "source_id": "s",
                    "path": "p.log", "line": r.get("line", i), "line_end": r.get("line", i), "format": "x"})
    return pl.DataFrame(out, schema=EVENT_SCHEMA)


def corr(steps: list[Step], anchor: str, cause: str, window: float, ordered: bool = False, slack: float = 0.0,
         join: Join = Join(same=("host",)), cid: str = "t.c") -> Correlation:
    return Correlation(id=cid, title="t", confidence=Confidence.CONFIRMED, anchor=anchor, cause=cause, window=window,
                       steps=tuple(steps), statement="s", pack="t", location=LOC, ordered=ordered, slack=slack,
                       join=join, explains=tuple(s.name for s in steps if s.name != cause))


def fires(rows: list[dict], c: Correlation) -> bool:
    return any(c.id in f.rules for f in correlate_views(views(frame(rows)), [c], Coverage([])))


# ---------------------------------------------------------------------------------------- window edges


@given(window=st.integers(1, 600), d=st.integers(-1000, 1000))
def test_window_edges_unordered(window: int, d: int) -> None:
    c = corr([Step("a", ("cuda_error",)), Step("b", ("gpu_xid",))], anchor="a", cause="b", window=window)
    rows = [{"t": 1000, "kind": "cuda_error"}, {"t": 1000 + d, "kind": "gpu_xid"}]
    assert fires(rows, c) == (abs(d) <= window)


@given(window=st.integers(1, 600), within=st.integers(1, 600), d=st.integers(-1000, 1000))
def test_step_within_overrides_window(window: int, within: int, d: int) -> None:
    c = corr([Step("a", ("cuda_error",)), Step("b", ("gpu_xid",), within=within)], anchor="a", cause="b",
             window=window)
    rows = [{"t": 1000, "kind": "cuda_error"}, {"t": 1000 + d, "kind": "gpu_xid"}]
    assert fires(rows, c) == (abs(d) <= within)


# ---------------------------------------------------------------------------------------- ordering


@given(d=st.integers(-300, 300), slack=st.sampled_from([0, 1, 5]), window=st.integers(10, 200))
def test_ordered_cause_must_come_first(d: int, slack: int, window: int) -> None:
    """Steps listed cause-then-anchor: the cause may be after the anchor by at most `slack` seconds."""
    c = corr([Step("cause", ("oom_kill",)), Step("anchor", ("service_killed",))], anchor="anchor", cause="cause",
             window=window, ordered=True, slack=slack)
    rows = [{"t": 1000 + d, "kind": "oom_kill"}, {"t": 1000, "kind": "service_killed"}]
    assert fires(rows, c) == (d <= slack and abs(d) <= window)


@given(d=st.integers(-300, 300), window=st.integers(10, 200))
def test_unordered_ignores_order(d: int, window: int) -> None:
    c = corr([Step("cause", ("oom_kill",)), Step("anchor", ("service_killed",))], anchor="anchor", cause="cause",
             window=window)
    rows = [{"t": 1000 + d, "kind": "oom_kill"}, {"t": 1000, "kind": "service_killed"}]
    assert fires(rows, c) == (abs(d) <= window)


# ---------------------------------------------------------------------------------------- entity joins

VAL = st.sampled_from([None, "x.service", "y.service"])
PID = st.sampled_from([None, 10, 11])


@given(ua=VAL, ub=VAL, pa=PID, pb=PID, ha=st.sampled_from(["h1", "h2"]), hb=st.sampled_from(["h1", "h2"]))
def test_join_any_unit_or_pid(ua: str | None, ub: str | None, pa: int | None, pb: int | None, ha: str, hb: str
                              ) -> None:
    c = corr([Step("cause", ("oom_kill",)), Step("anchor", ("cuda_error",))], anchor="anchor", cause="cause",
             window=60, join=Join(same=("host",), any=("unit", "pid")))
    rows = [{"t": 0, "kind": "oom_kill", "host": ha, "unit": ua, "fields": {} if pa is None else {"pid": pa}},
            {"t": 1, "kind": "cuda_error", "host": hb, "unit": ub, "fields": {} if pb is None else {"pid": pb}}]
    same_unit = ua is not None and ua == ub
    same_pid = pa is not None and pa == pb
    assert fires(rows, c) == (ha == hb and (same_unit or same_pid))


@given(ua=VAL, ub=VAL)
def test_join_same_needs_both_known(ua: str | None, ub: str | None) -> None:
    c = corr([Step("cause", ("oom_kill",)), Step("anchor", ("cuda_error",))], anchor="anchor", cause="cause",
             window=60, join=Join(same=("host", "unit")))
    rows = [{"t": 0, "kind": "oom_kill", "unit": ua}, {"t": 1, "kind": "cuda_error", "unit": ub}]
    assert fires(rows, c) == (ua is not None and ua == ub)


def test_cgroup_gives_the_unit() -> None:
    c = corr([Step("cause", ("oom_kill",)), Step("anchor", ("service_killed",))], anchor="anchor", cause="cause",
             window=60, join=Join(same=("host",), any=("unit",)))
    rows = [{"t": 0, "kind": "oom_kill", "fields": {"pid": 5, "cgroup": "/system.slice/x.service"}},
            {"t": 1, "kind": "service_killed", "unit": "x.service"}]
    assert fires(rows, c)
    rows[0]["fields"]["cgroup"] = "/user.slice/user-1000.slice/session-3.scope"
    assert not fires(rows, c)


# ---------------------------------------------------------------------------------------- an exhaustive oracle

EV = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 20), st.sampled_from(["u1", "u2"])),
              min_size=1, max_size=8)
KIND = {"a": "oom_invoked", "b": "oom_kill", "c": "service_killed"}


@settings(max_examples=300)
@given(evs=EV, window=st.integers(0, 12))
def test_ordered_sequence_matches_brute_force(evs: list[tuple[str, int, str]], window: int) -> None:
    """A -> B -> C(anchor), ordered, joined on unit, each within `window` of the anchor: the engine fires at an
    anchor exactly when some pair (a, b) makes the sequence."""
    c = corr([Step("a", (KIND["a"],)), Step("b", (KIND["b"],)), Step("c", (KIND["c"],))], anchor="c", cause="a",
             window=window, ordered=True, slack=0, join=Join(same=("host", "unit")))
    rows = [{"t": t, "kind": KIND[k], "unit": u, "line": i + 1} for i, (k, t, u) in enumerate(evs)]
    vs = views(frame(rows))
    tl = Timeline(vs)
    for anchor in (v for v in vs if v.kind == KIND["c"]):
        expect = any(a.entities.get("unit") == b.entities.get("unit") == anchor.entities.get("unit")
                     and a.t <= b.t <= anchor.t and anchor.t - a.t <= window
                     for a, b in itertools.product(vs, vs)
                     if a.kind == KIND["a"] and b.kind == KIND["b"])
        assert (match_at(tl, c, anchor) is not None) == expect, (evs, window, anchor)


# ---------------------------------------------------------------------------------------- counting and distinct


@given(n=st.integers(1, 6), pcis=st.integers(1, 4))
def test_distinct_and_min_count(n: int, pcis: int) -> None:
    c = corr([Step("first", ("gpu_xid",)),
              Step("others", ("gpu_xid",), collect=True, distinct="pci", min_distinct=2)],
             anchor="first", cause="first", window=300)
    rows = [{"t": i, "kind": "gpu_xid", "fields": {"pci": f"0000:{i % pcis:02x}:00", "xid": 13}} for i in range(n)]
    assert fires(rows, c) == (n >= 2 and min(n, pcis) >= 2)
    c2 = corr([Step("first", ("gpu_xid",)), Step("more", ("gpu_xid",), min=2)], anchor="first", cause="first",
              window=300, ordered=True, join=Join(same=("host", "pci")))
    rows = [{"t": i, "kind": "gpu_xid", "fields": {"pci": "0000:3b:00", "xid": 31}} for i in range(n)]
    assert fires(rows, c2) == (n >= 3)


# ---------------------------------------------------------------------------------------- determinism, templates


@given(st.permutations(list(range(6))))
def test_row_order_does_not_matter(perm: list[int]) -> None:
    c = corr([Step("cause", ("oom_kill",)), Step("anchor", ("service_killed",))], anchor="anchor", cause="cause",
             window=60, ordered=True, join=Join(same=("host",), any=("unit",)))
    base = [{"t": 0, "kind": "oom_kill", "unit": "x.service", "line": 1},
            {"t": 1, "kind": "service_killed", "unit": "x.service", "line": 2},
            {"t": 100, "kind": "oom_kill", "unit": "y.service", "line": 3},
            {"t": 101, "kind": "service_killed", "unit": "y.service", "line": 4},
            {"t": 101, "kind": "service_killed", "unit": "z.service", "line": 5},
            {"t": 200, "kind": "oom_kill", "unit": "z.service", "line": 6}]
    rows = [base[i] for i in perm]
    got = [(f.conclusion.cause_event, f.conclusion.explains) for f in
           correlate_views(views(frame(rows)), [c], Coverage([]))]
    want = [(f.conclusion.cause_event, f.conclusion.explains) for f in
            correlate_views(views(frame(base)), [c], Coverage([]))]
    assert got == want and len(want) == 2


@given(st.text(max_size=60), st.dictionaries(st.text(max_size=5), st.one_of(st.none(), st.integers(), st.text(max_size=5)),
                                             max_size=4))
def test_fill_never_raises(template: str, values: dict) -> None:
    out = fill(template, values)
    assert isinstance(out, str)


def test_fill_leaves_missing_placeholders_visible() -> None:
    assert fill("pid {oom.pid} of {unit} at {x.y}", {"oom": {"pid": 42}, "unit": None}) == "pid 42 of {unit} at {x.y}"
    assert fill("{a:03d}", {"a": 7}) == "007"
    assert fill("unbalanced {", {}) == "unbalanced {"


def test_fill_size_specs() -> None:
    """The rule templates' size specs work in correlation texts too; a value that is not a number prints as is."""
    assert fill("{oom.anon_rss_kb:kB} ({oom.anon_rss_kb} kB)", {"oom": {"anon_rss_kb": 502847612}}) == \
        "479.6 GiB (502847612 kB)"
    assert fill("{n:B}", {"n": 512}) == "512 B" and fill("{n:B}", {"n": "x"}) == "x"
    assert fill("{n:kB}", {"n": float("nan")}) == "nan"


def test_coverage_values_as_clauses() -> None:
    """A statement reads `(no kernel log covering the moment was ingested)`, not `(...was ingested: no)`."""
    no = CoverageReport(kernel=False, unit_output=False, ingested=(), missing=()).as_values()
    yes = CoverageReport(kernel=True, unit_output=True, ingested=("j.log",), missing=()).as_values()
    assert no["kernel"] == "no" and no["kernel_seen"] == "no kernel log covering the moment was ingested"
    assert yes["kernel_seen"] == "a kernel log covering the moment was ingested"
    assert no["unit_output_seen"] == "the service's own output was not ingested"
    assert yes["unit_output_seen"] == "the service's own output was ingested"


def test_a_host_the_events_do_not_name_reads_unknown_host_in_prose_only() -> None:
    """Events of a file that names no host are the `unknown host`'s incident; their statements say so (they printed
    `on {host}`), while a command keeps the placeholder for the reader to fill."""
    c = Correlation(id="t.c", title="t", confidence=Confidence.CONFIRMED, anchor="a", cause="b", window=60,
                    steps=(Step("a", ("cuda_error",)), Step("b", ("gpu_xid",))), pack="t", location=LOC,
                    statement="b on {host} at {b.time}", headline="xid on {host}", alternatives=("not {host}",),
                    next_steps=("ssh {host} nvidia-smi -q",), explains=("a",))
    rows = [{"t": 10, "kind": "cuda_error", "host": None}, {"t": 12, "kind": "gpu_xid", "host": None}]
    (f,) = [f for f in correlate_views(views(frame(rows)), [c], Coverage([])) if "t.c" in f.rules]
    assert f.headline == "xid on unknown host"
    assert f.conclusion.statement.startswith("b on unknown host at ")
    assert f.conclusion.alternatives == ("not unknown host",)
    assert f.conclusion.next_steps == ("ssh {host} nvidia-smi -q",)
    named = [{**r, "host": "gpu7"} for r in rows]
    (g,) = [f for f in correlate_views(views(frame(named)), [c], Coverage([])) if "t.c" in f.rules]
    assert g.headline == "xid on gpu7" and g.conclusion.next_steps == ("ssh gpu7 nvidia-smi -q",)


def test_prose_leaves_out_an_aside_whose_value_is_missing() -> None:
    """A sentence drops a parenthesised aside naming a value the events lack (it printed `({cgroup})`); a value
    outside an aside stays visible, as `fill` leaves it, and commands use `fill`."""
    t = "a memory cgroup limit ({cgroup}): killed {oom.pid} (of {oom.process}, {oom.uid}) (and swap)."
    assert fill_prose(t, {"oom": {"pid": 7, "process": "python3"}}) == "a memory cgroup limit: killed 7 (and swap)."
    full = {"cgroup": "/system.slice/a.service", "oom": {"pid": 7, "process": "python3", "uid": 0}}
    assert fill_prose(t, full) == fill(t, full) == \
        "a memory cgroup limit (/system.slice/a.service): killed 7 (of python3, 0) (and swap)."
    assert fill_prose("on {host} ({x y})", {}) == "on {host} ({x y})"


_TEMPLATES = ["killed {pid} ({name}) of {unit}", "a memory cgroup limit ({cgroup}): killed {oom.pid} (of {oom.process})",
              "{x:.1f} GiB ({y})", "on {host} ({x y})", "{unclosed", "n={n:>4} {n}", "no placeholder", "{a}{a.b} ({a.b})"]
_VALUE = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(-3, 3, allow_nan=False),
                   st.sampled_from(["", "sglang.service", "1", "1.0", "true"]), st.lists(st.integers(), max_size=2),
                   st.dictionaries(st.sampled_from(["pid", "process", "b"]), st.integers(0, 2) | st.none(), max_size=3))
_VALUES = st.dictionaries(st.sampled_from(["pid", "name", "unit", "cgroup", "oom", "x", "y", "host", "n", "a"]), _VALUE,
                          max_size=6)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_TEMPLATES), _VALUES), min_size=1, max_size=12))
def test_filler_remembers_exactly_what_fill_and_fill_prose_give(calls: list) -> None:
    """One Filler over many calls (its memory shared by them) gives what fill and fill_prose give each time: 1, 1.0
    and True are told apart (they format differently), and values that cannot be a key are filled as they are."""
    f = Filler()
    for template, values in calls + calls:
        assert f.fill(template, values) == fill(template, values)
        assert f.prose(template, values) == fill_prose(template, values)


def test_filler_tells_equal_values_of_other_types_apart() -> None:
    f = Filler()
    assert [f.fill("{v}", {"v": v}) for v in (1, 1.0, True, "1")] == ["1", "1.0", "true", "1"]
    assert f.fill("{v:.2f}", {"v": 1}) == "1.00"
