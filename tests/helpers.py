"""Small helpers shared by tests."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl
from click.testing import CliRunner

from forensics.cli import main
from forensics.pipeline import IngestOptions, IngestReport, ingest
from forensics.store import Store


def ingest_text(tmp: Path, name: str, text: str | bytes, **opts: object) -> tuple[Store, IngestReport]:
    path = tmp / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    store = Store(tmp / "store")
    return store, ingest(store, [str(path)], IngestOptions(**opts))  # type: ignore[arg-type]


def cli_ingest(tmp: Path, files: Mapping[str, str], *options: str) -> list[str]:
    """Write `files` (name -> text) in `tmp` and ingest them with the command line into a store there, which must
    succeed; the `--store` options that name it."""
    for name, text in files.items():
        (tmp / name).write_text(text)
    store = ["--store", str(tmp / "store")]
    r = CliRunner().invoke(main, [*store, "ingest", *options, *(str(tmp / n) for n in files)])
    assert r.exit_code == 0, r.output
    return store


def cli_incidents(store: list[str]) -> list[dict[str, Any]]:
    """`forensics incidents --json` of the store (an empty list exits 1, as grep does)."""
    r = CliRunner().invoke(main, [*store, "incidents", "--json"])
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


def records(store: Store) -> pl.DataFrame:
    return store.records().sort("path", "line").collect()


def iso(df: pl.DataFrame) -> list[str | None]:
    return [None if t is None else t.strftime("%Y-%m-%dT%H:%M:%S.%f") for t in df["ts"].to_list()]


def backtrack_pack(pack: str, rule_id: str, kind: str) -> str:
    """A rule pack whose one `engine: regex` rule backtracks catastrophically on a long run of `a` and a `!`."""
    return f"""pack: {pack}
kinds:
  {kind}: {{role: cause, description: a run of a letters}}
rules:
  - id: {rule_id}
    kind: {kind}
    severity: error
    role: cause
    engine: regex
    pattern: '(?P<run>(a|aa)+)$'
    literals: [aaaa]
    title: 'a run of {{run}}'
    explain: catastrophic backtracking, on purpose
    examples:
      match: ['2025-05-25T00:00:00+00:00 h app[1]: aaaa']
      near_miss: ['2025-05-25T00:00:00+00:00 h app[1]: bbbb']
"""


def sglang_capture_failed(args: str, inner: str, error: str, *, frames: Sequence[str] = (),
                          times: tuple[str, str, str, str] = ("20:10:11", "20:11:08", "20:11:40", "20:11:41"),
                          day: str = "2025-05-25") -> str:
    """An SGLang log whose CUDA graph capture fails at start-up, as SGLang logs it (`cuda_graph_runner.py`): the
    launch arguments (`args`, inside `ServerArgs(...)`), the capture's start, then the scheduler's traceback of the
    inner exception (`frames` below the runner's own, `inner` its last line), the capture's `Exception: Capture
    cuda graph failed: {error}` with SGLang's advice, and the launcher's SIGQUIT (`times`: of these four)."""
    start, begin, at, quit_at = times
    return "\n".join([
        f"[{day} {start}] server_args=ServerArgs({args})",
        f"[{day} {begin} TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=3.13 GB",
        f"[{day} {at} TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/opt/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 380, in __init__',
        "    self.capture()",
        *frames,
        inner,
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "/opt/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 382, in __init__',
        "    raise Exception(",
        f"Exception: Capture cuda graph failed: {error}",
        "Possible solutions:",
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
        "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)",
        "",
        f"[{day} {quit_at}] Received sigquit from a child process. It usually means the child failed.",
    ]) + "\n"
