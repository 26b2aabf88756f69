"""Events made into views (`eventview.views`): a crash loop's repeated events are decoded, enriched and resolved
once, and what differs between them (host, unit, pid, a launch configuration's command line) still tells them
apart. Views stay frozen."""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest

from forensics.configreview import enricher, load_knowledge
from forensics.eventview import EventView, views


def frame(**cols: list) -> pl.DataFrame:
    n = len(next(iter(cols.values())))
    base = {"ts": pl.Series([None] * n, dtype=pl.Datetime("us", "UTC")), "path": ["j.log"] * n,
            "line": list(range(1, n + 1)), "rule": ["r"] * n}
    return pl.DataFrame({**base, **cols})


def test_repeated_events_share_their_fields_but_not_their_place_or_process() -> None:
    raw = '{"exception": "RuntimeError", "cgroup": "/system.slice/sglang.service"}'
    evs = views(frame(kind=["python_traceback"] * 4, fields=[raw] * 4, host=["a", "a", "b", "a"],
                      pid=[100, 100, 100, 200], unit=[None] * 4), enricher(load_knowledge()))
    assert [e.entities for e in evs] == [
        {"host": "a", "unit": "sglang.service", "pid": "100", "cgroup": "/system.slice/sglang.service"},
        {"host": "a", "unit": "sglang.service", "pid": "100", "cgroup": "/system.slice/sglang.service"},
        {"host": "b", "unit": "sglang.service", "pid": "100", "cgroup": "/system.slice/sglang.service"},
        {"host": "a", "unit": "sglang.service", "pid": "200", "cgroup": "/system.slice/sglang.service"}]
    assert [e.line for e in evs] == [1, 2, 3, 4] and len({e.id for e in evs}) == 4
    assert evs[0].fields is evs[3].fields and evs[0].entities is evs[1].entities
    assert evs[0].entities is not evs[2].entities
    # the same fields under another kind are enriched and resolved as that kind's
    (oom,) = views(frame(kind=["oom_kill"], fields=['{"pid": 100, "constraint": "CONSTRAINT_MEMCG"}']),
                   enricher(load_knowledge()))
    assert oom.fields["constraint"] == "memcg" and oom.entities["pid"] == "100"


def test_launch_configurations_with_the_same_fields_keep_their_own_command_lines() -> None:
    msgs = ["ExecStart=/usr/bin/python3 -m sglang.launch_server --model-path m --port 30000",
            "ExecStart=/usr/bin/python3 -m sglang.launch_server --model-path m --port 30001"]
    evs = views(frame(kind=["server_config"] * 2, fields=["{}"] * 2, message=msgs), enricher(load_knowledge()))
    assert [e.fields["port"] for e in evs] == ["30000", "30001"]


def test_an_enrich_that_does_not_say_which_messages_it_reads_is_given_each_message() -> None:
    """Events of one kind and fields are enriched once unless `enrich` may read their message: the built-in one
    says which kinds it reads it of (`message_kinds`); one that says nothing is given every event's."""
    def tagged(kind: str, fields: dict, message: str = "") -> dict:
        return {**fields, "tag": message.split()[0]}

    f = frame(kind=["service_killed"] * 2, fields=['{"signal": "KILL"}'] * 2, message=["one x", "two x"])
    assert [e.fields["tag"] for e in views(f, tagged)] == ["one", "two"]
    tagged.message_kinds = frozenset()  # type: ignore[attr-defined]
    assert [e.fields["tag"] for e in views(f, tagged)] == ["one", "one"]
    assert enricher(load_knowledge()).message_kinds == frozenset({"server_config"})  # type: ignore[attr-defined]


def test_a_gpu_name_is_given_on_its_host_only() -> None:
    raw = '{"arch": "sm_120"}'
    evs = views(frame(kind=["flashinfer_arch_unsupported"] * 2, fields=[raw] * 2, host=["a", "b"]),
                enricher(load_knowledge()), {"a": ("sm_120", "NVIDIA RTX PRO 6000 Blackwell")})
    assert evs[0].fields["gpus_desc"] == "NVIDIA RTX PRO 6000 Blackwell"
    assert evs[1].fields["gpus_desc"] != "NVIDIA RTX PRO 6000 Blackwell" and "gpus_desc" in evs[1].fields
    assert [e.entities for e in evs] == [{"host": "a"}, {"host": "b"}]


def test_views_are_frozen_and_built_whole() -> None:
    (e,) = views(frame(kind=["service_killed"], fields=['{"signal": "KILL"}']))
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.unit = "x"  # type: ignore[misc]
    assert dataclasses.replace(e) == e
    with pytest.raises(TypeError, match=r"EventView.of: \['entities'\] missing or unknown"):
        EventView.of(**{f.name: getattr(e, f.name) for f in dataclasses.fields(e) if f.name != "entities"})
    with pytest.raises(TypeError, match=r"\['nope'\] missing or unknown"):
        EventView.of(**{f.name: getattr(e, f.name) for f in dataclasses.fields(e)}, nope=1)
