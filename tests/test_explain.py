"""explain's near misses with typos: a line one or two characters away from a rule's wording is a near miss
naming the rule and each edit; a line cut short, or one of other wording, is not."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics import cli_rules
from forensics.explain import (TYPO_MAX, NearMiss, _edit_notes, _word_at, explain, literal_count, near_miss, top_level,
                               typo_prefix)
from forensics.parse import parse_text
from forensics.rulemodel import RuleSet
from forensics.rulepacks import load_rules

OOM = ("Out of memory: Killed process 48213 (python3) total-vm:548712344kB, anon-rss:502847612kB, "
       "file-rss:86532kB, shmem-rss:12288kB, UID:0 pgtables:985420kB oom_score_adj:0")


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules(env={})


def _record(rules: RuleSet, line: str):
    (rec,) = explain(parse_text(line), rules).records
    return rec


def _typo(text: str, word: str, drop: int) -> str:
    """`text` with the character at `drop` of (the first) `word` taken out."""
    i = text.index(word) + drop
    return text[:i] + text[i + 1:]


@pytest.mark.parametrize("rule_id, line, word", [
    ("kernel.oom_kill", "[ 8123.356789] " + _typo(OOM, "process", 6), "proces"),
    ("systemd.main_killed", "May 25 20:17:19 h systemd[1]: x.service: Main process exited, code=kiled, status=9/KILL",
     "code=kiled,"),
    ("systemd.cgroup_kill_failed", "May 25 20:17:19 h systemd[1]: x.service: Failed to kill control group "
                                   "/system.slice/x.service, ignorng: Invalid argument", "ignorng:"),
    ("systemd.failed_result", "May 25 20:17:19 h systemd[1]: x.service: Failed with reslt 'signal'.", "reslt"),
    ("nvidia.xid79", "[ 8123.456801] NVRM: Xid (PCI:0000:3b:00): 79, GPU has falen off the bus.", None),
    ("sglang.server_ready", "[2025-05-25 20:11:52] The server is fired up and redy to roll!", "redy"),
])
def test_a_typo_is_a_near_miss_naming_the_rule_and_the_edit(rules: RuleSet, rule_id: str, line: str,
                                                            word: str | None) -> None:
    rec = _record(rules, line)
    if word is None:  # the typo is in a part the rule does not require (the detail after `79,`): it matches
        assert rec.verdict == "match" and rec.events[0]["rule"] == rule_id
        return
    assert rec.verdict == "near_miss"
    best = rec.near[0]
    assert best.rule == rule_id and best.missing == "" and best.reason == ""
    (edit,) = best.edits
    assert edit.startswith(f"a character missing in `{word}`, column ")
    column, at = int(edit.rsplit("column ", 1)[1]), rec.record["message"].index(word)
    assert at < column - 1 <= at + len(word)   # where the character is missing: inside the word, or after it
    assert f"near miss: {rule_id}: the whole pattern matches `" in best.describe()
    assert "` but for 1 edit (a character missing in " in best.describe()
    assert best.score > 0.9


def test_a_typo_and_a_line_cut_short(rules: RuleSet) -> None:
    rec = _record(rules, "[ 8123.356789] Out of memory: Kiled process 48213 (python3) total-vm:548712344kB")
    assert rec.verdict == "near_miss"
    best = rec.near[0]
    assert best.rule == "kernel.oom_kill" and best.missing == ","
    assert best.edits == ("a character missing in `Kiled`, column 19",)
    assert best.describe() == ("near miss: kernel.oom_kill: matched `...Kiled process 48213 (python3) "
                               "total-vm:548712344kB`, with 1 edit (a character missing in `Kiled`, column 19), "
                               "but not `,`")


def test_a_line_cut_short_is_not_a_typo(rules: RuleSet) -> None:
    """`anon-rss:9` is one `kB` short of the pattern's next item: edits spent there would buy nothing after them."""
    rec = _record(rules, "[ 8120.114230] Out of memory: Killed process 48213 (python3) total-vm:123kB, anon-rss:9")
    best = rec.near[0]
    assert best.rule == "kernel.oom_kill" and best.missing == "kB" and best.edits == ()
    assert best.describe().endswith("anon-rss:9` but not `kB`")


@pytest.mark.parametrize("line", [
    "May 25 20:17:19 h sshd[7]: Accepted publickey for root from 10.0.0.1 port 22 ssh2",
    "[ 8120.114230] EXT4-fs (nvme0n1p1): mounted filesystem with ordered data mode.",
    "May 25 20:17:19 h CRON[9]: pam_unix(cron:session): session opened for user root(uid=0) by (uid=0)",
    "May 25 20:17:19 h systemd[1]: x.service: Failed to start SGLang server.",
    "hello world",
])
def test_other_wording_stays_no_match(rules: RuleSet, line: str) -> None:
    rec = _record(rules, line)
    assert not any(n.edits for n in rec.near), [n.describe() for n in rec.near]
    if "Failed to start" not in line:
        assert rec.verdict == "no_match"


def test_several_missing_characters_are_placed_where_they_are_missing(rules: RuleSet) -> None:
    """The regex module counts each missing character's position past those missing before it: with three
    missing, the last was placed two past the end of the line (an IndexError, found by hypothesis)."""
    line = "[2025-05-25 20:11:52] T server is fired up and ready to rol!"
    nm = near_miss(rules.get("sglang.server_ready"), line)
    assert nm is not None and nm.edits == ("a character missing in `T`, column 24",) * 2 + (
        "a character missing in `rol!`, column 60",)
    assert _edit_notes("abdfhj", ([], [], [2, 4, 6, 8])) == tuple(
        f"a character missing in `abdfhj`, column {c}" for c in (3, 4, 5, 6))
    assert _edit_notes("ab", ([], [], [-1, 7])) == ("a character missing in `ab`, column 1",
                                                   "a character missing in `ab`, column 3")


def test_edits_are_few_for_the_pattern(rules: RuleSet) -> None:
    """One edit per 12 literal characters of the pattern, at most 3: a short pattern allows none, and a line two
    edits from a 15-character pattern is not a near miss of it."""
    xid79 = rules.get("nvidia.xid79")
    flags, (items,) = top_level(xid79.pattern)
    one = "NVRM: Xd (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    two = "NVRM: Xd (PC:0000:3b:00)  79, GPU has fallen off the bus."
    assert near_miss(xid79, one).edits == ("a character missing in `Xd`, column 8",)
    assert near_miss(xid79, two).edits == ()
    assert typo_prefix(flags, items, two, 6, 0) is None


def test_the_typo_is_looked_for_where_the_exact_prefix_matched(rules: RuleSet) -> None:
    rule = rules.get("systemd.failed_result")
    flags, (items,) = top_level(rule.pattern)
    msg = "x.service: Failed with reslt 'signal'."
    got = typo_prefix(flags, items, msg, 5, 0)
    assert got is not None and got[0] == len(items) and got[1].fuzzy_counts == (0, 0, 1)
    # from elsewhere in the line the same prefix does not match
    assert typo_prefix(flags, items, msg, 5, 3) is None


def test_word_at() -> None:
    msg = "Killed proces 48213"
    assert _word_at(msg, 13) == "proces"        # a character missing at the blank after the word
    assert _word_at(msg, 2) == "Killed"
    assert _word_at(msg, len(msg)) == "48213"   # at the end
    assert _word_at("a\nbc d", 2) == "bc"
    long = "x" * 100
    assert _word_at(long, 50) == "x" * 40


def test_describe_forms() -> None:
    base = dict(rule="r.x", kind="k", score=0.9, matched_literals=20)
    assert NearMiss(matched="ab", missing="c", **base).describe() == "near miss: r.x: matched `ab` but not `c`"
    assert NearMiss(matched="ab", missing="", edits=("e1", "e2"), **base).describe() == \
        "near miss: r.x: the whole pattern matches `ab` but for 2 edits (e1; e2)"
    assert NearMiss(matched="", missing="", reason="it does not apply", **base).describe() == \
        "r.x: the pattern matches, but it does not apply"


@pytest.fixture(scope="module")
def cli() -> click.Group:
    @click.group()
    def main() -> None:
        pass

    cli_rules.register(main)
    return main


def test_cli_explain_json_has_the_edits(cli: click.Group) -> None:
    res = CliRunner().invoke(cli, ["explain", "--json", "May 25 20:17:19 h systemd[1]: x.service: Failed with "
                                                        "reslt 'signal'."])
    assert res.exit_code == 1
    (rec,) = json.loads(res.output)
    assert rec["verdict"] == "near_miss"
    near = rec["near"][0]
    assert near["rule"] == "systemd.failed_result" and near["edits"] == ["a character missing in `reslt`, column 27"]
    res = CliRunner().invoke(cli, ["explain", "May 25 20:17:19 h systemd[1]: x.service: Failed with reslt "
                                              "'signal'."])
    assert res.exit_code == 1 and "but for 1 edit (a character missing in `reslt`, column 27)" in res.output


@pytest.mark.parametrize("item, n", [
    ("a", 1), (r"\.", 1), (r"\d+", 0), ("[ab]", 0), (".", 0),
    ("(?P<state>Started|Starting)", 7),     # the fewest of its branches
    ("(?:ab|abc)", 2), ("(?:ab)?", 0), ("(?:ab)*", 0), ("(?:ab)+", 2), ("(?:a|)", 0),
    ("(x(?:yz)q)", 4), (r"(?:\(oom\))", 5),
    ("(?=abc)", 0), ("(?!abc)", 0), ("(?<=abc)", 0), ("(?<!abc)", 0), ("(?i)", 0),
])
def test_literal_count(item: str, n: int) -> None:
    assert literal_count(item) == n


def test_a_typo_in_a_group_of_alternatives(rules: RuleSet) -> None:
    """`(?P<which>Main|Control)` counts as 4 literal characters: a typo'd `Mian` is within the budget."""
    rec = _record(rules, "May 25 20:17:19 h systemd[1]: x.service: Mian process exited, code=killed, status=9/KILL")
    assert rec.near[0].rule == "systemd.main_killed" and len(rec.near[0].edits) == 2
    assert all("in `Mian`, column 1" in e for e in rec.near[0].edits), rec.near[0].edits


def test_rules_test_says_where_a_failing_example_stopped_matching(cli: click.Group, tmp_path) -> None:  # noqa: ANN001
    """`rules test` names the failing example's line and, as `explain` would, where its rule's pattern stopped
    matching it, the typo it holds, or why a pattern that matches made no event."""
    p = tmp_path / "mine.yaml"
    p.write_text("""pack: mine
rules:
  - id: mine.ready
    kind: server_ready
    severity: info
    role: context
    applies: {idents: [sglang]}
    pattern: 'fired up and ready to roll'
    title: ready
    explain: ready
    examples:
      match:
        - '[2025-05-25 20:11:52] The server is fired up and ready to go!'
        - '[2025-05-25 20:11:52] The server is fired up and redy to roll!'
        - 'May 25 20:17:19 h sshd[7]: fired up and ready to roll'
        - 'nothing like it'
      near_miss: ['INFO:     Application startup complete.']
""")
    res = CliRunner().invoke(cli, ["rules", "test", str(p)])
    assert res.exit_code == 1
    lines = [x for x in res.output.splitlines() if x.startswith("FAIL")]
    assert lines == [
        f"FAIL {p}:13: mine.ready: example: did not match: matched `fired up and ready to ` but not `roll`",
        f"FAIL {p}:14: mine.ready: example: did not match: the whole pattern matches `fired up and redy to roll` "
        "but for 1 edit (a character missing in `redy`, column 30)",
        f"FAIL {p}:15: mine.ready: example: did not match: the pattern matches, but the rule applies only where "
        "ident is sglang (this record: ident=sshd)",
        f"FAIL {p}:16: mine.ready: example: did not match",
    ], res.output


def test_a_matching_example_is_never_a_typo(rules: RuleSet) -> None:
    """Every built-in rule's matching examples: the whole pattern matches a record exactly, with no edit."""
    checked = 0
    for rule in rules.rules:
        for ex in rule.examples:
            messages = parse_text(ex.text, ex.format).get_column("message").to_list()
            best = max((near_miss(rule, m or "") for m in messages), key=lambda n: (n.score, n.matched_literals))
            assert best.missing == "" and best.edits == (), (rule.id, ex.text, best.describe())
            checked += 1
    assert checked >= 100


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["kernel.oom_kill", "systemd.main_killed", "systemd.cgroup_kill_failed", "nccl.watchdog_timeout",
                        "cuda.torch_capability", "sglang.server_ready"]),
       st.text(alphabet=st.characters(min_codepoint=9, max_codepoint=0x2FF), max_size=120), st.data())
def test_near_miss_holds_for_any_text(rules: RuleSet, rule_id: str, text: str, data: st.DataObject) -> None:
    rule = rules.get(rule_id)
    example = rule.examples[0].text
    # any text, or the rule's own example with a few characters dropped, doubled or replaced
    if data.draw(st.booleans()):
        chars = list(example)
        for _ in range(data.draw(st.integers(1, 3))):
            i = data.draw(st.integers(0, len(chars) - 1))
            chars[i:i + 1] = data.draw(st.sampled_from([[], [chars[i]] * 2, ["#"]]))
        text = "".join(chars)
    nm = near_miss(rule, text)
    assert nm is not None and nm.rule == rule_id
    assert len(nm.edits) <= TYPO_MAX and nm.score <= 1.0
    assert nm.matched_literals >= -len(nm.edits)
    if nm.edits:
        assert "edit" in nm.describe() and all(", column " in e for e in nm.edits)
