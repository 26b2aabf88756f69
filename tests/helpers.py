"""Small helpers shared by tests."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from forensics.pipeline import IngestOptions, IngestReport, ingest
from forensics.store import Store


def ingest_text(tmp: Path, name: str, text: str | bytes, **opts: object) -> tuple[Store, IngestReport]:
    path = tmp / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    store = Store(tmp / "store")
    return store, ingest(store, [str(path)], IngestOptions(**opts))  # type: ignore[arg-type]


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
