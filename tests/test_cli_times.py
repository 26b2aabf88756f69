"""The times and zones given on the command line: a whole date or an error, a window that is not empty, a zone
that exists. A guess (this year, today) or a traceback would each answer a question the user did not ask."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from forensics.cli import main, parse_when, parse_window

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


@pytest.mark.parametrize("value, expected", [
    ("2025-05-25", datetime(2025, 5, 25, tzinfo=timezone.utc)),
    ("2025-05-25 20:15", datetime(2025, 5, 25, 20, 15, tzinfo=timezone.utc)),
    ("2025-05-25T20:15:07Z", datetime(2025, 5, 25, 20, 15, 7, tzinfo=timezone.utc)),
    ("2025-05-25T22:15:00+02:00", datetime(2025, 5, 25, 20, 15, tzinfo=timezone.utc)),
    ("25 May 2025 20:15", datetime(2025, 5, 25, 20, 15, tzinfo=timezone.utc)),
    ("2025-02-28", datetime(2025, 2, 28, tzinfo=timezone.utc)),
    ("2024-02-29 23:59:59", datetime(2024, 2, 29, 23, 59, 59, tzinfo=timezone.utc)),
])
def test_a_whole_date_is_read_in_utc(value: str, expected: datetime) -> None:
    assert parse_when(value) == expected


def test_a_stamp_without_zone_is_in_tz_and_one_with_a_zone_keeps_it() -> None:
    assert parse_when("2025-05-25 22:15", "Europe/Berlin") == datetime(2025, 5, 25, 20, 15, tzinfo=timezone.utc)
    assert parse_when("2025-05-25T20:15Z", "Europe/Berlin") == datetime(2025, 5, 25, 20, 15, tzinfo=timezone.utc)


@pytest.mark.parametrize("value, lacks", [
    ("20:17", "year, month or day"),
    ("May 25 20:17", "year"),     # a journal line's stamp, copied as it is printed
    ("May 25", "year"),
    ("May 2025", "day"),
    ("2025-05", "day"),
])
def test_a_date_missing_a_part_is_an_error_not_a_guess_from_today(value: str, lacks: str) -> None:
    with pytest.raises(click.BadParameter) as e:
        parse_when(value, option="--since")
    assert f"{value!r} has no {lacks}; give the whole date" in e.value.message
    assert e.value.param_hint == "--since"


def test_not_a_date_is_an_error() -> None:
    with pytest.raises(click.BadParameter, match="is not a date/time"):
        parse_when("yesterday")


def test_an_empty_window_is_an_error() -> None:
    assert parse_window("2025-05-25", "2025-05-26") == (datetime(2025, 5, 25, tzinfo=timezone.utc),
                                                         datetime(2025, 5, 26, tzinfo=timezone.utc))
    assert parse_window(None, None) == (None, None)
    for since, until in (("2025-05-25", "2025-05-24"), ("2025-05-25 20:17", "2025-05-25T20:17:00Z")):
        with pytest.raises(click.UsageError, match=r"is not after --since .*: the window \[since, until\) is empty"):
            parse_window(since, until)


@pytest.mark.parametrize("tz", ["Nowhere/City", "Europe", "UTC+2", ""])
def test_a_zone_that_does_not_exist_is_an_error(tz: str) -> None:
    with pytest.raises(click.BadParameter, match="is not an IANA zone name") as e:
        parse_window(None, None, tz)  # checked even when no time is given
    assert e.value.param_hint == "--tz"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("times") / "store"
    r = CliRunner().invoke(main, ["--store", str(where), "ingest", "-q", str(SAMPLES / "incident")])
    assert r.exit_code == 0, r.output
    return where


@pytest.mark.parametrize("args, says", [
    (["timeline", "--since", "May 25 20:17"], "Invalid value for --since: 'May 25 20:17' has no year"),
    (["events", "--until", "20:17"], "Invalid value for --until: '20:17' has no year, month or day"),
    (["timeline", "--since", "2025-05-25", "--until", "2025-05-24"], "the window [since, until) is empty"),
    (["events", "--since", "2025-05-25 20:18", "--until", "2025-05-25 20:17"], "the window [since, until) is empty"),
    (["timeline", "--tz", "Europe", "--since", "2025-05-25"], "Invalid value for --tz: 'Europe' is not an IANA"),
    (["events", "--tz", "Nowhere"], "Invalid value for --tz: 'Nowhere' is not an IANA"),
    (["report", "--incident", "2025-05-25", "--tz", "Europe"], "Invalid value for --tz: 'Europe' is not an IANA"),
    (["ingest", "--tz", "Europe", str(SAMPLES / "formats" / "dmesg.log")], "Invalid value for --tz"),
    (["ingest", "--boot-time", "08:00", str(SAMPLES / "formats" / "dmesg.log")],
     "Invalid value for --boot-time: '08:00' has no year, month or day"),
])
def test_the_commands_refuse_such_times_with_exit_2(store: Path, args: list[str], says: str) -> None:
    """Each says what is wrong with which option (no traceback, nothing printed on stdout) and exits 2; the
    store is not touched (the ingest reads nothing)."""
    before = (store / "manifest.json").read_bytes()
    r = CliRunner().invoke(main, ["--store", str(store), *args])
    assert r.exit_code == 2, r.output
    assert says in " ".join(r.stderr.split()), r.stderr
    assert r.stdout == "" and "Traceback" not in r.stderr
    assert (store / "manifest.json").read_bytes() == before


def test_a_whole_window_in_a_zone_answers(store: Path) -> None:
    """The same minute asked in UTC and in Berlin's summer time gives the same rows."""
    utc = CliRunner().invoke(main, ["--store", str(store), "timeline", "--since", "2025-05-25 20:17",
                                    "--until", "2025-05-25 20:18"])
    berlin = CliRunner().invoke(main, ["--store", str(store), "timeline", "--tz", "Europe/Berlin",
                                       "--since", "2025-05-25 22:17", "--until", "2025-05-25 22:18"])
    assert utc.exit_code == berlin.exit_code == 0
    assert utc.stdout == berlin.stdout and "Killed process 48213" in utc.stdout
