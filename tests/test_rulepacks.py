"""Rule pack loading and validation: strict, every error with pack.yaml:line, all errors of a file at once."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from forensics.casts import CASTS
from forensics.sizes import human_size
from forensics.rulemodel import CAST_NAMES, KINDS, Engine, render
from forensics.rulepacks import BUILTIN_DIR, RulePackError, load_pack, load_rules

# The stable vocabulary of event-kinds.md (reference/event-kinds.md in the shared reference).
DOC_KINDS = (
    "service_killed", "service_exited", "service_core_dumped", "service_failed", "service_start_failed",
    "unit_oom_killed", "cgroup_kill_failed", "stop_timeout", "restart_scheduled", "start_limit_hit",
    "service_started", "service_stopped", "core_dump", "oomd_kill", "journal_suppressed", "boot",
    "oom_invoked", "oom_kill", "oom_reaped", "gpu_xid", "gpu_fallen_off_bus", "segfault", "hung_task",
    "kernel_panic", "server_config", "server_start", "server_ready", "flashinfer_arch_unsupported",
    "cuda_arch_unsupported", "cuda_oom", "cuda_error", "nccl_timeout", "nccl_error", "python_traceback",
    "watchdog_timeout", "child_failed", "health_check_failed",
)
SHARED_KINDS_DOC = Path("/work/shared/reference/event-kinds.md")

GOOD_RULE = """\
  - id: t.killed
    kind: service_killed
    severity: error
    role: symptom
    pattern: '(?m)^(?P<unit>[^\\s:]+): Main process exited, code=killed, status=(?P<status>\\d+)/(?P<signal>\\w+)'
    casts: {status: int}
    title: '{unit} killed by {signal}'
    explain: the main process was killed by a signal
    examples:
      match:
        - line: 'May 25 20:17:19 h systemd[1]: a.service: Main process exited, code=killed, status=9/KILL'
          fields: {unit: a.service, status: 9}
      near_miss:
        - 'May 25 20:17:19 h systemd[1]: a.service: Main process exited, code=exited, status=1/FAILURE'
"""


def write_pack(d: Path, name: str, body: str, header: str = "") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    p = d / name
    p.write_text(f"pack: {p.stem}\n{header}rules:\n{body}")
    return p


def errors_of(path: Path) -> list[tuple[str, int, str]]:
    with pytest.raises(RulePackError) as e:
        load_pack(path)
    return e.value.errors


# ------------------------------------------------------------------------------------------ built-ins


def test_builtin_packs_load_and_cover_every_kind() -> None:
    rs = load_rules()
    assert {p.name for p in rs.packs} >= {"systemd", "kernel", "nvidia", "sglang", "flashinfer", "cuda", "nccl",
                                          "python"}
    have = {r.kind for r in rs.rules}
    doc = DOC_KINDS
    if SHARED_KINDS_DOC.exists():
        doc = tuple(re.findall(r"^\| `([a-z_]+)` \|", SHARED_KINDS_DOC.read_text(), re.M))
        assert set(doc) == set(DOC_KINDS)
    assert not [k for k in doc if k not in have], "every kind of event-kinds.md has a rule"
    assert set(doc) <= set(KINDS)


def test_every_builtin_rule_is_complete() -> None:
    rs = load_rules()
    ids = [r.id for r in rs.rules]
    assert len(ids) == len(set(ids))
    for r in rs.rules:
        assert r.examples and r.near_misses, r.id
        assert r.literals, r.id
        assert r.explain and r.title and "\n" not in r.title, r.id
        assert r.engine in (Engine.POLARS, Engine.REGEX)
        assert r.location.path.endswith(".yaml") and r.location.line > 0


def test_casts_in_step_with_the_engine() -> None:
    assert set(CAST_NAMES) == set(CASTS)


def test_builtin_dir_is_the_repo_rules_folder() -> None:
    assert BUILTIN_DIR.name == "rules" and (BUILTIN_DIR / "systemd.yaml").exists()


# ------------------------------------------------------------------------------------------ validation


def test_good_pack_loads(tmp_path: Path) -> None:
    pack = load_pack(write_pack(tmp_path, "good.yaml", GOOD_RULE))
    (r,) = pack.rules
    assert r.id == "t.killed" and r.groups == ("unit", "status", "signal")
    assert r.literals == (": Main process exited, code=killed, status=",)
    assert r.location.line == 3 and r.examples[0].location.line == 13


def test_unknown_key_names_file_line_and_suggests(tmp_path: Path) -> None:
    p = write_pack(tmp_path, "typo.yaml", GOOD_RULE.replace("    pattern:", "    patern:"))
    errs = errors_of(p)
    msgs = [f"{Path(a).name}:{n}: {m}" for a, n, m in errs]
    assert "typo.yaml:7: unknown key 'patern' in rule 't.killed' (did you mean 'pattern'?)" in msgs
    assert "is missing pattern" in str(RulePackError(errs))


def test_missing_near_miss_is_an_error(tmp_path: Path) -> None:
    body = GOOD_RULE.split("      near_miss:")[0]
    errs = errors_of(write_pack(tmp_path, "nonear.yaml", body))
    assert any("needs at least one `examples.near_miss`" in m and n == 11 for _, n, m in errs), errs


def test_missing_match_example_is_an_error(tmp_path: Path) -> None:
    body = GOOD_RULE.replace("      match:\n        - line: 'May 25 20:17:19 h systemd[1]: a.service: Main process "
                             "exited, code=killed, status=9/KILL'\n          fields: {unit: a.service, status: 9}\n",
                             "")
    errs = errors_of(write_pack(tmp_path, "nomatch.yaml", body))
    assert any("examples.match" in m for _, _, m in errs), errs


def test_all_errors_of_a_file_in_one_pass(tmp_path: Path) -> None:
    bad = (GOOD_RULE.replace("kind: service_killed", "kind: service_kiled")
           .replace("severity: error", "severity: fatal")
           .replace("casts: {status: int}", "casts: {status: integer, nosuch: int}")
           .replace("title: '{unit} killed by {signal}'", "title: '{unit} killed by {signl}'"))
    bad2 = GOOD_RULE.replace("t.killed", "t.two").replace("(?P<unit>[^\\s:]+)", "(?P<unit>[^\\s:]+")
    errs = errors_of(write_pack(tmp_path, "many.yaml", bad + bad2))
    text = "\n".join(f"{n}: {m}" for _, n, m in errs)
    assert "unknown kind 'service_kiled'" in text and "did you mean 'service_killed'" in text
    assert "severity 'fatal' is not one of" in text
    assert "unknown cast 'integer'" in text and "did you mean 'int'" in text
    assert "the pattern has no group 'nosuch'" in text
    assert "unknown placeholder {signl}" in text
    assert "bad pattern" in text
    assert len(errs) >= 6
    assert [n for _, n, _ in errs] == sorted(n for _, n, _ in errs)


def test_duplicate_ids_and_keys(tmp_path: Path) -> None:
    errs = errors_of(write_pack(tmp_path, "dup.yaml", GOOD_RULE + GOOD_RULE.replace("    role: symptom\n",
                                                                                       "    role: symptom\n"
                                                                                       "    role: cause\n")))
    text = "\n".join(m for _, _, m in errs)
    assert "duplicate rule id 't.killed' (first at line 3)" in text
    assert "duplicate key 'role'" in text


def test_unsafe_yaml_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "evil.yaml"
    p.write_text("pack: evil\nrules: !!python/object/apply:os.system ['touch /tmp/pwned']\n")
    with pytest.raises(RulePackError) as e:
        load_pack(p)
    assert "evil.yaml:2" in str(e.value)


def test_invalid_yaml_reports_its_line(tmp_path: Path) -> None:
    p = tmp_path / "broken.yaml"
    p.write_text("pack: x\nrules:\n  - id: a\n    kind: [unclosed\n")
    errs = errors_of(p)
    assert errs[0][2].startswith("not valid YAML") and errs[0][1] >= 4


def test_lookaround_uses_the_regex_engine(tmp_path: Path) -> None:
    body = GOOD_RULE.replace("code=killed, status=", "code=killed, (?=status=)status=")
    (r,) = load_pack(write_pack(tmp_path, "la.yaml", body)).rules
    assert r.engine is Engine.REGEX
    forced = body.replace("    casts:", "    engine: polars\n    casts:")
    errs = errors_of(write_pack(tmp_path, "la2.yaml", forced))
    assert any("does not compile in polars" in m for _, _, m in errs)


def test_pattern_without_literal_needs_declared_literals(tmp_path: Path) -> None:
    body = GOOD_RULE.replace(
        "'(?m)^(?P<unit>[^\\s:]+): Main process exited, code=killed, status=(?P<status>\\d+)/(?P<signal>\\w+)'",
        "'(?P<unit>\\w+) (?P<status>\\d+) (?P<signal>\\w+)'")
    errs = errors_of(write_pack(tmp_path, "nolit.yaml", body))
    assert any("declare `literals:`" in m for _, _, m in errs)
    ok = body.replace("    casts:", "    literals: ['Main process']\n    casts:")
    (r,) = load_pack(write_pack(tmp_path, "nolit2.yaml", ok)).rules
    assert r.literals == ("Main process",)


def test_unknown_lookup_table(tmp_path: Path) -> None:
    body = GOOD_RULE.replace("    casts: {status: int}\n",
                             "    casts: {status: int}\n    derive:\n      - {field: meaning, from: [status], lookup: nope}\n")
    errs = errors_of(write_pack(tmp_path, "lk.yaml", body))
    assert any("unknown lookup table 'nope'" in m for _, _, m in errs)


def test_pack_may_declare_kinds(tmp_path: Path) -> None:
    body = GOOD_RULE.replace("kind: service_killed", "kind: my_kind")
    errs = errors_of(write_pack(tmp_path, "k1.yaml", body))
    assert any("unknown kind 'my_kind'" in m for _, _, m in errs)
    pack = load_pack(write_pack(tmp_path, "k2.yaml", body, header="kinds: {my_kind: {role: cause}}\n"))
    assert pack.rules[0].kind == "my_kind" and dict(pack.kinds)["my_kind"].value == "cause"


def test_example_fields_must_be_producible(tmp_path: Path) -> None:
    body = GOOD_RULE.replace("fields: {unit: a.service, status: 9}", "fields: {unit: a.service, stauts: 9}")
    errs = errors_of(write_pack(tmp_path, "ef.yaml", body))
    assert any("expects field 'stauts'" in m for _, _, m in errs)


# ------------------------------------------------------------------------------------------ layers


def test_user_layer_overrides_builtin_and_env_layers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = load_rules()
    over = GOOD_RULE.replace("t.killed", "systemd.main_killed").replace("severity: error", "severity: critical")
    write_pack(tmp_path / "user", "mine.yaml", over)
    rs = load_rules([tmp_path / "user"])
    assert len(rs) == len(base)
    assert rs.get("systemd.main_killed").severity.value == "critical"
    assert rs.get("systemd.main_killed").pack == "mine"
    # FORENSICS_RULES is a layer below --rules
    write_pack(tmp_path / "env", "envpack.yaml", GOOD_RULE.replace("t.killed", "env.rule"))
    monkeypatch.setenv("FORENSICS_RULES", str(tmp_path / "env"))
    rs2 = load_rules([tmp_path / "user"])
    assert rs2.get("env.rule") is not None and len(rs2) == len(base) + 1


def test_rule_texts_are_kept_and_follow_the_packs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The texts a report reads are the loaded rules', read back from the cache; a changed pack gives new ones."""
    from forensics.rulepacks import TEXTS_KEPT, rule_texts

    monkeypatch.delenv("FORENSICS_RULES", raising=False)
    cache = tmp_path / "cache"
    rules = load_rules()
    fresh = rule_texts(cache)
    kept = sorted(cache.glob("rules~*.json"))
    assert len(kept) == 1
    assert fresh.texts == {r.id: (r.explain, tuple(r.next_steps)) for r in rules.rules}
    assert fresh.versions == rules.pack_versions()
    monkeypatch.setattr("forensics.rulepacks.load_rules", lambda *a, **k: pytest.fail("read the packs again"))
    again = rule_texts(cache)
    assert again == fresh and again.get("systemd.main_killed") == fresh.texts["systemd.main_killed"]
    monkeypatch.undo()
    monkeypatch.delenv("FORENSICS_RULES", raising=False)
    # a FORENSICS_RULES layer overriding a built-in: other texts, another file
    over = GOOD_RULE.replace("t.killed", "systemd.main_killed").replace(
        "the main process was killed by a signal", "overridden text")
    write_pack(tmp_path / "env", "mine.yaml", over)
    monkeypatch.setenv("FORENSICS_RULES", str(tmp_path / "env"))
    layered = rule_texts(cache)
    assert layered.get("systemd.main_killed")[0] == "overridden text"
    assert len(list(cache.glob("rules~*.json"))) == 2
    # a broken file is read from the packs again, and replaced
    for p in cache.glob("rules~*.json"):
        p.write_text("{not json")
    assert rule_texts(cache) == layered
    # only the newest few are kept
    for i in range(TEXTS_KEPT + 2):
        (cache / f"rules~{i:032x}.json").write_text("{}")
    (tmp_path / "env" / "mine.yaml").write_text((tmp_path / "env" / "mine.yaml").read_text().replace(
        "overridden text", "changed again"))
    assert rule_texts(cache).get("systemd.main_killed")[0] == "changed again"
    assert len(list(cache.glob("rules~*.json"))) == TEXTS_KEPT
    # no cache directory: the packs themselves
    assert rule_texts(None).get("systemd.main_killed")[0] == "changed again"


def test_loaded_rules_keep_their_texts_for_the_first_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ingest has the packs in force loaded: their texts are kept from that rule set, as `rule_texts` would keep
    them, and a report reads them without loading the packs. Another rule set loaded (`--rules`) keeps nothing."""
    from forensics.rulepacks import keep_loaded_texts, rule_texts

    monkeypatch.delenv("FORENSICS_RULES", raising=False)
    cache = tmp_path / "cache"
    write_pack(tmp_path / "user", "mine.yaml", GOOD_RULE)
    load_rules([tmp_path / "user"])   # the last rule set loaded is not the packs in force
    assert not keep_loaded_texts(cache)
    assert not list(cache.glob("rules~*.json"))
    rules = load_rules()
    assert keep_loaded_texts(cache)
    assert not keep_loaded_texts(cache)  # kept already
    assert len(list(cache.glob("rules~*.json"))) == 1
    monkeypatch.setattr("forensics.rulepacks.load_rules", lambda *a, **k: pytest.fail("read the packs again"))
    kept = rule_texts(cache)
    assert kept.texts == {r.id: (r.explain, tuple(r.next_steps)) for r in rules.rules}
    assert kept.versions == rules.pack_versions()
    monkeypatch.undo()
    assert rule_texts(tmp_path / "elsewhere") == kept


def test_a_kept_rule_set_is_read_back_while_its_packs_are_unchanged(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """load_rules(keep=True) keeps the checked rule set in the private cache directory; another process (here: the
    in-process set forgotten) reads it back instead of the packs, until a pack changes. A broken file is read
    from the packs again and replaced; only the newest few sets are kept."""
    from forensics import rulepacks
    from forensics.rulepacks import SETS_KEPT

    private = tmp_path / "private"
    monkeypatch.setenv("FORENSICS_CACHE_DIR", str(private))
    write_pack(tmp_path / "user", "mine.yaml", GOOD_RULE)
    first = load_rules([tmp_path / "user"], keep=True)
    kept = list(private.glob("ruleset~*.pickle"))
    assert len(kept) == 1 and (private.stat().st_mode & 0o777) == 0o700
    rulepacks._LOADED.clear()
    real = rulepacks._load_layers
    monkeypatch.setattr(rulepacks, "_load_layers", lambda *a: pytest.fail("read the packs again"))
    again = load_rules([tmp_path / "user"], keep=True)
    assert again == first and again is not first and again.get("t.killed").title == "{unit} killed by {signal}"
    # a changed pack: read, checked and kept anew
    monkeypatch.setattr(rulepacks, "_load_layers", real)
    rulepacks._LOADED.clear()
    (tmp_path / "user" / "mine.yaml").write_text((tmp_path / "user" / "mine.yaml").read_text().replace(
        "killed by {signal}", "killed by signal {signal}"))
    changed = load_rules([tmp_path / "user"], keep=True)
    assert changed.get("t.killed").title == "{unit} killed by signal {signal}"
    assert len(list(private.glob("ruleset~*.pickle"))) == 2
    # a broken file: the packs again, and the file replaced
    rulepacks._LOADED.clear()
    for p in private.glob("ruleset~*.pickle"):
        p.write_bytes(b"not a pickle")
    assert load_rules([tmp_path / "user"], keep=True) == changed
    rulepacks._LOADED.clear()
    monkeypatch.setattr(rulepacks, "_load_layers", lambda *a: pytest.fail("read the packs again"))
    assert load_rules([tmp_path / "user"], keep=True) == changed
    monkeypatch.setattr(rulepacks, "_load_layers", real)
    # only the newest few sets are kept
    for i in range(SETS_KEPT + 2):
        (private / f"ruleset~{i:032x}.pickle").write_bytes(b"x")
    rulepacks._LOADED.clear()
    load_rules([tmp_path / "user"], keep=True, builtin=False)
    assert len(list(private.glob("ruleset~*.pickle"))) == SETS_KEPT


def test_a_rule_set_is_kept_only_in_a_directory_of_the_users_own(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache directory others may write (a pickle from it could run their code) is not used; packs with errors,
    or a load without `keep`, keep nothing."""
    from forensics import rulepacks
    from forensics.cachefiles import private_dir

    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    monkeypatch.setenv("FORENSICS_CACHE_DIR", str(shared))
    assert private_dir() is None
    write_pack(tmp_path / "user", "mine.yaml", GOOD_RULE)
    assert load_rules([tmp_path / "user"], keep=True).get("t.killed") is not None
    assert not list(shared.iterdir())
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "user")
    monkeypatch.setenv("FORENSICS_CACHE_DIR", str(link))
    assert private_dir() is None
    private = tmp_path / "private"
    monkeypatch.setenv("FORENSICS_CACHE_DIR", str(private))
    rulepacks._LOADED.clear()
    load_rules([tmp_path / "user"])
    assert not private.exists() or not list(private.iterdir())
    write_pack(tmp_path / "bad", "bad.yaml", GOOD_RULE.replace("kind: service_killed", "kind: no_such_kind"))
    with pytest.raises(RulePackError):
        load_rules([tmp_path / "bad"], keep=True)
    assert not private.exists() or not list(private.glob("ruleset~*"))


def test_duplicate_ids_inside_one_layer(tmp_path: Path) -> None:
    write_pack(tmp_path / "u", "a.yaml", GOOD_RULE)
    write_pack(tmp_path / "u", "b.yaml", GOOD_RULE)
    with pytest.raises(RulePackError) as e:
        load_rules([tmp_path / "u"])
    assert "duplicate rule id 't.killed' in one layer" in str(e.value)
    # the same id in two layers is an override, not an error
    write_pack(tmp_path / "v", "c.yaml", GOOD_RULE)
    write_pack(tmp_path / "w", "d.yaml", GOOD_RULE)
    assert load_rules([tmp_path / "v", tmp_path / "w"]).get("t.killed").pack == "d"


def test_missing_rules_directory(tmp_path: Path) -> None:
    with pytest.raises(RulePackError) as e:
        load_rules([tmp_path / "nope"])
    assert "rules directory does not exist" in str(e.value)


# ------------------------------------------------------------------------------------------ helpers


def test_render_fills_missing_with_question_mark() -> None:
    assert render("{unit}: {signal} ({nope})", {"unit": "a.service", "signal": None}) == "a.service: ? (?)"


def test_render_size_specs() -> None:
    """`{x:kB}` and `{x:B}` print a figure in binary units; what is not a number prints as is."""
    assert human_size(0) == "0 B" and human_size(1023) == "1023 B" and human_size(1024) == "1.0 KiB"
    assert human_size(514_915_954_688) == "479.6 GiB" and human_size(3 << 40) == "3.0 TiB"
    assert render("anon-rss {rss:kB} ({rss} kB)", {"rss": 502847612}) == "anon-rss 479.6 GiB (502847612 kB)"
    assert render("{n:B}", {"n": "1536"}) == "1.5 KiB"
    assert render("{n:kB} of {m:B}", {"n": None}) == "? of ?"
    assert render("{n:kB}", {"n": "lots"}) == "lots"
    # a plain template with `:` in its text is still filled by format_map
    assert render("CUDA error: {e}", {"e": "x"}) == "CUDA error: x"


def test_template_specs_are_validated(tmp_path: Path) -> None:
    """A size spec loads; any other spec or a conversion is an error naming the line and the fix."""
    ok = GOOD_RULE.replace("title: '{unit} killed by {signal}'", "title: '{unit} killed, status {status:B}'")
    (r,) = load_pack(write_pack(tmp_path / "a", "ok.yaml", ok)).rules
    assert r.render_title({"unit": "u", "status": 2048}) == "u killed, status 2.0 KiB"
    from forensics.match import vectorisable

    assert not vectorisable(r)  # the size spec is printed by render, in Python
    assert vectorisable(load_pack(write_pack(tmp_path / "c", "plain.yaml", GOOD_RULE)).rules[0])
    bad = (GOOD_RULE.replace("title: '{unit} killed by {signal}'", "title: '{unit} killed by {signal:>10}'")
           .replace("explain: the main process was killed by a signal", "explain: 'status {status!r}'"))
    errs = errors_of(write_pack(tmp_path / "b", "bad.yaml", bad))
    text = "\n".join(f"{n}: {m}" for _, n, m in errs)
    assert "{signal:>10}: unknown format '>10'" in text and "{signal:kB}" in text
    assert "{status!r}: conversions are not supported" in text
    # a size spec on a field that is not cast to a number is caught at load, not printed raw
    text_only = GOOD_RULE.replace("title: '{unit} killed by {signal}'", "title: '{unit:kB} killed by {signal}'")
    errs = errors_of(write_pack(tmp_path / "d", "str.yaml", text_only))
    assert [m for _, _, m in errs] == ["title in rule 't.killed': {unit:kB} or {unit:B} prints a size, but 'unit' "
                                       "is not cast to a number (casts: {unit: int}, or kb or bytes)"], errs
    assert all(n > 0 for _, n, _ in errs)


def test_ruleset_literals_include_context_patterns() -> None:
    rs = load_rules()
    lits = rs.literals()
    assert "Killed process " in lits
    assert any("invoked oom-killer" in x for x in lits)


def test_pack_file_text_is_plain(tmp_path: Path) -> None:
    """A pack with a multi-line example block scalar keeps the lines exactly."""
    body = GOOD_RULE.replace(
        "        - line: 'May 25 20:17:19 h systemd[1]: a.service: Main process exited, code=killed, status=9/KILL'",
        textwrap.indent("- line: |-\n    May 25 20:17:18 h systemd[1]: a.service: Starting\n"
                        "    May 25 20:17:19 h systemd[1]: a.service: Main process exited, code=killed, status=9/KILL",
                        "        "))
    (r,) = load_pack(write_pack(tmp_path, "ml.yaml", body)).rules
    assert r.examples[0].text.count("\n") == 1


def test_an_unquoted_value_read_as_a_yaml_tag_is_an_error_at_its_line(tmp_path: Path) -> None:
    """`literals: [!CUDA error: ]` (a value starting with `!` left unquoted) reads as a YAML tag the safe loader
    cannot construct: an error naming the file, the line and the fix, not a crash (found by fuzz/fuzz_rules.py)."""
    body = GOOD_RULE.replace("    casts: {status: int}\n", "    casts: {status: int}\n    literals:\n      - !CUDA error\n")
    p = write_pack(tmp_path, "tagged.yaml", body)
    errs = errors_of(p)
    line = next(n for n, text in enumerate(p.read_text().splitlines(), 1) if "!CUDA" in text)
    assert any(n == line and "cannot read the value tagged '!CUDA'" in m and "must be quoted" in m
               for _, n, m in errs), errs
