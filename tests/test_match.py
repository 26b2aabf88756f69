"""The matching engine, casts, every built-in rule's examples, explain, and the rules/explain/events commands."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import click
import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics import cli_rules, match
from forensics.casts import (
    cast_bytes,
    cast_cgroup_unit,
    cast_cuda_version,
    cast_duration,
    cast_duration_ms,
    cast_flags,
    cast_kb,
    cast_signal,
    cast_sm_arch,
    parse_server_args,
)
from forensics.match import Matcher, event_fields, match_records, run_examples
from forensics.explain import explain, top_level
from forensics.parse import parse_text
from forensics.rulemodel import RuleSet
from forensics.rulepacks import load_pack, load_rules
from forensics.schema import EVENT_SCHEMA, RECORD_SCHEMA, conform
from helpers import backtrack_pack

T0 = datetime(2025, 5, 25, 20, 17, 19, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules(env={})


@pytest.fixture(scope="module")
def example_results(rules: RuleSet):
    return run_examples(rules)


def records(rows: list[dict]) -> pl.DataFrame:
    """A record frame from partial rows (line numbers default to the row order)."""
    full = []
    for i, r in enumerate(rows, 1):
        d = {"path": "t.log", "line": i, "line_end": i, "ts": T0, "ts_source": "exact", "format": "journal-short",
             "source_id": "abc", **r}
        d.setdefault("line_end", d["line"])
        full.append(d)
    # every row read for the types: a column null in the first hundred rows (the unit of the examples of the packs
    # that come first) would otherwise be taken for null-typed
    return conform(pl.DataFrame(full, schema_overrides={"ts": RECORD_SCHEMA["ts"]}, strict=False,
                                infer_schema_length=None), RECORD_SCHEMA)


# ------------------------------------------------------------------------------------------ every example


def _rule_ids() -> list[str]:
    return [r.id for r in load_rules(env={}).rules]


@pytest.mark.parametrize("rule_id", _rule_ids())
def test_rule_examples(rule_id: str, example_results) -> None:
    mine = [r for r in example_results if r.rule == rule_id]
    assert any(r.expect_match for r in mine) and any(not r.expect_match for r in mine)
    bad = [str(r) for r in mine if not r.ok]
    assert not bad, "\n".join(bad)


def test_failing_example_names_rule_and_line(tmp_path: Path) -> None:
    p = tmp_path / "p.yaml"
    p.write_text("""pack: p
rules:
  - id: p.exit
    kind: service_exited
    severity: warning
    role: symptom
    pattern: '(?m)^(?P<unit>[^\\s:]+): Main process exited, code=exited, status=(?P<status>\\d+)'
    title: '{unit}'
    explain: x
    examples:
      match:
        - line: 'May 25 20:17:19 h systemd[1]: a.service: Main process exited, code=exited, status=1/FAILURE'
          fields: {status: 1}
      near_miss:
        - 'May 25 20:17:19 h systemd[1]: a.service: Main process exited, code=exited, status=0/SUCCESS'
""")
    res = run_examples(RuleSet(rules=load_pack(p).rules))
    bad = [str(r) for r in res if not r.ok]
    assert len(bad) == 2
    assert any("p.yaml:12: p.exit: example: status: expected 1, got '1'" in b for b in bad), bad
    assert any("p.yaml:15: p.exit: near-miss: matched but must not" in b for b in bad), bad


# ------------------------------------------------------------------------------------------ engine


def test_single_line_event_schema_and_fields(rules: RuleSet) -> None:
    df = records([
        {"ident": "systemd", "pid": 1, "unit": "sglang.service",
         "message": "sglang.service: Main process exited, code=killed, status=9/KILL"},
        {"ident": "sshd", "pid": 22, "message": "Accepted publickey for root from 10.0.0.1 port 1 ssh2"},
    ])
    ev = match_records(df, rules)
    assert dict(ev.schema) == EVENT_SCHEMA
    assert ev.height == 1
    e = ev.row(0, named=True)
    assert (e["kind"], e["rule"], e["severity"], e["role"]) == ("service_killed", "systemd.main_killed", "error",
                                                                 "symptom")
    assert e["unit"] == "sglang.service" and e["pid"] == 1 and e["ts"] == T0 and e["line"] == 1
    assert e["fields"] == '{"signal":"KILL","status":9,"unit":"sglang.service","which":"Main"}'
    assert e["title"] == "sglang.service: Main process killed by signal KILL"


def test_applies_filters_by_ident_and_null_never_excludes(rules: RuleSet) -> None:
    line = ("Out of memory: Killed process 48213 (python3) total-vm:1kB, anon-rss:2kB, file-rss:3kB, "
            "shmem-rss:0kB, UID:0 pgtables:4kB oom_score_adj:0")
    ev = match_records(records([{"ident": "python3", "message": line}, {"ident": "kernel", "message": line},
                                {"ident": None, "format": "text", "message": line}]), rules)
    got = ev.filter(pl.col("rule") == "kernel.oom_kill")
    assert got["line"].to_list() == [2, 3]
    assert got["pid"].to_list() == [48213, 48213]


def test_exclude_pattern(rules: RuleSet) -> None:
    ev = match_records(records([
        {"ident": "systemd", "message": "Started session-4.scope - Session 4 of User root."},
        {"ident": "systemd", "message": "Started sglang.service - SGLang server."},
    ]), rules)
    assert ev["rule"].to_list() == ["systemd.started"] and ev["line"].to_list() == [2]
    assert ev["unit"].to_list() == ["sglang.service"]


OOM_LINES = [
    ("kernel", "python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, "
               "oom_score_adj=0"),
    ("kernel", "CPU: 7 PID: 48213 Comm: python3 Tainted: P           OE      6.8.0-57-generic #59~22.04.1-Ubuntu"),
    ("kernel", "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,"
               "task_memcg=/system.slice/sglang.service,task=python3,pid=48213,uid=0"),
    ("kernel", "Out of memory: Killed process 48213 (python3) total-vm:123456789kB, anon-rss:98765432kB, "
               "file-rss:123456kB, shmem-rss:0kB, UID:0 pgtables:250000kB oom_score_adj:0"),
    ("kernel", "oom_reaper: reaped process 48213 (python3), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB"),
]


def test_oom_report_over_several_records_is_one_event(rules: RuleSet) -> None:
    rows = []
    for i, (ident, msg) in enumerate(OOM_LINES):
        rows.append({"ident": ident, "host": "a", "message": msg, "ts": T0 + timedelta(milliseconds=i)})
        # another host's kernel OOM report interleaved: must not be merged into host a's event
        rows.append({"ident": "kernel", "host": "b", "message": msg.replace("48213", "777").replace(
            "python3 invoked", "kworker/u8:1 invoked"), "ts": T0 + timedelta(milliseconds=i)})
    ev = match_records(records(rows), rules)
    kills = ev.filter(pl.col("kind") == "oom_kill").sort("host")
    assert kills.height == 2
    a, b = event_fields(kills)
    assert a["trigger_process"] == "python3" and b["trigger_process"] == "kworker/u8:1"
    assert a["constraint"] == "global" and a["cgroup"] == "/system.slice/sglang.service"
    assert a["pid"] == 48213 and a["anon_rss_kb"] == 98765432 and a["reaped_anon_rss_kb"] == 0
    assert kills["unit"].to_list() == ["sglang.service", "sglang.service"]
    assert kills.row(0, named=True)["line"] == 1 and kills.row(0, named=True)["line_end"] == 9
    assert set(ev["kind"]) >= {"oom_invoked", "oom_kill", "oom_reaped"}


def test_oom_report_in_one_multiline_record(rules: RuleSet) -> None:
    msg = "\n".join(m for _, m in OOM_LINES)
    ev = match_records(records([{"ident": "kernel", "message": msg, "line": 10, "line_end": 14}]), rules)
    (f,) = event_fields(ev.filter(pl.col("kind") == "oom_kill"))
    assert f["trigger_process"] == "python3" and f["constraint"] == "global" and f["reaped_anon_rss_kb"] == 0
    assert ev.filter(pl.col("kind") == "oom_kill").select("line", "line_end").row(0) == (10, 14)


def test_context_outside_the_time_window_is_ignored(rules: RuleSet) -> None:
    rows = [{"ident": "kernel", "message": OOM_LINES[0][1], "ts": T0 - timedelta(hours=1)},
            {"ident": "kernel", "message": OOM_LINES[3][1], "ts": T0}]
    (f,) = event_fields(match_records(records(rows), rules).filter(pl.col("kind") == "oom_kill"))
    assert "trigger_process" not in f and f["constraint"] == "global"


def test_context_uses_monotonic_seconds_without_wall_time(rules: RuleSet) -> None:
    rows = [{"ident": "kernel", "format": "dmesg", "ts": None, "mono": 8120.1, "message": OOM_LINES[0][1]},
            {"ident": "kernel", "format": "dmesg", "ts": None, "mono": 8120.2, "message": OOM_LINES[3][1]}]
    (f,) = event_fields(match_records(records(rows), rules).filter(pl.col("kind") == "oom_kill"))
    assert f["trigger_process"] == "python3"


def test_vectorised_and_python_paths_agree(rules: RuleSet) -> None:
    rows = [{"ident": "systemd", "message": m} for m in (
        "a.service: Main process exited, code=exited, status=1/FAILURE",
        "a.service: Scheduled restart job, restart counter is at 3.",
        "Started sglang.service - SGLang \"quoted\" \\ server.",
        "b.service: Failed with result 'signal'.",
    )] + [{"ident": "kernel", "message": m} for _, m in OOM_LINES] + [
        {"ident": "python3", "format": "sglang", "rank": "TP1", "message": "Received sigquit from a child process. "
                                                                          "It usually means the child failed."},
        # a cast taken out of Go's quoting (`unquote`), in polars as in Python
        {"ident": "kubelet", "message": 'I0525 20:12:09.885628    4052 prober.go:107] "Probe failed" '
         'probeType="Liveness" pod="ns/p-0" podUID="u" containerName="c" probeResult="failure" '
         'output="Get \\"http://10.0.0.1/health\\": a \\\\ b"'}]
    a = match_records(records(rows), rules)
    b = match_records(records(rows), rules, vectorise=False)
    assert a.equals(b)
    assert a.filter(pl.col("rule") == "systemd.started")["fields"][0] == (
        '{"description":"SGLang \\"quoted\\" \\\\ server","state":"Started","unit":"sglang.service"}')
    assert json.loads(a.filter(pl.col("rule") == "kubelet.probe_failed")["fields"][0])["output"] == (
        'Get "http://10.0.0.1/health": a \\ b')
    # a busy node logs tens of thousands of these a GiB: the Python path cost them 30 us each (+8% ingest)
    from forensics.match import vectorisable
    assert vectorisable(rules.get("kubelet.probe_failed")) and vectorisable(rules.get("kubelet.crash_loop_backoff"))


def test_regex_engine_rule_with_lookahead(rules: RuleSet) -> None:
    ev = match_records(records([
        {"format": "text", "message": "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"},
        {"format": "text", "message": "RuntimeError: CUDA error: out of memory"},
    ]), rules)
    assert ev.select("line", "kind").rows() == [(1, "cuda_error"), (2, "cuda_oom")]


BACKTRACK_RULE = backtrack_pack("bt", "bt.run", "bt_run")


@pytest.fixture(scope="module")
def backtrack_rules(tmp_path_factory: pytest.TempPathFactory) -> RuleSet:
    p = tmp_path_factory.mktemp("bt") / "bt.yaml"
    p.write_text(BACKTRACK_RULE)
    return RuleSet(rules=load_pack(p).rules)


def test_regex_budget_holds_across_batches_of_one_source(backtrack_rules: RuleSet) -> None:
    """The budget is per rule and source over every batch: once spent, later batches are not searched."""
    import time

    from forensics.regexbudget import RegexBudget

    hostile = [{"ident": "app", "message": "a" * 40 + "!"} for _ in range(6)]
    budget = RegexBudget(budget=0.2, timeout=0.05)
    t0 = time.monotonic()
    for batch in range(4):
        rows = [{**r, "line": batch * 10 + i + 1} for i, r in enumerate(hostile)]
        rows.append({"ident": "app", "message": "aaaa", "line": batch * 10 + 9})   # a match, once the rule runs
        ev = match_records(records(rows), backtrack_rules, budget=budget)
        assert ev.height == 0   # the budget is spent on the first batch's hostile lines, before line 9
    took = time.monotonic() - t0
    assert took < 0.2 + 0.05 + 1.5, f"{took:.2f} s: the budget did not hold across batches"
    (t,) = budget.timeouts()
    assert t.rule == "bt.run" and t.source == "t.log" and t.first == "t.log:1" and t.location.endswith("bt.yaml:5")
    assert 1 <= t.timed_out <= 6 and t.exhausted and t.timed_out + t.skipped == 4 * 7
    text = t.describe()
    assert "bt.run" in text and "timed out" in text and "t.log" in text and f"other {t.skipped}" in text
    # another source has its own budget
    other = records([{**hostile[0], "path": "u.log"}])
    match_records(other, backtrack_rules, budget=budget)
    assert {x.source for x in budget.timeouts()} == {"t.log", "u.log"}


def test_sane_regex_rules_are_never_charged(rules: RuleSet) -> None:
    from forensics.regexbudget import RegexBudget

    msgs = [{"format": "text", "message": "RuntimeError: CUDA error: out of memory"}] * 2000
    budget = RegexBudget(budget=0.0001)
    ev = match_records(records(msgs), rules, budget=budget)
    assert ev.filter(pl.col("kind") == "cuda_oom").height == 2000 and budget.timeouts() == ()


def test_a_collection_inside_a_search_is_not_charged(rules: RuleSet) -> None:
    """Python's cycle collector can start inside any search (when its match object is made) and take
    milliseconds on a big heap: that time is not the rule's, and a sane rule is never charged for it."""
    import gc

    from forensics.regexbudget import RegexBudget

    heap = [[i] for i in range(300_000)]  # a full collection walks all of it: well over REGEX_FREE

    class Collecting:
        def search(self, message: str, timeout: float) -> None:
            t = time.thread_time()
            gc.collect()
            took.append(time.thread_time() - t)

    took: list[float] = []
    rule = next(r for r in rules.rules if r.id == "cuda.error")
    budget = RegexBudget(budget=0.0001)
    for line in range(1, 4):
        budget.search(rule, Collecting(), "CUDA error: x", "t.log", line)
    assert min(took) > budget.free and heap  # the collections did cost more than a search is allowed
    assert budget.timeouts() == () and not budget.spent(rule, "t.log")


def test_a_nearly_spent_budget_does_not_shorten_the_timeout(rules: RuleSet) -> None:
    """The timeout runs on the wall clock: were it cut to what is left of the (CPU) budget, a sane search that
    the machine paused for a millisecond would time out, and its match be lost."""
    from forensics.regexbudget import RegexBudget

    asked: list[float] = []

    class Recording:
        def search(self, message: str, timeout: float) -> None:
            asked.append(timeout)

    rule = next(r for r in rules.rules if r.id == "cuda.error")
    budget = RegexBudget(budget=0.0001, timeout=0.25)
    budget.search(rule, Recording(), "CUDA error: x", "t.log", 1)
    assert asked == [0.25]


def test_explain_and_examples_name_a_rule_that_timed_out(backtrack_rules: RuleSet, tmp_path: Path) -> None:
    from forensics.parse import parse_text

    ex = explain(parse_text("2025-05-25T00:00:00+00:00 h app[1]: " + "a" * 32 + "!\n", path="x.log"),
                 backtrack_rules)
    (rec,) = ex.records
    assert rec.timed_out == ("bt.run",) and any("bt.run" in n and "timed out" in n for n in rec.timeout_notes)
    p = tmp_path / "slow.yaml"
    p.write_text(BACKTRACK_RULE.replace("match: ['2025-05-25T00:00:00+00:00 h app[1]: aaaa']",
                                        "match: ['2025-05-25T00:00:00+00:00 h app[1]: " + "a" * 32 + "!']"))
    bad = [str(r) for r in run_examples(RuleSet(rules=load_pack(p).rules)) if not r.ok]
    assert len(bad) == 1 and "did not match" in bad[0] and "timed out" in bad[0], bad


def test_events_sorted_by_path_line_rule(rules: RuleSet) -> None:
    msg = "a.service: Main process exited, code=killed, status=9/KILL"
    df = records([{"ident": "systemd", "message": msg, "path": p, "line": n} for p, n in
                  (("z.log", 1), ("a.log", 7), ("a.log", 2))])
    assert match_records(df, rules).select("path", "line").rows() == [("a.log", 2), ("a.log", 7), ("z.log", 1)]


def test_empty_inputs(rules: RuleSet) -> None:
    assert match_records(records([]).clear(), rules).height == 0
    assert match_records(records([{"message": "nothing to see"}]), rules).height == 0
    assert dict(match_records(records([{"message": None}]), rules).schema) == EVENT_SCHEMA


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200), min_size=1,
                max_size=5))
def test_never_raises_on_arbitrary_messages(rules: RuleSet, msgs: list[str]) -> None:
    ev = match_records(records([{"message": m, "ident": "kernel"} for m in msgs]), rules)
    assert dict(ev.schema) == EVENT_SCHEMA


# ------------------------------------------------------------------------------------------ noise near-misses


NOISE = [
    "May 25 20:17:19 gpu-a01 systemd[1]: dcgm-exporter.service: Main process exited, code=exited, status=1/FAILURE",
    "May 25 20:17:19 gpu-a01 systemd[1]: dcgm-exporter.service: Main process exited, code=exited, status=0/SUCCESS",
    "May 25 20:17:19 gpu-a01 python3[45286]: [2025-05-25 20:17:19 TP0] KV cache pool is full. Retract requests. "
    "#retracted_reqs: 2, #new_token_ratio: 0.4012 -> 0.7000",
    "May 25 20:17:19 gpu-a01 python3[45286]: [2025-05-25 20:17:19 TP0] Prefill out of memory is not expected here; "
    "#queue-req: 3, chunked_prefill_size: 8192",
    "May 25 20:17:19 gpu-a01 python3[45286]: [2025-05-25 20:17:19 TP0] Scheduler watchdog: forward pass took 1.73 s "
    "(threshold 300 s)",
    "May 25 20:17:19 gpu-a01 python3[45286]: [2025-05-25 20:17:19] ERROR:    Exception in ASGI application",
    "May 25 20:17:19 gpu-a01 python3[45286]: Traceback (most recent call last):",
    'May 25 20:17:19 gpu-a01 python3[45286]:   File "/usr/lib/python3.10/asyncio/tasks.py", line 445, in wait_for',
    "May 25 20:17:19 gpu-a01 python3[45286]:     return fut.result()",
    "May 25 20:17:19 gpu-a01 python3[45286]: asyncio.exceptions.CancelledError",
    "May 25 20:17:20 gpu-a01 kernel: NVRM: GPU at PCI:0000:3b:00.0: GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae",
]


def test_corpus_noise_produces_no_cause(rules: RuleSet) -> None:
    from forensics.parse import parse_text

    ev = match_records(parse_text("\n".join(NOISE) + "\n", path="noise.log"), rules)
    assert ev.filter(pl.col("role") == "cause").height == 0
    assert set(ev["kind"]) <= {"service_exited", "kv_cache_pressure", "python_traceback"}
    tb = ev.filter(pl.col("kind") == "python_traceback")
    assert tb.height == 1 and event_fields(tb)[0]["origin"] == "Exception in ASGI application"


# ------------------------------------------------------------------------------------------ casts


@pytest.mark.parametrize("text,expected", [
    ("1.16 GiB", 1245540516), ("471.69 MiB", 494602813), ("123 bytes", 123), ("61.2G", 65712999629),
    ("512K", 524288), ("0B", 0),
])
def test_cast_bytes(text: str, expected: int) -> None:
    assert cast_bytes(text) == expected


def test_cast_kb_duration_signal_sm_cgroup() -> None:
    assert cast_kb("98765432kB") == 98765432 and cast_kb("98765432") == 98765432 and cast_kb("1 GiB") == 1048576
    assert cast_duration("2min 3.456s") == pytest.approx(123.456)
    assert cast_duration("1h 2min") == 3720 and cast_duration("345ms") == pytest.approx(0.345)
    assert cast_duration_ms("600000 milliseconds") == 600000 and cast_duration("3min") == 180
    with pytest.raises(ValueError):
        cast_duration("soon")
    assert cast_signal("SIGKILL") == "KILL" and cast_signal("9") == "KILL" and cast_signal("ABRT") == "ABRT"
    assert cast_sm_arch("compute_120a") == "sm_120" and cast_sm_arch("12.0") == "sm_120"
    assert cast_sm_arch("[12]") == "sm_12x" and cast_sm_arch("90") == "sm_90"
    assert (cast_cuda_version(12080), cast_cuda_version("11040"), cast_cuda_version("9020")) == ("12.8", "11.4", "9.2")
    assert cast_cuda_version("13.0") == "13.0" and cast_cuda_version("0") is None and cast_cuda_version("x") is None
    assert cast_cgroup_unit("/system.slice/sglang.service") == "sglang.service"
    assert cast_cgroup_unit("/user.slice/user-1001.slice/session-190.scope") == "session-190.scope"
    assert cast_cgroup_unit("/") is None


def test_flags_from_command_lines() -> None:
    f = cast_flags("/root/venv/bin/python -m sglang.launch_server --model-path /m --tp-size 8 "
                   "--mem-fraction-static=0.90 --trust-remote-code --cuda-graph-bs 1 2 4 --chat-template 'a b' "
                   "--offset -1")
    assert f == {"--model-path": "/m", "--tp-size": "8", "--mem-fraction-static": "0.90",
                 "--trust-remote-code": True, "--cuda-graph-bs": "1 2 4", "--chat-template": "a b",
                 "--offset": "-1"}
    assert cast_flags("python -m x --a 'unbalanced") == {"--a": "'unbalanced"}


def test_flags_from_server_args_never_eval() -> None:
    text = ("server_args=ServerArgs(model_path='/models/Q', mem_fraction_static=0.9, tp_size=8, "
            "trust_remote_code=False, dist_timeout=None, json_model_override_args='{\"a\": [1, 2]}', "
            "lora_paths=['x', 'y'], chat_template=\"it's\", api_key=__import__('os').system('true'))")
    f = parse_server_args(text)
    assert f["--model-path"] == "/models/Q" and f["--mem-fraction-static"] == "0.9" and f["--tp-size"] == "8"
    assert f["--trust-remote-code"] is False and f["--dist-timeout"] is None
    assert f["--json-model-override-args"] == '{"a": [1, 2]}' and f["--lora-paths"] == "['x', 'y']"
    assert f["--api-key"] == "__import__('os').system('true')" and f["--chat-template"] == "it's"
    d = parse_server_args("server_args={'model_path': '/m', 'enable_metrics': True, 'tp_size': 2}")
    assert d == {"--model-path": "/m", "--enable-metrics": True, "--tp-size": "2"}


# ------------------------------------------------------------------------------------------ explain


def _explain(rules: RuleSet, line: str):
    from forensics.parse import parse_text

    (rec,) = explain(parse_text(line), rules).records
    return rec


@pytest.mark.parametrize("status, rule, says, never", [
    ("9/KILL", "systemd.main_killed", "could not catch, ignore or handle it", "can be caught"),
    ("15/TERM", "systemd.main_signaled", "this signal can be caught", "Something sent the SIGKILL"),
    ("2/INT", "systemd.main_signaled", "this signal can be caught", "Something sent the SIGKILL"),
])
def test_a_killing_signal_is_explained_as_itself(rules: RuleSet, status: str, rule: str, says: str,
                                                 never: str) -> None:
    """Both are service_killed; only SIGKILL is told as the signal that cannot be caught (a SIGTERM death read
    as 'something sent the SIGKILL' sent the reader to the OOM killer)."""
    df = records([{"ident": "systemd", "pid": 1, "message": f"x.service: Main process exited, code=killed, status={status}"}])
    (e,) = match_records(df, rules).iter_rows(named=True)
    assert (e["kind"], e["rule"], e["severity"]) == ("service_killed", rule, "error")
    text = rules.get(rule).render_explain(json.loads(e["fields"]))
    assert says in text and never not in text and f"status={status}" in text


def test_an_explain_leaves_out_the_asides_its_event_cannot_fill(rules: RuleSet) -> None:
    """An OOM kill line seen alone names no trigger and no cgroup: `forensics explain` says what the report's prose
    says, without the asides (`the kill (?)`, `cgroup (?)` before), and keeps those it can fill."""
    line = ("Out of memory: Killed process 1234 (python3) total-vm:100kB, anon-rss:50kB, file-rss:0kB, "
            "shmem-rss:0kB, UID:0 pgtables:10kB oom_score_adj:0")
    (e,) = match_records(records([{"ident": "kernel", "message": line}]), rules).iter_rows(named=True)
    text = rules.get(e["rule"]).render_explain(json.loads(e["fields"]))
    assert "(?)" not in text and "triggered the kill — not necessarily" in text
    assert "killed process 1234 (python3)" in text and "(global:" in text


def test_explain_tells_near_miss_from_no_match_systemd(rules: RuleSet) -> None:
    r = _explain(rules, "May 25 20:17:19 h systemd[1]: x.service: Main process exited, code=trapped, status=5/TRAP")
    assert r.verdict == "near_miss"
    texts = [n.describe() for n in r.near]
    # a signal other than KILL is systemd.main_signaled's (systemd.main_killed reads status=9/KILL only)
    assert "near miss: systemd.main_signaled: matched `...: Main process exited, code=` but not `killed`" in texts
    r = _explain(rules, "May 25 20:17:19 h sshd[7]: Accepted publickey for root from 10.0.0.1 port 22 ssh2")
    assert r.verdict == "no_match" and not r.near


def test_explain_tells_near_miss_from_no_match_kernel(rules: RuleSet) -> None:
    r = _explain(rules, "[ 8120.114230] Out of memory: Killed process 48213 (python3) total-vm:123kB, anon-rss:9")
    assert r.verdict == "near_miss" and r.near[0].rule == "kernel.oom_kill"
    assert r.near[0].missing == "kB" and "Killed process 48213 (python3)" in r.near[0].matched
    r = _explain(rules, "[ 8120.114230] EXT4-fs (nvme0n1p1): mounted filesystem with ordered data mode.")
    assert r.verdict == "no_match"


def test_explain_reports_why_a_matching_pattern_did_not_apply(rules: RuleSet) -> None:
    r = _explain(rules, "May 25 20:17:19 h python3[9]: Out of memory: Killed process 1 (x) total-vm:1kB, "
                        "anon-rss:2kB, file-rss:3kB, shmem-rss:0kB")
    assert r.verdict == "near_miss"
    assert "applies only where ident is kernel (this record: ident=python3)" in r.near[0].describe()


def test_explain_match(rules: RuleSet) -> None:
    r = _explain(rules, "May 25 20:17:19 dflash-train systemd[1]: sglang-k26-eagle3.service: Failed to kill control "
                        "group /system.slice/sglang-k26-eagle3.service, ignoring: Invalid argument")
    assert r.verdict == "match" and r.events[0]["kind"] == "cgroup_kill_failed"


def test_top_level_items() -> None:
    flags, (items,) = top_level(r"(?m)^(?P<u>[^\s:]+): x\.y[a-c]{2,3}?(?:k|l)+z")
    assert flags == "(?m)"
    assert items == ["^", r"(?P<u>[^\s:]+)", ":", " ", "x", r"\.", "y", "[a-c]{2,3}?", "(?:k|l)+", "z"]
    assert len(top_level("a|b(c|d)")[1]) == 2


# ------------------------------------------------------------------------------------------ CLI


@pytest.fixture
def cli() -> click.Group:
    @click.group()
    @click.pass_context
    def main(ctx: click.Context) -> None:
        ctx.ensure_object(dict)

    cli_rules.register(main)
    return main


def test_cli_rules_list_show_test(cli: click.Group) -> None:
    run = CliRunner()
    res = run.invoke(cli, ["rules", "list", "--json"])
    assert res.exit_code == 0
    rows = json.loads(res.output)
    assert {"id", "kind", "severity", "role", "pack", "source"} <= set(rows[0])
    res = run.invoke(cli, ["rules", "show", "kernel.oom_kill"])
    assert res.exit_code == 0 and "signal" in res.output.lower() and "context:" in res.output
    res = run.invoke(cli, ["rules", "show", "kernel.oom_kil"])
    assert res.exit_code == 1 and "did you mean kernel.oom_kill" in res.output
    res = run.invoke(cli, ["rules", "test", "systemd", "kernel"])
    assert res.exit_code == 0, res.output
    res = run.invoke(cli, ["rules", "test", "nosuchpack"])
    assert res.exit_code == 2


def test_cli_rules_test_and_check_fail_with_location(cli: click.Group, tmp_path: Path) -> None:
    p = tmp_path / "mine.yaml"
    p.write_text("""pack: mine
rules:
  - id: mine.ready
    kind: server_ready
    severity: info
    role: context
    pattern: 'fired up and ready to roll'
    title: ready
    explain: ready
    examples:
      match: ['[2025-05-25 20:11:52] The server is fired up and ready to go!']
      near_miss: ['INFO:     Application startup complete.']
""")
    res = CliRunner().invoke(cli, ["rules", "test", str(p)])
    assert res.exit_code == 1 and "mine.yaml:11: mine.ready: example: did not match" in res.output
    res = CliRunner().invoke(cli, ["rules", "check", str(p)])
    assert res.exit_code == 1 and "mine.yaml:11: mine.ready" in res.output
    p.write_text(p.read_text().replace("    pattern:", "    patern:"))
    res = CliRunner().invoke(cli, ["rules", "check", str(p)])
    assert res.exit_code == 1 and "mine.yaml:7: unknown key 'patern' in rule 'mine.ready'" in res.output
    res = CliRunner().invoke(cli, ["rules", "check", str(tmp_path / "missing.yaml")])
    assert res.exit_code == 2


def test_cli_explain(cli: click.Group, tmp_path: Path) -> None:
    run = CliRunner()
    res = run.invoke(cli, ["explain", "May 25 20:17:19 h systemd[1]: x.service: Main process exited, code=killed, "
                                      "status=9/KILL"])
    assert res.exit_code == 0 and "systemd.main_killed -> service_killed" in res.output
    res = run.invoke(cli, ["explain", "May 25 20:17:19 h systemd[1]: x.service: Main process exited, code=trapped, "
                                      "status=5/TRAP"])
    assert res.exit_code == 1 and "near miss: systemd.main_signaled: matched `...: Main process exited, code=` " \
                                  "but not `killed`" in res.output
    res = run.invoke(cli, ["explain", "hello world"])
    assert res.exit_code == 1 and "no rule comes close" in res.output
    f = tmp_path / "k.log"
    f.write_text("\n".join(f"[ 8120.{i:06d}] {m}" for i, (_, m) in enumerate(OOM_LINES)) + "\n")
    res = run.invoke(cli, ["explain", "--file", str(f), "--line", "4", "--json"])
    assert res.exit_code == 0
    (rec,) = json.loads(res.output)
    kill = [e for e in rec["events"] if e["kind"] == "oom_kill"][0]
    assert kill["line"] == 1 and kill["line_end"] == 5 and kill["fields"]["trigger_process"] == "python3"
    # --file reads the file as ingest does: compressed, UTF-16 (it was read as UTF-8 text: `D e c   3 1 ...`)
    import gzip

    text = f.read_text()
    for name, data in (("k.log.gz", gzip.compress(text.encode())), ("k16.log", text.encode("utf-16"))):
        (tmp_path / name).write_bytes(data)
        res = run.invoke(cli, ["explain", "--file", str(tmp_path / name), "--line", "4", "--json"])
        assert res.exit_code == 0, (name, res.output)
        assert [_no_source(r) for r in json.loads(res.output)] == [_no_source(rec)], name


def _no_source(rec: dict) -> dict:
    return {**rec, "events": [{k: v for k, v in e.items() if k != "source"} for e in rec["events"]]}


def _events_frame() -> pl.DataFrame:
    rows = [
        {"ts": T0, "kind": "oom_kill", "rule": "kernel.oom_kill", "severity": "critical", "role": "cause",
         "host": "gpu-a", "unit": "sglang.service", "pid": 48213, "title": "OOM", "fields": '{"pid":48213}',
         "message": "Out of memory: Killed process 48213", "path": "k.log", "line": 10, "line_end": 20},
        {"ts": T0 + timedelta(seconds=1), "kind": "service_killed", "rule": "systemd.main_killed",
         "severity": "error", "role": "symptom", "host": "gpu-a", "unit": "sglang.service", "pid": 1,
         "title": "killed", "fields": '{"signal":"KILL"}', "message": "x", "path": "j.log", "line": 5, "line_end": 5},
        {"ts": None, "kind": "service_started", "rule": "systemd.started", "severity": "info", "role": "context",
         "host": "gpu-b", "unit": "other.service", "pid": 1, "title": "Started", "fields": "{}", "message": "y",
         "path": "j.log", "line": 1, "line_end": 1},
    ]
    return conform(pl.DataFrame(rows, schema_overrides={"ts": EVENT_SCHEMA["ts"]}, strict=False), EVENT_SCHEMA)


def test_cli_events(cli: click.Group, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_rules, "open_events", lambda ctx: _events_frame().lazy())
    monkeypatch.setattr(cli_rules, "event_names", lambda ctx: (pl.col("host"), pl.col("unit")))
    run = CliRunner()
    res = run.invoke(cli, ["events", "--json"])
    assert res.exit_code == 0
    rows = json.loads(res.output)
    assert [r["kind"] for r in rows] == ["oom_kill", "service_killed", "service_started"]
    assert set(rows[0]) == {"ts", "ts_source", "kind", "rule", "severity", "role", "host", "unit", "pid", "title",
                            "source", "line", "line_end", "message", "fields"}
    jsonl = json.loads(run.invoke(cli, ["events", "--format", "jsonl"]).output.splitlines()[0])
    assert list(rows[0]) == list(jsonl)  # the same keys, in the same order, as the export's rows
    assert rows[0]["ts"] == "2025-05-25T20:17:19.000000Z" and rows[0]["fields"] == {"pid": 48213}
    assert rows[0]["source"] == "k.log" and rows[2]["ts"] is None
    res = run.invoke(cli, ["events", "--json", "--severity", "error"])
    assert [r["kind"] for r in json.loads(res.output)] == ["oom_kill", "service_killed"]
    res = run.invoke(cli, ["events", "--json", "--role", "cause", "--unit", "sglang.*"])
    assert [r["kind"] for r in json.loads(res.output)] == ["oom_kill"]
    res = run.invoke(cli, ["events", "--json", "--kind", "service_killed", "--kind", "service_started",
                           "--host", "gpu-a"])
    assert [r["kind"] for r in json.loads(res.output)] == ["service_killed"]
    res = run.invoke(cli, ["events", "--json", "--since", "2025-05-25 20:17:20", "--until", "2025-05-26"])
    assert [r["kind"] for r in json.loads(res.output)] == ["service_killed"]
    res = run.invoke(cli, ["events"])
    assert res.exit_code == 0 and "k.log:10-20" in res.output and "critical" in res.output
    res = run.invoke(cli, ["events", "--kind", "gpu_xid"])
    assert res.exit_code == 1


GEN_CORPUS = Path("/work/shared/bench/gen_corpus.py")


@pytest.mark.skipif(not GEN_CORPUS.exists(), reason="the benchmark corpus generator is not available")
def test_corpus_generator_flashinfer_variants(rules: RuleSet) -> None:
    """The three FlashInfer failures the benchmark plants (gen_corpus.sg_flashinfer_tb) are each one
    flashinfer_arch_unsupported event for sm_120, in SGLang's own log and in the journal."""
    import importlib.util
    import random

    from forensics.parse import parse_text

    spec = importlib.util.spec_from_file_location("gen_corpus", GEN_CORPUS)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    variants = {}
    for seed in range(200):
        raw = gen.sg_flashinfer_tb(random.Random(seed), 3)
        variants.setdefault(next(x for x in raw if x.startswith("RuntimeError"))[:24], raw)
        if len(variants) == 3:
            break
    assert len(variants) == 3
    for raw in variants.values():
        text = "[2025-05-27 00:53:44 TP3] Scheduler hit an exception: " + "\n".join(raw) + "\n"
        journal = "\n".join(f"May 27 00:53:44 gpu-a01 python3[4242]: {x}" for x in text.splitlines()) + "\n"
        for t in (text, journal):
            ev = match_records(parse_text(t, path="x.log"), rules)
            fi = ev.filter(pl.col("kind") == "flashinfer_arch_unsupported")
            assert fi.height == 1 and event_fields(fi)[0]["arch"] == "sm_120", ev.select("rule", "fields").rows()
            assert ev.filter(pl.col("kind").is_in(["cuda_arch_unsupported", "cuda_error"])).height == 0


@pytest.mark.parametrize("cut", [1, 60, 100, 172])
def test_streamed_matching_is_the_same_wherever_batches_are_cut(rules: RuleSet, cut: int) -> None:
    """`Matcher` over batches (as ingest streams them) gives the events of matching the whole source at once,
    even when a batch ends inside a kernel OOM report (its context records then come in the next batch)."""
    text = (Path(__file__).resolve().parent.parent / "samples" / "incident" / "dmesg.log").read_text()
    recs = parse_text(text, path="dmesg.log")
    whole = match_records(recs, rules)
    assert whole.filter(pl.col("kind") == "oom_kill")["line_end"].to_list() == [173]  # through `oom_reaper`
    m = Matcher(rules)
    got = pl.concat([m.add(recs.filter(pl.col("line") <= cut)), m.add(recs.filter(pl.col("line") > cut)),
                     m.finish()])
    assert got.equals(whole)


@pytest.mark.parametrize("flush_rows", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("batch", [1, 7, 40])
def test_streamed_matching_is_the_same_wherever_flushes_come(rules: RuleSet, flush_rows: int, batch: int) -> None:
    """A flush mid-stream loses no context: an OOM report's `invoked oom-killer` (context before, up to 20,000
    lines) and its `oom_reaper` (context after) land in other flushes than its `Killed process` line when
    flushes come every few candidates, and the events are still those of matching the whole file at once, in
    the same order (the seed dmesg, and the journal of the SGLang service around it)."""
    here = Path(__file__).resolve().parent.parent / "samples" / "incident"
    for name in ("dmesg.log", "journal-eagle3.log"):
        recs = parse_text((here / name).read_text(), path=name)
        whole = match_records(recs, rules)
        m = Matcher(rules, flush_rows=flush_rows)
        got = pl.concat([*(m.add(recs.slice(i, batch)) for i in range(0, recs.height, batch)), m.finish()])
        assert got.equals(whole), name
        if name == "dmesg.log":
            assert whole.filter(pl.col("kind") == "oom_kill")["line_end"].to_list() == [173]


def test_a_flush_holds_back_what_a_context_after_has_not_seen(rules: RuleSet) -> None:
    """The `Killed process` line is the last record seen at a flush: its event waits for the next flush, which
    sees its `oom_reaper` line; the candidates a flush keeps for later contexts stay few."""
    here = Path(__file__).resolve().parent.parent / "samples" / "incident"
    recs = parse_text((here / "dmesg.log").read_text(), path="dmesg.log")
    killed = int(recs.filter(pl.col("message").str.contains("Killed process"))["line"][0])
    m = Matcher(rules, flush_rows=1)
    first = m.add(recs.filter(pl.col("line") <= killed))
    assert first.filter(pl.col("kind") == "oom_kill").height == 0 and m._held is not None
    assert m._held.height < 60
    rest = pl.concat([m.add(recs.filter(pl.col("line") > killed)), m.finish()])
    assert rest.filter(pl.col("kind") == "oom_kill")["line_end"].to_list() == [173]
    assert pl.concat([first, rest]).equals(match_records(recs, rules))


def test_streamed_matching_flushes_in_bounded_slices(rules: RuleSet) -> None:
    """Candidates gather up to `flush_rows`, then the rules run over them: every flush's events are final."""
    rows = [{"ident": "systemd", "message": f"x{i}.service: Main process exited, code=killed, status=9/KILL",
             "line": i, "line_end": i} for i in range(1, 401)]
    m = Matcher(rules, flush_rows=100)
    sizes = [m.add(records(rows[i:i + 50])).height for i in range(0, 400, 50)] + [m.finish().height]
    assert sizes == [0, 100, 0, 100, 0, 100, 0, 100, 0]


def test_more_rules_on_the_same_literals_flush_sooner(tmp_path: Path) -> None:
    """A flush comes after `flush_rows` (rule, context) keys' worth of candidates: with every built-in rule
    copied under another id, a candidate leads to twice the rules, and a flush holds half the candidates (its
    events, twice as many each, stay as many as before); the events are those of matching at once."""
    import importlib.util

    run = Path(__file__).resolve().parent.parent / "bench" / "run.py"
    spec = importlib.util.spec_from_file_location("bench_run", run)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    (copy,) = bench.scaled_rules(2, tmp_path)   # the packs copied under other ids, as `make bench` scales them
    rows = [{"ident": "systemd", "message": f"x{i}.service: Main process exited, code=killed, status=9/KILL",
             "line": i, "line_end": i} for i in range(1, 401)]
    sizes = {}
    for k, rs in ((1, load_rules()), (2, load_rules([Path(copy)]))):
        m = Matcher(rs, flush_rows=100)
        out = [m.add(records(rows[i:i + 25])) for i in range(0, 400, 25)] + [m.finish()]
        sizes[k] = [f.height for f in out]
        assert pl.concat(out).equals(match_records(records(rows), rs))
    assert sizes[1] == [0, 0, 0, 100] * 4 + [0]
    assert sizes[2] == [0, 100] * 8 + [0]      # 50 candidates, 2 events each


def test_streamed_events_carry_the_columns_of_their_records(rules: RuleSet) -> None:
    """`carry`: each event of a flush has those columns of its own record (the OOM report's first record, a
    multi-line one, and not the records its context patterns read), after the columns of EVENT_SCHEMA,
    which are the events' without carry."""
    text = (Path(__file__).resolve().parent.parent / "samples" / "incident" / "dmesg.log").read_text()
    recs = parse_text(text, path="dmesg.log").with_columns((pl.col("line") * 10).alias("_w"))
    plain, carried = Matcher(rules), Matcher(rules, carry=("_w", "absent"))
    cut = recs.height // 2
    for m in (plain, carried):
        m.keep(recs.slice(0, cut))
        m.keep(recs.slice(cut))
    a, b = plain.finish(), carried.finish()
    assert a.height > 2 and b.columns == [*a.columns, "_w"]
    assert b.drop("_w").equals(a)
    assert b["_w"].to_list() == (b["line"] * 10).to_list()
    oom = b.filter(pl.col("kind") == "oom_kill")
    assert oom.height == 1 and oom["line_end"][0] > oom["line"][0] and oom["_w"][0] == 10 * oom["line"][0]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(alphabet="ab.(|*)[]^$?+{}\\ -Kk", min_size=3, max_size=6), min_size=1, max_size=8, unique=True),
       st.lists(st.text(alphabet="ab.(|*)[]^$?+{}\\ -KkAB\u212a", max_size=30), min_size=1, max_size=30),
       st.booleans(), st.integers(1, 9))
def test_prefilter_alternation_holds_what_contains_any_holds(lits: list[str], msgs: list[str], ignore_case: bool,
                                                             group: int) -> None:
    """The prefilter's regex alternations of escaped literals, one per search group of at most `group` literals,
    pass every message `str.contains_any` passes (and, case-sensitive, exactly those)."""
    import forensics.literals as literals
    import forensics.match as match

    frame = pl.DataFrame({"message": msgs})
    want = frame.select(pl.col("message").str.contains_any(lits, ascii_case_insensitive=ignore_case)).to_series()
    old = literals.SEARCH_GROUP
    literals.SEARCH_GROUP = group
    try:
        got = frame.select(match._any_literal(tuple(lits), ignore_case)).to_series()
    finally:
        literals.SEARCH_GROUP = old
    assert not (want & ~got).any()            # never less than the literals ask for
    if not ignore_case:
        assert got.equals(want)
    # ignoring case, `(?i)` folds Unicode too (the Kelvin sign K is a k): a superset, never more on ASCII text
    if ignore_case and all(m.isascii() for m in msgs):
        assert got.equals(want)


def _example_records(rules: RuleSet) -> pl.DataFrame:
    """Every example line of every built-in rule (matching and near-miss) as records of one file."""
    parts = []
    for r in rules.rules:
        for ex in (*r.examples, *r.near_misses):
            recs = parse_text(ex.text if ex.text.endswith("\n") else ex.text + "\n", fmt=ex.format)
            parts.append(recs.select(pl.col("message"), pl.col("ident"), pl.col("unit"), pl.col("pid"),
                                     pl.col("format"), pl.col("host"), pl.col("line_end") - pl.col("line") + 1))
    df = pl.concat(parts, how="vertical_relaxed").rename({"line_end": "_span"})
    line = df.get_column("_span").cum_sum() - df.get_column("_span") + 1
    return records([{**row, "line": int(a), "line_end": int(a + row.pop("_span") - 1)}
                    for row, a in zip(df.to_dicts(), line)])


@pytest.mark.parametrize("ident, fmt", [("sglang", None), ("kernel", None), ("systemd", None),
                                        ("systemd-journald", None), ("python3", None), (None, None),
                                        (None, "journal-short"), ("systemd", "journal-short-iso"), (None, "dmesg"),
                                        (None, "systemctl-is-active"), (None, "unit-file")])
def test_a_single_identifier_or_format_batch_is_prefiltered_for_its_rules_only_and_loses_no_event(
        rules: RuleSet, ident: str | None, fmt: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch whose records all carry one identifier (or format) searches only the literals of the rules that may
    apply to it (and of every context pattern): the events are those of the full prefilter, line for line."""
    import forensics.match as match

    recs = _example_records(rules)
    if ident is not None:
        recs = recs.with_columns(pl.lit(ident).alias("ident"))
    if fmt is not None:
        recs = recs.with_columns(pl.lit(fmt).alias("format"))
    assert match._only(recs, "ident") == ident
    if fmt is not None:
        assert match._only(recs, "format") == fmt
    narrow = Matcher(rules)
    narrow.keep(recs)
    got, got_once = narrow.finish(), match_records(recs, rules)
    assert got.equals(_with_the_full_prefilter(recs, rules, monkeypatch))
    assert got_once.equals(match_records(recs, rules))     # `match_records` (rescan, explain) the same way


@pytest.mark.parametrize("slice_rows", [1, 7, 64])
def test_candidates_listed_a_slice_at_a_time_keep_their_positions(
        rules: RuleSet, slice_rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each pair names its candidate's position in the candidate frame (POS), counted across the slices whose
    literals are listed at a time: every rule then reads its own rows, so the events are those of one slice."""
    import forensics.match as match

    recs = _example_records(rules)
    cand = match._frame(recs).filter(pl.int_range(pl.len()) % 3 != 1)   # ROW ids with gaps, as candidates have
    whole = match._pairs(cand, rules)
    want = match_records(recs, rules)
    monkeypatch.setattr(match, "_PAIRS_ROWS", slice_rows)
    sliced = match._pairs(cand, rules)
    assert sliced.sort(pl.all()).equals(whole.sort(pl.all()))
    assert cand.get_column(match.ROW).gather(sliced.get_column(match.POS)).equals(
        sliced.get_column(match.ROW), check_names=False)
    assert match_records(recs, rules).equals(want)


def _with_the_full_prefilter(recs: pl.DataFrame, rules: RuleSet, monkeypatch: pytest.MonkeyPatch) -> pl.DataFrame:
    """The events of a Matcher whose every batch searches every literal (no single identifier or format)."""
    import forensics.match as match

    monkeypatch.setattr(match, "_only", lambda records, col: None)
    full = Matcher(rules)
    full.keep(recs)
    want = full.finish()
    assert want.height > 0
    return want


@pytest.mark.parametrize("formats", [("sglang", "glog"), ("journal-short", "text", "sglang"),
                                     ("a", "b", "c", "d", "e")])
def test_a_batch_of_a_few_formats_is_prefiltered_by_format_and_loses_no_event(
        rules: RuleSet, formats: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of many identifiers and a few formats (an SGLang log with NCCL's glog lines) is split by format,
    each part searching the literals of the rules that may apply to it: the same events as the full prefilter. Past
    `_MAX_SPLIT_FORMATS` formats it takes the full prefilter."""
    import forensics.match as match

    recs = _example_records(rules)
    recs = recs.with_columns(pl.Series("format", [formats[i % len(formats)] for i in range(recs.height)]))
    assert match._only(recs, "ident") is None and match._only(recs, "format") is None
    split = Matcher(rules)
    split.keep(recs)
    assert split.finish().equals(_with_the_full_prefilter(recs, rules, monkeypatch))


def test_a_split_batch_leaves_out_the_literals_of_rules_that_cannot_apply(rules: RuleSet) -> None:
    """`cuda` is dpkg's rule's literal (format `generic`): the `Decode batch` lines of an SGLang log, which all
    hold `cuda graph`, are no candidates of a batch that also holds a glog line; the full prefilter takes them."""
    import forensics.match as match

    decode = ("[2025-05-25 20:54:02 TP0] Decode batch. #running-req: 1, #token: 558, token usage: 0.61, "
              "cuda graph: True, gen throughput (token/s): 19.31, #queue-req: 0")
    ready = "The server is fired up and ready to roll!"
    nccl = "[rank0]:[E525 20:54:03.000000000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective " \
           "operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out."
    recs = records([{"ident": "sglang", "format": "sglang", "message": decode, "line": 1, "line_end": 1},
                    {"ident": "sglang", "format": "sglang", "message": ready, "line": 2, "line_end": 2},
                    {"ident": "ProcessGroupNCCL.cpp:616", "format": "glog", "message": nccl, "line": 3,
                     "line_end": 3}])
    m = Matcher(rules)
    cand = m._candidates(match._frame(recs), recs)
    assert cand.get_column("line").to_list() == [2, 3]
    assert match._frame(recs).filter(m._cond((None, None))).get_column("line").to_list() == [1, 2, 3]


def test_only_and_the_literals_it_selects(rules: RuleSet) -> None:
    import forensics.match as match

    one = records([{"ident": "kernel", "message": "a"}, {"ident": "kernel", "message": "b"}])
    assert match._only(one, "ident") == "kernel"
    assert match._only(records([{"ident": "kernel", "message": "a"}, {"ident": "sglang", "message": "b"}]),
                       "ident") is None
    assert match._only(records([{"ident": "kernel", "message": "a"}, {"message": "b"}]), "ident") is None
    assert match._only(one.clear(), "ident") is None and match._only(one.drop("ident"), "ident") is None
    every = set(rules.literals(False))
    sglang = set(rules.literals(False, match._admits("sglang", None)))
    assert sglang < every and ".service: Deactivated successfully." not in sglang
    assert "The server is fired up and ready to roll!" in sglang
    context = {x for r in rules.rules for c in r.context if not c.ignore_case for x in c.literals}
    assert context and context <= sglang      # a context line may come from any identifier
    assert ".service: Deactivated successfully." in rules.literals(False, match._admits("systemd", None))
    # a format: a journal's batches leave out the literal of `systemctl is-active`'s `failed` answer (in 177 k
    # lines of the 1 GiB corpus's journals: kubelet's probe failures), an is-active answer's keep it
    journal = set(rules.literals(False, match._admits(None, "journal-short")))
    assert "failed" in every and "failed" not in journal and ".service: Deactivated successfully." in journal
    assert "failed" in rules.literals(False, match._admits(None, "systemctl-is-active"))
    assert "failed" not in rules.literals(False, match._admits("systemd", "journal-short"))


def test_the_rules_a_start_line_is_tried_by_follow_from_what_their_patterns_need(rules: RuleSet) -> None:
    """A scope's start line is tried by `systemd.started` alone (which excludes it): `systemd.started_unit` needs
    `.service.`, as its pattern does, not any `Started ` (246 k start lines a GiB of the corpus, most of them
    scopes and user managers, were tried by both). A kubelet PLEG line without its container id is no candidate
    at all: `kubelet.container_started` needs the id's `Data` (42 k such lines a GiB)."""
    import forensics.match as match

    scope = "Started docker-33dd037efbfe.scope - libcontainer container 33dd037efbfe."
    unit = "Started fwupd-refresh.service."
    described = "Starting logrotate.service - Rotate log files..."
    pleg = ('"SyncLoop (PLEG): event for pod" pod="monitoring/tokenizer-gg5xx-j7dht" '
            'event={"ID":"b8a22ee0","Type":"ContainerStarted"}')
    pleg_id = ('"SyncLoop (PLEG): event for pod" pod="default/nginx" event=&{ID:86c65bdf-b6fa-4d56-ba35-dec83dcf6450 '
               'Type:ContainerStarted Data:dec6b2f22c29eeae136cdcd16f681c806477b8dcfd311aedbdd3c7e00fd88a7c}')
    recs = records([{"ident": "systemd", "format": "journal-short", "message": m, "line": i, "line_end": i}
                    for i, m in enumerate((scope, unit, described), 1)]
                   + [{"ident": "kubelet", "format": "journal-short", "message": m, "line": i, "line_end": i}
                      for i, m in enumerate((pleg, pleg_id), 4)])
    cand, pairs = match._prefilter(match._frame(recs), rules)
    ids = [r.id for r in rules.rules]
    tried: dict[int, set[str]] = {}
    for row, kr, kc in pairs.select(match.ROW, "_kr", "_kc").iter_rows():
        if kc == -1:
            tried.setdefault(int(cand.filter(pl.col(match.ROW) == row)["line"][0]), set()).add(ids[kr])
    assert cand.get_column("line").to_list() == [1, 2, 3, 5]
    assert tried[1] == {"systemd.started"}
    assert tried[2] == {"systemd.started", "systemd.started_unit", "systemd.stopped_unit"}
    assert tried[3] == {"systemd.started"}
    assert "kubelet.container_started" in tried[5]   # (with `systemd.started`: `ContainerStarted Data:` holds `Started `)
    events = match_records(recs, rules)
    assert sorted(zip(events["line"].to_list(), events["rule"].to_list())) == [
        (2, "systemd.started_unit"), (3, "systemd.started"), (5, "kubelet.container_started")]


def _titles_both_ways(tmp_path: Path, kind: str, pattern: str, title: str, lines: list[str]) -> list[str]:
    """The titles one rule (`pattern`, `title`) gives journal lines of `lines` (messages), the same in the
    vectorised path and the Python one."""
    p = tmp_path / "t.yaml"
    p.write_text(f"""pack: t
rules:
  - id: t.rule
    kind: {kind}
    severity: warning
    role: symptom
    pattern: '{pattern}'
    title: '{title}'
    explain: x
    examples:
      match: ['{lines[0]}']
      near_miss: ['nothing like it']
""")
    rules = RuleSet(rules=load_pack(p).rules)
    recs = parse_text("".join(f"May 25 20:17:{10 + i} h app[{7 + i}]: {m}\n" for i, m in enumerate(lines)),
                      "journal-short")
    both = [match_records(recs, rules, vectorise=v).sort("line")["title"].to_list() for v in (True, False)]
    assert both[0] == both[1]
    return both[0]


def test_a_title_aside_naming_a_missing_field_is_left_out(tmp_path: Path) -> None:
    """A parenthesised aside of a title that names a field with no value is left out, in the vectorised path and
    in the Python one alike (`(code {code})` when the line shows no code); an aside whose fields all have values
    stays, and a missing field outside an aside is still `?`."""
    titles = _titles_both_ways(tmp_path, "service_exited",
                               "(?P<unit>\\S+\\.service) exited(?: with code (?P<code>\\d+))?(?: on (?P<node>\\w+))?",
                               "{unit} exited (code {code}) on {node} (pid {pid})",
                               ["a.service exited with code 3 on n1", "b.service exited"])
    assert titles == ["a.service exited (code 3) on n1 (pid 7)", "b.service exited on ? (pid 8)"]


def test_a_title_tail_naming_a_missing_field_is_left_out(tmp_path: Path) -> None:
    """A title's tail `: {name}` naming a field with no value is left out in both paths (`SGLang Scheduler crashed`,
    not `...crashed: ?`); with the value it stays; a `: {name}` that is not the tail is not touched."""
    titles = _titles_both_ways(tmp_path, "scheduler_exception",
                               "(?P<what>\\w+) crashed(?: with (?P<exc>\\w+))?(?: at (?P<where>\\w+))?",
                               "{what}: {where} crashed: {exc}",
                               ["Scheduler crashed with KeyError at loop", "Detokenizer crashed"])
    assert titles == ["Scheduler: loop crashed: KeyError", "Detokenizer: ? crashed"]
    cut = "[2025-05-25 20:17:18 TP1] Scheduler hit an exception: (the rest of the traceback was not kept)\n"
    ev = match_records(parse_text(cut), load_rules(env={}))
    assert ev.filter(pl.col("kind") == "scheduler_exception")["title"].to_list() == ["SGLang Scheduler crashed"]


def test_a_cuda_oom_without_the_gpu_figures_reads_cleanly() -> None:
    """A CUDA OOM line that names only the allocation: no `GPU ?: ... ? free of ?` in its title."""
    rules = load_rules(env={})
    short = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 5.24 GiB."
    full = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 GiB. GPU 0 has a total capacity of "
            "79.19 GiB of which 471.69 MiB is free.")
    ev = match_records(parse_text(f"{short}\n{full}\n", "text"), rules).sort("line")
    titles = ev.filter(pl.col("kind") == "cuda_oom")["title"].to_list()
    assert titles == ["CUDA out of memory: tried to allocate 5.24 GiB",
                      "CUDA out of memory: tried to allocate 1.16 GiB (GPU 0: 471.69 MiB free of 79.19 GiB)"]


def test_titles_of_an_exception_without_a_message_and_of_a_reboot_line() -> None:
    """An exception Python prints without a message (`asyncio.exceptions.CancelledError`, common at shutdown) is
    titled as Python printed it, not `...CancelledError: ?`; journalctl's `-- Reboot --` names no boot id."""
    rules = load_rules(env={})
    tb = ('[2025-05-25 20:17:19] Traceback (most recent call last):\n  File "/sgl/x.py", line 3, in run\n'
          '    await q.get()\nasyncio.exceptions.CancelledError\n')
    ev = match_records(parse_text(tb), rules)
    assert ev.filter(pl.col("kind") == "python_traceback")["title"].to_list() == ["asyncio.exceptions.CancelledError"]
    ev = match_records(parse_text("-- Reboot --\nMay 25 20:17:19 h systemd[1]: Started x.service.\n"), rules)
    assert "new boot" in ev["title"].to_list()


def test_an_exit_status_without_its_name_reads_cleanly() -> None:
    """systemd v220-v239 print `code=exited status=203` with no status name: the title is `status 203`, not
    `status 203/?`; a name, when printed, is an aside (`status 1 (FAILURE)`), on both the polars and Python paths."""
    rules = load_rules(env={})
    text = ("May 25 20:17:19 h systemd[1]: a.service: Control process exited, code=exited status=203\n"
            "May 25 20:17:20 h systemd[1]: b.service: Main process exited, code=exited, status=1/FAILURE\n")
    ev = match_records(parse_text(text), rules).sort("line")
    want = ["a.service: Control process exited with status 203",
            "b.service: Main process exited with status 1 (FAILURE)"]
    assert ev.filter(pl.col("rule") == "systemd.main_exited")["title"].to_list() == want
    rule = next(r for r in rules.rules if r.id == "systemd.main_exited")
    assert rule.render_title({"unit": "a.service", "which": "Control", "status": 203}) == want[0]


def test_a_crash_title_drops_its_missing_tails_on_both_paths() -> None:
    """`SGLang {component} crashed: {exception}: {exception_message}`: a worker's crash names the exception and its
    message; a traceback cut before its exception line reads `SGLang Scheduler crashed`, on the polars path and in
    Python alike (the fuzz test found the two disagreeing when both tails were missing)."""
    rules = load_rules(env={})
    rule = next(r for r in rules.rules if r.id == "sglang.worker_exception")
    text = ("[2025-05-25 20:17:19 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/x/scheduler.py", line 1, in f\n    g()\nOSError: [Errno 28] No space left on device\n')
    ev = match_records(parse_text(text), rules)
    assert ev.filter(pl.col("rule") == rule.id)["title"].to_list() == [
        "SGLang Scheduler crashed: OSError: [Errno 28] No space left on device"]
    cut = "[2025-05-25 20:17:19 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    assert match_records(parse_text(cut), rules).filter(pl.col("rule") == rule.id)["title"].to_list() == [
        "SGLang Scheduler crashed"]
    assert rule.render_title({"component": "Scheduler"}) == "SGLang Scheduler crashed"
    assert rule.render_title({"component": "Scheduler", "exception": "KeyError"}) == "SGLang Scheduler crashed: KeyError"


def test_rescan_reads_contexts_across_its_slices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`forensics rescan` reads a source's records a slice at a time and matches them as ingest does: an OOM
    report cut by a slice keeps its trigger and reaper lines (before, each slice was matched alone)."""
    from forensics import pipeline
    from forensics.pipeline import IngestOptions, ingest, rescan
    from forensics.store import Store

    dmesg = Path(__file__).resolve().parent.parent / "samples" / "incident" / "dmesg.log"
    store = Store(tmp_path / "s")
    assert not ingest(store, [str(dmesg)], IngestOptions()).failed
    (entry,) = store.sources()
    want = store.events([entry.source_id]).collect()
    monkeypatch.setattr(pipeline, "RESCAN_ROWS", 5)
    assert rescan(store, IngestOptions()) == want.height
    got = store.events([entry.source_id]).collect()
    assert got.equals(want)
    assert got.filter(pl.col("kind") == "oom_kill")["line_end"].to_list() == [173]


def test_rules_of_one_id_from_two_packs_keep_their_own_titles(tmp_path: Path) -> None:
    """The vectorised path builds a rule's expressions once and keeps them for that rule object: a user's rule
    that overrides a built-in id (another object, another title and pattern) gets its own, in the same process."""
    first = _titles_both_ways(tmp_path, "service_failed", r"^(?P<unit>\S+): boom$", "{unit} went boom",
                              ["a.service: boom"])
    second = _titles_both_ways(tmp_path, "service_failed", r"^(?P<unit>\S+): bang$", "{unit} went bang",
                               ["a.service: bang"])
    assert (first, second) == (["a.service went boom"], ["a.service went bang"])


def test_keys_list_each_rule_and_context_candidates_sorted() -> None:
    # a key's candidates are their positions in the candidate frame (POS), in the order of their ROW ids
    pairs = pl.DataFrame({"__row": [9, 3, 1, 2, 5, 4], "__pos": [8, 2, 0, 1, 4, 3], "_kr": [1, 0, 1, 0, 1, 0],
                          "_kc": [-1, -1, -1, 2, -1, -1]},
                         schema={"__row": pl.UInt32, "__pos": pl.UInt32, "_kr": pl.Int32, "_kc": pl.Int32})
    got = {(k.rule, k.ctx): v.to_list() for k, v in match._keys(pairs).items()}
    assert got == {(0, -1): [2, 3], (0, 2): [1], (1, -1): [0, 4, 8]}
    assert match._keys(pairs.clear()) == {}
