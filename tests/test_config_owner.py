"""A launch configuration that names no unit (an SGLang `server_args` dump in a `python3[pid]` journal line) is the
configuration of the unit systemd started just before it, when that start is of a server unit (its name or its
description says `sglang`, or names the dump's model) and no other such unit started then. On a host with two
SGLang units, the report of one unit's failure shows that unit's configuration, not the last one the host logged."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main
from forensics.incidents import build_incidents
from forensics.pipeline import IngestOptions, ingest
from forensics.store import Store

T = datetime(2025, 5, 26, 10, 0, 0, tzinfo=timezone.utc)
LLAMA, CODER = "sglang-llama-31-70b.service", "sglang-qwen25-coder-32b.service"


def _line(t: datetime, ident: str, msg: str) -> str:
    return f"{t.strftime('%Y-%m-%dT%H:%M:%S')}+00:00 gpu-a03 {ident}: {msg}"


def _dump(t: datetime, model: str, mem: str, pid: int) -> str:
    return _line(t, f"python3[{pid}]", f"[{t:%Y-%m-%d %H:%M:%S}] server_args=ServerArgs(model_path='{model}', "
                 f"tp_size=4, mem_fraction_static={mem}, port=30000, host='0.0.0.0', watchdog_timeout=300)")


def _start(t: datetime, unit: str, desc: str | None) -> str:
    return _line(t, "systemd[1]", f"Started {unit} - {desc}." if desc else f"Started {unit}.")


def _store(tmp: Path, llama_desc: str | None, coder_desc: str | None, coder_start_s: float = 3600) -> Store:
    """The llama unit starts at 10:00:00 and dumps its configuration 2 s later; the coder unit starts
    `coder_start_s` later and dumps its own 2 s after that; at 12:00:00 the kernel OOM killer kills the llama
    unit's process."""
    c = T + timedelta(seconds=coder_start_s)
    crash = T + timedelta(hours=2)
    lines = [_start(T, LLAMA, llama_desc), _dump(T + timedelta(seconds=2), "meta-llama/Llama-3.1-70B-Instruct", "0.88", 51877),
             _start(c, CODER, coder_desc), _dump(c + timedelta(seconds=2), "Qwen/Qwen2.5-Coder-32B-Instruct", "0.8", 61877),
             _line(crash, "kernel", "Out of memory: Killed process 41650 (python3) total-vm:500000000kB, "
                   "anon-rss:440000000kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:900000kB oom_score_adj:0"),
             _line(crash, "systemd[1]", f"{LLAMA}: A process of this unit has been killed by the OOM killer."),
             _line(crash, "systemd[1]", f"{LLAMA}: Main process exited, code=killed, status=9/KILL"),
             _line(crash, "systemd[1]", f"{LLAMA}: Failed with result 'oom-kill'.")]
    # a whole host's journal, not `journalctl -u` of one unit (whose unit-less lines would all be that unit's)
    lines += [_line(T + timedelta(minutes=m), "systemd[1]", f"{u}: Deactivated successfully.")
              for m, u in ((5, "fwupd-refresh.service"), (65, CODER), (66, "logrotate.service"))]
    (tmp / "journal.log").write_text("".join(x + "\n" for x in sorted(lines)))
    store = Store(tmp / "store")
    ingest(store, [str(tmp / "journal.log")], IngestOptions())
    return store


def _incident(store: Store):  # noqa: ANN202
    (inc,) = [i for i in build_incidents(store) if LLAMA in i.units]
    return inc


def test_the_failed_units_own_dump_is_its_configuration_not_the_hosts_last(tmp_path: Path) -> None:
    store = _store(tmp_path, "SGLang server (meta-llama/Llama-3.1-70B-Instruct)",
                   "SGLang server (Qwen/Qwen2.5-Coder-32B-Instruct)")
    inc = _incident(store)
    (cfg,) = inc.configs
    assert cfg.unit == LLAMA and "Llama-3.1-70B" in cfg.command
    assert cfg.note == (f"The configuration names no unit; it is taken as `{LLAMA}`'s: logged 2 s after systemd "
                        f"started that unit (`journal.log:1`: Started SGLang server (meta-llama/Llama-3.1-70B-"
                        "Instruct)), and its start line names the configuration's model.")
    md = CliRunner().invoke(main, ["--store", str(store.path), "report", "--incident", inc.id]).output
    assert f"### `{LLAMA}` on `gpu-a03`" in md and "| `--mem-fraction-static` | `0.88` |" in md
    assert "Coder" not in md.split("## Configuration", 1)[1].split("## Environment", 1)[0]


def test_a_server_units_name_is_enough_when_no_other_server_started_then(tmp_path: Path) -> None:
    inc = _incident(_store(tmp_path, None, None))
    (cfg,) = inc.configs
    assert cfg.unit == LLAMA and "Llama-3.1-70B" in cfg.command
    assert cfg.note.endswith("and no other unit naming the server or this model started in that time.")


def test_two_server_units_started_together_leave_the_dump_unowned_unless_the_model_decides(tmp_path: Path) -> None:
    # the coder starts 1 s after the llama, so both starts precede both dumps: by name alone, neither is owned
    inc = _incident(_store(tmp_path, None, None, coder_start_s=1))
    assert [c.unit for c in inc.configs] == [None] and not inc.configs[0].note.startswith("The configuration")
    (tmp_path / "b").mkdir()
    inc = _incident(_store(tmp_path / "b", "SGLang server (meta-llama/Llama-3.1-70B-Instruct)", None, coder_start_s=1))
    (cfg,) = inc.configs
    assert cfg.unit == LLAMA and "Llama-3.1-70B" in cfg.command


def test_a_dump_long_after_any_start_is_owned_by_none(tmp_path: Path) -> None:
    # a unit-less dump 10 minutes after the start: not the unit's start-up line
    store = _store(tmp_path, "SGLang server (meta-llama/Llama-3.1-70B-Instruct)", None)
    text = (tmp_path / "journal.log").read_text().splitlines()
    moved = [x.replace("2025-05-26T10:00:02", "2025-05-26T10:10:02") for x in text]
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "journal.log").write_text("".join(x + "\n" for x in sorted(moved)))
    store = Store(tmp_path / "c" / "store")
    ingest(store, [str(tmp_path / "c" / "journal.log")], IngestOptions())
    inc = _incident(store)
    # the llama's dump is owned by none, the coder's by the coder: the report shows the llama's unit-less one
    (cfg,) = inc.configs
    assert cfg.unit is None and "Llama-3.1-70B" in cfg.command


def _ready(t: datetime, pid: int) -> str:
    return _line(t, f"python3[{pid}]", f"[{t:%Y-%m-%d %H:%M:%S}] The server is fired up and ready to roll!")


def test_the_owned_processs_other_lines_are_the_units_too(tmp_path: Path) -> None:
    # after the OOM kill at 12:00:00 systemd starts the llama unit again; its new process (pid 71877) dumps its
    # configuration and is ready 15 s after the start. The coder's process (61877) is ready too: the coder's line,
    # not the llama's context; a line of the llama's old pid after the restart (a pid reused) is no unit's.
    store = _store(tmp_path, "SGLang server (meta-llama/Llama-3.1-70B-Instruct)",
                   "SGLang server (Qwen/Qwen2.5-Coder-32B-Instruct)")
    crash = T + timedelta(hours=2)
    extra = [_start(crash + timedelta(seconds=5), LLAMA, "SGLang server (meta-llama/Llama-3.1-70B-Instruct)"),
             _dump(crash + timedelta(seconds=7), "meta-llama/Llama-3.1-70B-Instruct", "0.85", 71877),
             _ready(crash + timedelta(seconds=10), 61877), _ready(crash + timedelta(seconds=20), 71877),
             _ready(crash + timedelta(seconds=30), 51877)]
    p = tmp_path / "journal.log"
    p.write_text("".join(x + "\n" for x in sorted(p.read_text().splitlines() + extra)))
    (tmp_path / "d").mkdir()
    store = Store(tmp_path / "d" / "store")
    ingest(store, [str(p)], IngestOptions())
    inc = _incident(store)
    ready = {e.ts[11:19]: e.unit for e in inc.events if e.kind == "server_ready"}
    assert ready == {"12:00:20": LLAMA, "12:00:30": None}, ready      # the coder's is not this incident's context
    md = CliRunner().invoke(main, ["--store", str(store.path), "report", "--incident", inc.id]).output
    assert f"- `{LLAMA}`: started 12:00:05, ready 12:00:20 (15 s to load)." in md, md
