"""The same bytes ingested again: a no-op, unless an option that changes how their lines are read is given with
another value than they were read with (`--format`, `--host`, `--year`, `--tz`, `--boot-time`). Then they are
read again with it, in place of the old records; the options not given keep what the source was read with."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from forensics.cli import main
from forensics.ingestoptions import changed_options, read_with
from forensics.pipeline import IngestOptions, ingest
from forensics.store import Store

FORMATS = Path(__file__).resolve().parent.parent / "samples" / "formats"


def _ingest(store: Path, *args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["--store", str(store), "ingest", *args])
    return r.exit_code, " ".join(r.stderr.split())


def _entry(store: Path):  # noqa: ANN202 - the store's one source
    (e,) = Store(store).sources()
    return e


def _times(store: Path) -> pl.DataFrame:
    return pl.read_parquet(store / "records" / _entry(store).records_name).select("line", "ts", "ts_source", "host")


@pytest.fixture
def dmesg(tmp_path: Path) -> Path:
    p = tmp_path / "dmesg.log"  # a copy: the file's own path and mtime, not the checkout's
    shutil.copy(FORMATS / "dmesg-prio.log", p)
    return p


def test_a_new_boot_time_reads_the_dmesg_again_and_the_same_one_does_not(tmp_path: Path, dmesg: Path) -> None:
    store = tmp_path / "s"
    assert _ingest(store, str(dmesg))[0] == 0
    assert _times(store).get_column("ts").null_count() == _entry(store).records  # monotonic only
    code, said = _ingest(store, str(dmesg))
    assert code == 0 and said.startswith("unchanged")
    code, said = _ingest(store, "--boot-time", "2025-05-25 08:00", str(dmesg))
    assert code == 0
    assert f"again {dmesg}: read again, with --boot-time 2025-05-25T08:00:00+00:00 (it was read with none)" in said
    e = _entry(store)
    assert e.read_with["boot_time"] == "2025-05-25T08:00:00+00:00"
    assert e.first_ts == "2025-05-25T08:00:00.000000Z" and "given with --boot-time" in e.time_anchor
    assert len(Store(store).sources()) == 1  # in place of the old records, not beside them
    code, said = _ingest(store, "--boot-time", "2025-05-25 08:00", str(dmesg))
    assert code == 0 and said.startswith("unchanged") and "again" not in said


def test_options_not_given_keep_what_the_source_was_read_with(tmp_path: Path, dmesg: Path) -> None:
    """A later ingest with no options (`ingest dir/`) leaves the source as it was read; one with another option
    reads it again keeping the earlier ones, and so does --force."""
    store = tmp_path / "s"
    assert _ingest(store, "--boot-time", "2025-05-25 08:00", str(dmesg))[0] == 0
    anchored = _times(store)
    assert _ingest(store, str(dmesg))[1].startswith("unchanged")
    code, said = _ingest(store, "--host", "gpu-a07", str(dmesg))
    assert code == 0 and "read again, with --host gpu-a07 (it was read with none)" in said
    again = _times(store)
    assert again.get_column("ts").equals(anchored.get_column("ts"))  # the boot time kept
    assert set(again.get_column("host").to_list()) == {"gpu-a07"}
    assert _entry(store).read_with == {"format": None, "host": "gpu-a07", "year": None, "tz": "UTC",
                                       "boot_time": "2025-05-25T08:00:00+00:00"}
    code, said = _ingest(store, "--force", str(dmesg))
    assert code == 0 and said.startswith("ingested") and "again" not in said
    assert _times(store).equals(again)


def test_a_year_given_reads_a_yearless_journal_again(tmp_path: Path) -> None:
    store, journal = tmp_path / "s", tmp_path / "journal.log"
    shutil.copy(FORMATS / "journal-short.log", journal)
    assert _ingest(store, str(journal))[0] == 0
    code, said = _ingest(store, "--year", "2021", str(journal))
    assert code == 0 and "read again, with --year 2021 (it was read with none)" in said
    times = _times(store).sort("line").get_column("ts").drop_nulls()
    assert times[-1].year == 2021  # --year: the year of the last line
    assert _ingest(store, str(journal))[1].startswith("unchanged")
    assert _ingest(store, "--tz", "UTC", str(journal))[1].startswith("unchanged")  # the zone it was read in


def test_a_zone_given_as_the_default_still_counts(tmp_path: Path) -> None:
    """`--tz UTC` given on the command line after `--tz Europe/Berlin` reads the source again (it is the
    default's value, but it was asked for)."""
    store, journal = tmp_path / "s", tmp_path / "journal.log"
    shutil.copy(FORMATS / "journal-short.log", journal)
    assert _ingest(store, "--tz", "Europe/Berlin", "--year", "2025", str(journal))[0] == 0
    berlin = _times(store).get_column("ts")
    code, said = _ingest(store, "--tz", "UTC", str(journal))
    assert code == 0 and "read again, with --tz UTC (it was read with Europe/Berlin)" in said
    utc = _times(store).get_column("ts")
    shifts = set((utc - berlin).drop_nulls().to_list())
    assert shifts and shifts <= {timedelta(hours=1), timedelta(hours=2)}  # Berlin: UTC+1, in summer UTC+2
    assert _times(store).sort("line").get_column("ts").drop_nulls()[-1].year == 2025  # --year kept


def test_a_forced_format_is_kept_when_read_again_for_another_option(tmp_path: Path) -> None:
    store, log = tmp_path / "s", tmp_path / "journal.log"
    shutil.copy(FORMATS / "journal-short.log", log)
    assert _ingest(store, "--format", "text", str(log))[0] == 0
    assert _entry(store).format == "text"
    code, said = _ingest(store, "--host", "h1", str(log))
    assert code == 0 and "read again, with --host h1" in said
    assert _entry(store).format == "text"
    code, said = _ingest(store, "--format", "journal-short", str(log))
    assert code == 0 and "read again, with --format journal-short (it was read with text)" in said
    assert _entry(store).format == "journal-short"


def test_a_store_from_before_the_options_were_kept_was_read_with_the_defaults(tmp_path: Path, dmesg: Path) -> None:
    store = tmp_path / "s"
    assert _ingest(store, str(dmesg))[0] == 0
    manifest = store / "manifest.json"
    data = json.loads(manifest.read_text())
    for v in data["sources"].values():
        del v["read_with"]
    manifest.write_text(json.dumps(data))
    assert _entry(store).read_with == {}
    assert _ingest(store, str(dmesg))[1].startswith("unchanged")
    assert _ingest(store, "--tz", "UTC", str(dmesg))[1].startswith("unchanged")
    assert "read again, with --host h (it was read with none)" in _ingest(store, "--host", "h", str(dmesg))[1]


def test_the_library_counts_the_options_that_differ_from_the_defaults(tmp_path: Path, dmesg: Path) -> None:
    """Without `given` (a caller other than the command line), the options set to other values than the
    defaults are the ones asked for; of those, only the ones that bear on the source count (a dmesg's
    monotonic seconds take no year and no zone)."""
    store = Store(tmp_path / "s")
    first = ingest(store, [str(dmesg)], IngestOptions(host="h"))
    (e,) = [r.entry for r in first.results]
    assert e.read_with == read_with(IngestOptions(host="h"))
    assert changed_options(e, IngestOptions()) == []
    assert changed_options(e, IngestOptions(host="h")) == []
    assert changed_options(e, IngestOptions(host="other", year=2020)) == ["host"]
    assert changed_options(e, IngestOptions(given=("tz",), tz="Europe/Berlin")) == []
    assert changed_options(e, IngestOptions(boot_time=datetime(2025, 5, 25, tzinfo=timezone.utc))) == ["boot_time"]
    assert [r.status for r in ingest(store, [str(dmesg)], IngestOptions(year=2020)).results] == ["unchanged"]
    again = ingest(store, [str(dmesg)], IngestOptions(boot_time=datetime(2025, 5, 25, tzinfo=timezone.utc)))
    assert [r.status for r in again.results] == ["ingested"] and again.results[0].again
    assert again.results[0].entry.read_with["host"] == "h"  # kept


def test_an_option_reads_again_only_the_sources_it_bears_on(tmp_path: Path, dmesg: Path) -> None:
    """`ingest --year 2021 logs/`: the year-less journal is read again; the dmesg (kernel seconds) and the
    journal whose stamps carry a year are not."""
    logs, store = tmp_path / "logs", tmp_path / "s"
    logs.mkdir()
    shutil.copy(FORMATS / "journal-short.log", logs / "short.log")
    shutil.copy(FORMATS / "journal-short-iso.log", logs / "iso.log")
    shutil.copy(dmesg, logs / "dmesg.log")
    assert _ingest(store, str(logs))[0] == 0
    code, said = _ingest(store, "--year", "2021", "--tz", "UTC", str(logs))
    assert code == 0
    assert f"again {logs / 'short.log'}: read again, with --year 2021 (it was read with none)" in said
    assert f"unchanged {logs / 'iso.log'}" in said and f"unchanged {logs / 'dmesg.log'}" in said


def _journal(n: int | None = None, tail: int | None = None) -> str:
    lines = (FORMATS.parent / "incident" / "journal-eagle3.log").read_text().splitlines(keepends=True)
    return "".join(lines[-tail:] if tail else lines[:n])


def test_a_log_that_grew_replaces_the_version_read_before(tmp_path: Path) -> None:
    """The same path with lines appended: read again in place of the old version (whose lines it all holds),
    so the timeline shows each line once."""
    store, log = tmp_path / "s", tmp_path / "j.log"
    log.write_text(_journal(100))
    assert _ingest(store, str(log))[0] == 0
    first = _entry(store)
    log.write_text(_journal(200))
    code, said = _ingest(store, str(log))
    assert code == 0
    assert f"again {log}: it grew from {first.size:,} to {log.stat().st_size:,} bytes since it was read" in said
    (e,) = Store(store).sources()
    assert e.records > first.records and e.sha256 != first.sha256
    lines = _times(store).get_column("line")
    assert lines.n_unique() == lines.len()  # nothing twice


def test_another_version_of_a_path_is_kept_with_a_warning(tmp_path: Path) -> None:
    """The same path holding bytes that do not extend the stored version (rotated, exported again, another
    host's): both are kept, and the ingest says so."""
    store, log = tmp_path / "s", tmp_path / "j.log"
    log.write_text(_journal(100))
    assert _ingest(store, str(log))[0] == 0
    log.write_text(_journal(tail=50))
    code, said = _ingest(store, str(log))
    assert code == 0
    assert (f"warning: {log}: the store also holds another version of this path (100 records" in said
            and "which these bytes do not extend: both are kept" in said)
    assert len(Store(store).sources()) == 2
    old = next(e for e in Store(store).sources() if e.records == 100)
    assert f"(`forensics store remove {old.sha256[:12]}` takes the other out)" in said
    assert CliRunner().invoke(main, ["--store", str(store), "store", "remove", old.sha256[:12]]).exit_code == 0
    assert [e.records for e in Store(store).sources()] == [50]


def test_a_shorter_file_of_the_same_path_is_not_taken_for_a_grown_one(tmp_path: Path) -> None:
    store, log = tmp_path / "s", tmp_path / "j.log"
    log.write_text(_journal(200))
    assert _ingest(store, str(log))[0] == 0
    log.write_text(_journal(100))  # a prefix of what was read: not a grown log
    code, said = _ingest(store, str(log))
    assert code == 0 and "another version of this path" in said and "grew" not in said
    assert len(Store(store).sources()) == 2


def test_a_copy_of_stored_bytes_names_the_path_they_were_read_from(tmp_path: Path) -> None:
    store, log, copy = tmp_path / "s", tmp_path / "j.log", tmp_path / "copy.log"
    log.write_text(_journal(100))
    copy.write_text(_journal(100))
    assert _ingest(store, str(log))[0] == 0
    code, said = _ingest(store, str(copy))
    assert code == 0 and f"unchanged {copy}: the same bytes as {log}, in the store already" in said
