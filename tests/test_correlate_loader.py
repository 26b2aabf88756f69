"""Correlation files are validated strictly: unknown keys, kinds, steps, placeholders and fixtures are errors
naming file:line, and every error of every file is reported in one pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from forensics.correlation_packs import BUILTIN_DIR, CorrelationError, load_correlations, parse_duration
from forensics.timeline_fixtures import load_timeline

GOOD = """\
pack: mine
correlations:
  - id: mine.oom
    title: mine
    confidence: likely
    anchor: killed
    cause: oom
    window: 90s
    steps:
      - {name: oom, kind: oom_kill}
      - {name: killed, kind: service_killed, where: {signal: KILL}}
    explains: [killed]
    statement: 'pid {oom.pid} killed {killed.unit} ({since} to {until})'
    fixtures: {must_fire: [fire.yaml], must_not_fire: [quiet.yaml]}
"""


@pytest.fixture
def fixture_dir(tmp_path: Path) -> Path:
    d = tmp_path / "timelines"
    d.mkdir()
    (d / "fire.yaml").write_text("events:\n  - {at: '20:00:00', kind: oom_kill}\n")
    (d / "quiet.yaml").write_text("events:\n  - {at: '20:00:00', kind: boot}\n")
    return d


def _write(tmp: Path, text: str, name: str = "c.yaml") -> Path:
    d = tmp / "corr"
    d.mkdir(exist_ok=True)
    (d / name).write_text(text)
    return d


def test_a_good_file_loads(tmp_path: Path, fixture_dir: Path) -> None:
    d = _write(tmp_path, GOOD)
    (c,) = load_correlations([d], builtin=False, fixture_dir=fixture_dir)
    assert c.id == "mine.oom" and c.window == 90 and c.step("killed").where[0].values == ("KILL",)
    assert c.fixtures.must_fire == ("fire.yaml",)


def test_every_error_in_one_pass_with_file_and_line(tmp_path: Path, fixture_dir: Path) -> None:
    bad = (GOOD.replace("    window: 90s\n", "    window: soon\n    windw: 2min\n")
           .replace("kind: oom_kill}", "kind: oom_kil}")
           .replace("{oom.pid}", "{oomm.pid}")
           .replace("cause: oom", "cause: nothing")
           .replace("must_not_fire: [quiet.yaml]", "must_not_fire: [missing.yaml]"))
    d = _write(tmp_path, bad)
    with pytest.raises(CorrelationError) as ei:
        load_correlations([d], builtin=False, fixture_dir=fixture_dir)
    errs = ei.value.errors
    text = str(ei.value)
    path = str(d / "c.yaml")
    assert all(p == path and n > 0 for p, n, _ in errs)
    assert f"{path}:8: window of correlation 'mine.oom' must be a duration" in text
    assert "unknown key 'windw'" in text and "did you mean 'window'" in text
    assert "unknown event kind 'oom_kil' (did you mean 'oom_kill'?)" in text
    assert "unknown placeholder {oomm.pid}" in text
    assert "cause of correlation 'mine.oom': no step 'nothing'" in text
    assert "no timeline" in text and "missing.yaml" in text
    assert len(errs) >= 6


def test_errors_of_several_files_together(tmp_path: Path, fixture_dir: Path) -> None:
    d = _write(tmp_path, GOOD.replace("confidence: likely", "confidence: sure"), "a.yaml")
    _write(tmp_path, GOOD.replace("mine.oom", "Mine OOM"), "b.yaml")
    with pytest.raises(CorrelationError) as ei:
        load_correlations([d], builtin=False, fixture_dir=fixture_dir)
    files = {Path(p).name for p, _, _ in ei.value.errors}
    assert files == {"a.yaml", "b.yaml"}
    assert "confidence of correlation 'mine.oom' 'sure' is not one of confirmed, likely, possible, inconclusive" \
        in str(ei.value)


def test_structural_rules(tmp_path: Path, fixture_dir: Path) -> None:
    bad = (GOOD.replace("anchor: killed", "anchor: oom")
           .replace("{name: oom, kind: oom_kill}", "{name: oom, kind: oom_kill, min: 0}")
           .replace("explains: [killed]", "explains: [killed, nope]")
           .replace("    statement:", "    fold_statement: x\n    statement:"))
    d = _write(tmp_path, bad)
    with pytest.raises(CorrelationError) as ei:
        load_correlations([d], builtin=False, fixture_dir=fixture_dir)
    text = str(ei.value)
    assert "anchor step 'oom' of correlation 'mine.oom' must be a single, timed event" in text
    assert "cause step 'oom' of correlation 'mine.oom' must not be optional" in text
    assert "explains of correlation 'mine.oom': no step 'nope'" in text
    assert "fold_statement of correlation 'mine.oom' is only used with `fold: true`" in text


def test_duplicate_ids_and_layers(tmp_path: Path, fixture_dir: Path) -> None:
    d = _write(tmp_path, GOOD, "a.yaml")
    _write(tmp_path, GOOD, "b.yaml")
    with pytest.raises(CorrelationError, match="duplicate correlation id 'mine.oom' in|duplicate correlation id 'mine.oom'"):
        load_correlations([d], builtin=False, fixture_dir=fixture_dir)
    # a later layer replaces an earlier one's correlation of the same id
    first, second = tmp_path / "l1", tmp_path / "l2"
    first.mkdir()
    second.mkdir()
    (first / "x.yaml").write_text(GOOD)
    (second / "x.yaml").write_text(GOOD.replace("title: mine", "title: replaced"))
    (c,) = load_correlations([first, second], builtin=False, fixture_dir=fixture_dir)
    assert c.title == "replaced"


def test_kept_correlations_are_read_back_while_their_packs_and_fixtures_stay(
        tmp_path: Path, fixture_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """load_correlations(keep=True) keeps what it read in the private cache directory and reads it back, not the
    packs, until a pack changes; a fixture gone since is reported as a fresh read reports it; a broken file is
    read past; only the newest few are kept; packs with errors keep nothing."""
    from forensics import correlation_packs

    private = tmp_path / "private"
    monkeypatch.setenv("FORENSICS_CACHE_DIR", str(private))
    d = _write(tmp_path, GOOD)
    first = load_correlations([d], builtin=False, fixture_dir=fixture_dir, keep=True)
    assert len(list(private.glob("correlations~*.pickle"))) == 1
    real = correlation_packs._load_dirs
    monkeypatch.setattr(correlation_packs, "_load_dirs", lambda *a: pytest.fail("read the packs again"))
    again = load_correlations([d], builtin=False, fixture_dir=fixture_dir, keep=True)
    assert again == first and again[0] is not first[0] and again[0].title == "mine"
    # the kinds the packs may name are part of what they were read with
    monkeypatch.setattr(correlation_packs, "_load_dirs", real)
    with pytest.raises(CorrelationError, match="unknown event kind 'oom_kill'"):
        load_correlations([d], builtin=False, fixture_dir=fixture_dir, keep=True, kinds={"service_killed"})
    # a changed pack is read anew
    (d / "c.yaml").write_text(GOOD.replace("title: mine", "title: changed"))
    (c,) = load_correlations([d], builtin=False, fixture_dir=fixture_dir, keep=True)
    assert c.title == "changed" and len(list(private.glob("correlations~*.pickle"))) == 2
    # a fixture gone: the error a fresh read gives, kept or not
    (fixture_dir / "quiet.yaml").unlink()
    with pytest.raises(CorrelationError, match="no timeline .*quiet.yaml"):
        load_correlations([d], builtin=False, fixture_dir=fixture_dir, keep=True)
    (fixture_dir / "quiet.yaml").write_text("events:\n  - {at: '20:00:00', kind: boot}\n")
    # a broken file: the packs again
    for p in private.glob("correlations~*.pickle"):
        p.write_bytes(b"not a pickle")
    assert load_correlations([d], builtin=False, fixture_dir=fixture_dir, keep=True) == (c,)
    # only the newest few are kept
    for i in range(correlation_packs.CORRELATIONS_KEPT + 2):
        (private / f"correlations~{i:032x}.pickle").write_bytes(b"x")
    (d / "c.yaml").write_text(GOOD.replace("title: mine", "title: third"))
    load_correlations([d], builtin=False, fixture_dir=fixture_dir, keep=True)
    assert len(list(private.glob("correlations~*.pickle"))) == correlation_packs.CORRELATIONS_KEPT
    # the built-in packs, kept and read back, are what a fresh read gives
    assert load_correlations(keep=True) == load_correlations(keep=True) == load_correlations()


def test_not_yaml(tmp_path: Path, fixture_dir: Path) -> None:
    d = _write(tmp_path, "pack: x\ncorrelations: [\n")
    with pytest.raises(CorrelationError, match=r"c.yaml:\d+: not valid YAML"):
        load_correlations([d], builtin=False, fixture_dir=fixture_dir)


def test_timeline_errors_name_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "t.yaml"
    p.write_text("events:\n  - {at: '20:00:00', kind: oom_kil}\n  - {at: 'noon', kind: boot}\n")
    with pytest.raises(CorrelationError) as ei:
        load_timeline(p)
    text = str(ei.value)
    assert f"{p}:2: event 1: unknown or missing kind 'oom_kil'" in text
    assert f"{p}:3: event 2: bad time 'noon'" in text


def test_builtins_load_and_cover_the_issue() -> None:
    ids = {c.id for c in load_correlations()}
    for need in ("sigkill.kernel_oom", "sigkill.unit_oom", "sigkill.result_oom_kill", "sigkill.oomd",
                 "sigkill.stop_timeout", "sigkill.sglang_self_kill", "sigkill.unexplained", "ready.crash_after_ready",
                 "flashinfer.arch_unsupported", "xid.same_gpu", "xid.several_gpus", "xid.fallen_off_bus",
                 "cuda_oom.with_config", "systemd.cgroup_cleanup"):
        assert need in ids, need
    assert BUILTIN_DIR.is_dir()


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("2min", 120), ("5m", 300), ("1h", 3600), ("500ms", 0.5),
                                              ("1d", 86400), (30, 30), ("1.5 min", 90)])
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["soon", "-5s", "5 parsecs", True, None])
def test_bad_durations(text: object) -> None:
    assert parse_duration(text) is None


def test_a_where_value_with_a_star_is_a_pattern_of_any_case(tmp_path: Path, fixture_dir: Path) -> None:
    from forensics.correlate import _where_ok
    from forensics.eventview import views
    import polars as pl
    d = _write(tmp_path, GOOD.replace("where: {signal: KILL}", "where: {signal: KILL, unit: ['*sglang*', a.service]}"))
    (c,) = load_correlations([d], builtin=False, fixture_dir=fixture_dir)
    sig, unit = c.step("killed").where
    assert sig.values == ("KILL",) and sig.patterns == ()
    assert unit.values == ("a.service",) and unit.patterns == ("*sglang*",)
    evs = views(pl.DataFrame({"kind": ["service_killed"] * 5, "fields": ['{"signal": "KILL"}'] * 5,
                              "unit": ["SGLang-K26.service", "sglang.service", "a.service", "nfs-idmapd.service", None],
                              "line": [1, 2, 3, 4, 5], "path": ["j.log"] * 5, "rule": ["r"] * 5,
                              "ts": pl.Series([None] * 5, dtype=pl.Datetime("us", "UTC"))}))
    ok = [e.unit for e in evs if _where_ok(e, c.step("killed").where)]
    assert sorted(ok) == ["SGLang-K26.service", "a.service", "sglang.service"]
    neg = load_correlations([_write(tmp_path, GOOD.replace("where: {signal: KILL}", "where_not: {unit: '*SGLANG*'}"))],
                            builtin=False, fixture_dir=fixture_dir)[0].step("killed").where
    assert sorted(str(e.unit) for e in evs if _where_ok(e, neg)) == ["None", "a.service", "nfs-idmapd.service"]


def test_exclusive_names_steps_other_than_the_anchor(tmp_path: Path, fixture_dir: Path) -> None:
    good = GOOD.replace("    explains: [killed]\n", "    explains: [killed]\n    exclusive: [oom]\n")
    (c,) = load_correlations([_write(tmp_path, good)], builtin=False, fixture_dir=fixture_dir)
    assert c.exclusive == ("oom",)
    bad = GOOD.replace("    explains: [killed]\n", "    explains: [killed]\n    exclusive: [killed, nope]\n")
    (tmp_path / "b").mkdir()
    with pytest.raises(CorrelationError) as ei:
        load_correlations([_write(tmp_path / "b", bad)], builtin=False, fixture_dir=fixture_dir)
    text = str(ei.value)
    assert "exclusive of correlation 'mine.oom': 'killed' is the anchor, which serves one firing anyway" in text
    assert "exclusive of correlation 'mine.oom': no step 'nope'" in text


def test_agree_joins_entities_equal_where_both_are_known(tmp_path: Path, fixture_dir: Path) -> None:
    from forensics.correlate import joined
    from forensics.correlation_packs import Join
    from types import SimpleNamespace as NS
    good = GOOD.replace("    steps:\n", "    join: {same: [host], agree: [pid]}\n    steps:\n")
    (c,) = load_correlations([_write(tmp_path, good)], builtin=False, fixture_dir=fixture_dir)
    assert c.join == Join(same=("host",), agree=("pid",))

    def ev(**ents: str) -> NS:
        return NS(entities={"host": "h", **ents}, kind="cuda_oom", pid=None)

    assert joined(ev(pid="4100"), ev(pid="4100"), c.join)
    assert not joined(ev(pid="4100"), ev(pid="5200"), c.join)
    assert joined(ev(pid="4100"), ev(), c.join) and joined(ev(), ev(), c.join)    # a line that names no pid
    dump = NS(entities={"host": "h"}, kind="server_config", pid=5200)      # a configuration: the pid that logged it
    assert not joined(dump, ev(pid="4100"), c.join) and joined(dump, ev(pid="5200"), c.join)
    bad = GOOD.replace("    steps:\n", "    join: {agree: [pidd]}\n    steps:\n")
    (tmp_path / "b").mkdir()
    with pytest.raises(CorrelationError) as ei:
        load_correlations([_write(tmp_path / "b", bad)], builtin=False, fixture_dir=fixture_dir)
    assert "join of correlation 'mine.oom'.agree: unknown entity 'pidd'" in str(ei.value) and "did you mean 'pid'" \
        in str(ei.value)


def test_an_unquoted_value_read_as_a_yaml_tag_is_an_error_at_its_line(tmp_path: Path, fixture_dir: Path) -> None:
    d = _write(tmp_path, GOOD.replace("confidence: likely", "confidence: !likely sure"))
    with pytest.raises(CorrelationError) as ei:
        load_correlations([d], builtin=False, fixture_dir=fixture_dir)
    assert "cannot read the value tagged '!likely'" in str(ei.value)
