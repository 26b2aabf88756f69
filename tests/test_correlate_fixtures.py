"""Every built-in correlation against its fixture timelines: each must fire on its `must_fire` timelines and
must not on its `must_not_fire` ones; `expect:` blocks in a timeline check the finding's attributes."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

from forensics.correlation_packs import Correlation, load_correlations
from forensics.timeline_fixtures import check_fixture, fired, load_timeline
from forensics.configreview import load_knowledge

TIMELINES = Path(__file__).parent / "fixtures" / "timelines"


@lru_cache(maxsize=1)
def _corrs() -> tuple[Correlation, ...]:
    return load_correlations()


@lru_cache(maxsize=None)
def _found(name: str):  # noqa: ANN202
    return check_fixture(load_timeline(TIMELINES / name), _corrs(), load_knowledge())


def _cases(which: str) -> list:
    return [pytest.param(c.id, f, id=f"{c.id}:{f}") for c in load_correlations() for f in getattr(c.fixtures, which)]


@pytest.mark.parametrize(("cid", "fixture"), _cases("must_fire"))
def test_fires(cid: str, fixture: str) -> None:
    found = _found(fixture)
    assert fired(found, cid), (f"{cid} did not fire on {fixture}; fired: "
                               f"{[f.rules for f in found]}")


@pytest.mark.parametrize(("cid", "fixture"), _cases("must_not_fire"))
def test_does_not_fire(cid: str, fixture: str) -> None:
    found = _found(fixture)
    assert not fired(found, cid), f"{cid} fired on {fixture}: {[f.conclusion.statement for f in fired(found, cid)]}"


def _expectations() -> list:
    out = []
    for p in sorted(TIMELINES.glob("*.yaml")):
        for cid, attrs in load_timeline(p).expect:
            out.append(pytest.param(p.name, cid, dict(attrs), id=f"{p.name}:{cid}"))
    return out


@pytest.mark.parametrize(("fixture", "cid", "attrs"), _expectations())
def test_expectations(fixture: str, cid: str, attrs: dict) -> None:
    hits = fired(_found(fixture), cid)
    assert hits, f"{cid} did not fire on {fixture}"
    c = hits[0].conclusion
    fx = load_timeline(TIMELINES / fixture)
    kinds = dict(zip(fx.events["rule"], fx.events["kind"]))
    for key, want in attrs.items():
        if key == "confidence":
            assert c.confidence.value == want, c
        elif key == "kind":
            assert c.kind == want
        elif key == "explains":
            assert len(c.explains) == want, c.explains
        elif key == "cause":
            assert c.cause_event is not None and kinds.get(c.cause_event.rsplit(":", 1)[1]) == want
        elif key == "unit":
            assert c.unit == want
        elif key == "statement_contains":
            assert str(want) in c.statement, c.statement


def test_every_correlation_has_both_kinds_of_fixture() -> None:
    for c in load_correlations():
        assert c.fixtures.must_fire and c.fixtures.must_not_fire, c.id


def test_statements_leave_no_placeholder_on_their_own_fixtures() -> None:
    """A statement (and a headline) filled from a timeline where the correlation fires names every value it
    promises, or leaves out the aside that would name a value the timeline does not hold."""
    for c in load_correlations():
        for f in c.fixtures.must_fire:
            fx = load_timeline(TIMELINES / f)
            if any(k == "fields" for k in ()):  # pragma: no cover
                continue
            for hit in fired(_found(f), c.id):
                if hit.rules[0] == c.id:
                    assert "{" not in hit.conclusion.statement or fx.description.startswith("The seed"), \
                        (c.id, f, hit.conclusion.statement)
                    assert "{" not in hit.headline or fx.description.startswith("The seed"), (c.id, f, hit.headline)


def test_a_gpu_lost_twice_is_one_conclusion() -> None:
    """The driver reports a GPU that fell off the bus twice (`Xid 79`, then `GPU ...: GPU has fallen off the
    bus.`): one conclusion, blaming the first line and explaining the second (there were two, word for word)."""
    found = fired(_found("xid_fallen_off_bus_twice.yaml"), "xid.fallen_off_bus")
    assert len(found) == 1, [f.conclusion.cause_event for f in found]
    c = found[0].conclusion
    assert c.cause_event.endswith(":nvidia.xid79")
    assert any(x.endswith(":nvidia.fallen_off_bus") for x in c.explains)


def _optional_fields() -> dict[str, set[str]]:
    """For each event kind, the fields some rule of it yields on one of its match examples and not on another
    (a group in an optional part of its pattern: a CUDA OOM's GPU figures, a scheduler crash's exception)."""
    import json

    from forensics.match import match_records
    from forensics.parse import parse_text
    from forensics.rulemodel import RuleSet
    from forensics.rulepacks import load_rules

    out: dict[str, set[str]] = {}
    for r in load_rules(env={}).rules:
        sets = []
        for ex in r.examples:
            ev = match_records(parse_text(ex.text, ex.format), RuleSet(rules=(r,)))
            sets.extend({k for k, v in json.loads(f or "{}").items() if v is not None} for f in ev["fields"])
        if sets:
            out.setdefault(r.kind, set()).update(set.union(*sets) - set.intersection(*sets))
    return out


def test_statements_leave_no_placeholder_when_optional_fields_are_missing() -> None:
    """Each correlation on its own fixtures with every optional field of their events taken out: its headline and
    statement leave the asides they cannot fill out, never a `{placeholder}` (a CUDA OOM naming no GPU printed
    `CUDA out of memory on GPU {oom.gpu}`)."""
    import json
    from dataclasses import replace

    import polars as pl

    optional = _optional_fields()
    assert {"gpu", "free_bytes", "total_bytes"} <= optional["cuda_oom"]
    for c in load_correlations():
        for f in c.fixtures.must_fire:
            fx = load_timeline(TIMELINES / f)
            rows = []
            for d in fx.events.iter_rows(named=True):
                fields = json.loads(d["fields"] or "{}")
                d["fields"] = json.dumps({k: v for k, v in fields.items() if k not in optional.get(d["kind"], ())},
                                         sort_keys=True)
                rows.append(d)
            sparse = replace(fx, events=pl.DataFrame(rows, schema=fx.events.schema))
            for hit in fired(check_fixture(sparse, _corrs(), load_knowledge()), c.id):
                if hit.rules[0] == c.id:
                    for text in (hit.headline, hit.conclusion.statement):
                        assert "{" not in text or fx.description.startswith("The seed"), (c.id, f, text)
