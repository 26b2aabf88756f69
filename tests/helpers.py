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
