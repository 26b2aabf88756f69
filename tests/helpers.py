"""Small helpers shared by tests."""

from __future__ import annotations

import json
from collections.abc import Mapping
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
