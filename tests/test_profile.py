"""A source's profile (forensics/profile.py): exactly what a scan of its records gives, cached per records file,
and the incident queries answer the same with or without the cache."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

from forensics import profile
from forensics.correlate import resolve_incidents
from forensics.pipeline import IngestOptions, ingest
from forensics.store import Store

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = [str(p) for p in sorted((ROOT / "samples" / "incident").iterdir())]


@pytest.fixture(scope="module")
def samples_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    store = Store(tmp_path_factory.mktemp("profile") / "store")
    ingest(store, SAMPLES, IngestOptions())
    return store


def _scan_groups(lf: pl.LazyFrame) -> pl.DataFrame:
    return (lf.group_by(*profile.GROUP_KEYS)
            .agg(pl.col("ts").min().alias("first"), pl.col("ts").max().alias("last"),
                 pl.len().cast(pl.UInt32).alias("records"), pl.col("ts").is_null().sum().cast(pl.UInt32).alias("untimed"),
                 pl.col("line").min().alias("first_line"))
            .sort("first_line", *profile.GROUP_KEYS, nulls_last=True).collect())


def test_profile_is_what_a_scan_of_the_records_gives(samples_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(profile, "SLICE_ROWS", 7)  # many slices: their merge must not change a thing
    for e in samples_store.sources():
        f = samples_store.records_file(e.source_id)
        lf = pl.scan_parquet(f)
        groups, ranks = profile.tables(f)
        assert groups.equals(_scan_groups(lf)), e.path
        assert int(groups["records"].sum()) == e.records
        want_ranks = (lf.filter(pl.col("rank").is_not_null()).select(*profile.RANK_KEYS).unique(maintain_order=True)
                      .collect())
        got_ranks = ranks.select(*profile.RANK_KEYS).unique(maintain_order=True)
        assert got_ranks.equals(want_ranks), e.path
        hits = profile.env_hits(f)
        want = (lf.filter(pl.col("message").str.contains_any(list(profile.ENV_LITERALS), ascii_case_insensitive=True))
                .select(*profile.HIT_COLUMNS).collect())
        assert hits.equals(want), e.path
    # the samples hold ranks and environment lines: the comparisons above compared something
    profs = [profile.of_source(samples_store, e.source_id) for e in samples_store.sources()]
    assert sum(p.ranks.height for p in profs) > 0
    assert sum(p.env_hits.height for p in profs) > 0


def test_ingest_keeps_spans_and_ranks_and_the_first_query_the_environment_hits(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    ingest(store, SAMPLES, IngestOptions())
    assert any((store.path / "profiles" / "files").glob("*.json"))
    # the dmesg anchored too (`files/`: what ingest learnt of the files it read, for the reports' quotes)
    kept = sorted(p.name.split(".")[-2] for p in (store.path / "profiles").glob("*.parquet"))
    n = len(store.sources())
    assert kept == ["groups"] * n + ["ranks"] * n  # no message was read at ingest
    assert len(list((store.path / "profiles").glob("rules~*.json"))) == 1  # the packs' texts, from ingest's rules
    profile.of_source(store, store.sources()[0].source_id)
    assert len(list((store.path / "profiles").glob("*.env_hits.parquet"))) == 1


def _without_hits(store: Store, tmp_path: Path) -> Store:
    """A copy of the store whose environment hits are not kept."""
    copy = Store(tmp_path / "c")
    shutil.copytree(store.path, copy.path)
    for p in (copy.path / "profiles").glob("*.env_hits.parquet"):
        p.unlink()
    return copy


def test_environment_hits_computed_ahead_are_taken_not_computed_again(samples_store: Store, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    copy = _without_hits(samples_store, tmp_path)
    sids = [e.source_id for e in copy.sources()]
    assert profile.env_hits_ahead(copy, sids) == len(sids)
    assert profile.env_hits_ahead(copy, sids) == 0      # begun already: not twice
    profile._AHEAD.submit(lambda: None).result()        # the thread has done them all
    assert len(list((copy.path / "profiles").glob("*.env_hits.parquet"))) == len(sids)

    def boom(*_a: object) -> None:
        raise AssertionError("computed again")

    monkeypatch.setattr(profile, "env_hits", boom)
    for sid in sids:
        assert profile.of_source(copy, sid).env_hits.equals(profile.of_source(samples_store, sid).env_hits)
    assert not set(profile._PENDING) & set(_hit_files(copy))   # taken
    assert profile.env_hits_ahead(copy, sids) == 0      # kept: nothing to do


def _hit_files(store: Store) -> list[Path]:
    return [profile._names(store.records_file(e.source_id), store.cache_dir)[2] for e in store.sources()]


def test_environment_hits_not_begun_are_dropped_when_the_query_ends(samples_store: Store, tmp_path: Path) -> None:
    import threading

    copy = _without_hits(samples_store, tmp_path)
    gate = threading.Event()
    busy = profile._AHEAD.submit(gate.wait)             # the thread is busy: what is started now waits
    sids = [e.source_id for e in copy.sources()]
    try:
        assert profile.env_hits_ahead(copy, sids) == len(sids)
        profile.cancel_ahead()
        assert not set(profile._PENDING) & set(_hit_files(copy))
    finally:
        gate.set()
    busy.result()
    assert not list((copy.path / "profiles").glob("*.env_hits.parquet"))   # none was computed
    got = profile.of_source(copy, sids[0])                                # computed by the asker itself
    assert got.env_hits.equals(profile.of_source(samples_store, sids[0]).env_hits)


def test_a_cached_profile_is_read_not_computed_again(samples_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    sid = samples_store.sources()[0].source_id
    first = profile.of_source(samples_store, sid)

    def boom(*_a: object) -> None:
        raise AssertionError("computed again")

    monkeypatch.setattr(profile, "tables", boom)
    monkeypatch.setattr(profile, "env_hits", boom)
    again = profile.of_source(samples_store, sid)
    assert again.groups.equals(first.groups) and again.env_hits.equals(first.env_hits)


def test_a_rewritten_records_file_gets_a_new_profile(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    log = tmp_path / "kern.log"
    log.write_text("May 25 20:17:01 gpu-a01 kernel: Linux version 6.8.0-60-generic (buildd@lcy02)\n")
    ingest(store, [str(log)], IngestOptions())
    sid = store.sources()[0].source_id
    before = profile.of_source(store, sid)
    assert before.groups["host"].to_list() == ["gpu-a01"]
    ingest(store, [str(log)], IngestOptions(force=True, host="other", year=2024))  # a new generation of the file
    after = profile.of_source(store, sid)
    assert after.groups["first"].dt.year().to_list() == [2024]
    assert after.env_hits["ts"].dt.year().to_list() == [2024]
    names = {p.name.split("~")[0] for p in (store.path / "profiles").glob("*.parquet")}
    assert names == {store.records_file(sid).name.removesuffix(".parquet")}  # the first generation's are gone


def test_a_read_only_store_still_answers(samples_store: Store, monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path) -> None:
    copy = Store(tmp_path / "ro")
    shutil.copytree(samples_store.path, copy.path)
    shutil.rmtree(copy.path / "profiles")

    def refuse(*_a: object) -> None:
        raise PermissionError("read-only file system")

    monkeypatch.setattr(profile.os, "replace", refuse)
    sid = copy.sources()[0].source_id
    got = profile.of_source(copy, sid)
    assert got.groups.equals(profile.of_source(samples_store, sid).groups)
    assert not (copy.path / "profiles").exists() or not any((copy.path / "profiles").iterdir())


def test_incidents_are_the_same_without_the_cached_profiles(samples_store: Store, tmp_path: Path) -> None:
    copy = Store(tmp_path / "old")
    shutil.copytree(samples_store.path, copy.path)
    shutil.rmtree(copy.path / "profiles")  # a store written by a build without profiles
    day = "2025-05-25"
    want = resolve_incidents(samples_store, day)
    assert want and resolve_incidents(copy, day) == want


@pytest.mark.parametrize("vary", ["path", "source_id", "null path", "none"])
def test_profile_of_a_file_whose_per_file_columns_vary(tmp_path: Path, vary: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`source_id` and `path` are one value per records file as ingest writes them, so the profile reads
    neither; a file where one varies (or is null) is still profiled exactly: that column is grouped on."""
    monkeypatch.setattr(profile, "SLICE_ROWS", 5)
    n = 23
    df = pl.DataFrame({
        "source_id": ["s1"] * n, "path": ["a.log"] * n, "host": ["h1", "h2"] * 11 + ["h1"],
        "ident": ["kernel"] * n, "unit": [None, "x.service", "y.service"] * 7 + [None, None],
        "format": ["journal-short"] * n, "rank": [None, "TP0", None] * 7 + ["TP1", None],
        "ts": pl.datetime_range(pl.datetime(2025, 5, 25), pl.datetime(2025, 5, 25, 0, 0, n - 1), "1s", eager=True,
                                time_zone="UTC"),
        "line": range(1, n + 1)})
    if vary == "path":
        df = df.with_columns(pl.when(pl.col("line") > 17).then(pl.lit("b.log")).otherwise("path").alias("path"))
    elif vary == "source_id":
        df = df.with_columns(pl.when(pl.col("line") == 3).then(pl.lit("s2")).otherwise("source_id").alias("source_id"))
    elif vary == "null path":
        df = df.with_columns(pl.when(pl.col("line") == 20).then(None).otherwise("path").alias("path"))
    f = tmp_path / "r.parquet"
    df.write_parquet(f, row_group_size=4, statistics=True)
    assert set(profile._per_file(pl.scan_parquet(f))) == {"source_id", "path"} - {vary.removeprefix("null ")}
    groups, ranks = profile.tables(f)
    assert groups.equals(_scan_groups(pl.scan_parquet(f)))
    want = (pl.scan_parquet(f).filter(pl.col("rank").is_not_null())
            .group_by(*profile.RANK_KEYS, pl.col("ts").is_null().alias("_null"))
            .agg(pl.col("ts").min(), pl.col("line").min().alias("first_line"))
            .sort("first_line", *profile.RANK_KEYS, nulls_last=True).collect())
    assert ranks.equals(want)
