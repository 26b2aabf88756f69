"""The zone of an SGLang log's stamps, read off the lines its unit's journal also holds with exact times."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from forensics.cli import main
from forensics.pipeline import IngestOptions, ingest
from forensics.store import Store
from forensics.zonefix import find_offset, label, unique_pairs, zone_note
from helpers import iso

UTC0 = datetime(2025, 5, 25, 20, 19, 41)   # the first line's time, in UTC
LINES = ("server_args=ServerArgs(model_path='/m', tp_size=8)", "Load weight begin. avail mem=94.31 GB",
         "The server is fired up and ready to roll!", "Received sigquit from a child process. It usually means the "
         "child failed.")


def _write(tmp: Path, east: timedelta, shared: int = len(LINES), journal_east: timedelta | None = None) -> list[Path]:
    """An SGLang log whose stamps are local time `east` of UTC, and its unit's journal (`-o short-iso`, the host's
    zone printed) holding the first `shared` of its lines; `journal_east`: the zone the journal was printed in."""
    je = east if journal_east is None else journal_east
    sglang, journal = [], []
    for i, msg in enumerate(LINES):
        utc = UTC0 + timedelta(seconds=30 * i)
        local = utc + east
        stamp = f"[{local:%Y-%m-%d %H:%M:%S}]"
        sglang.append(f"{stamp} {msg}\n")
        if i < shared:
            sign = "-" if je < timedelta(0) else "+"
            off = abs(int(je.total_seconds())) // 60
            jt = utc + je + timedelta(milliseconds=400)   # the journal takes the line a moment after it is printed
            journal.append(f"{jt:%Y-%m-%dT%H:%M:%S}{sign}{off // 60:02d}{off % 60:02d} gpu-a07 python3[51877]: "
                           f"{stamp} {msg}\n")
    paths = [tmp / "sglang.log", tmp / "journal.log"]
    paths[0].write_text("".join(sglang))
    paths[1].write_text("".join(journal))
    return paths


def _ingest(tmp: Path, paths: list[Path], **opts: object):
    store = Store(tmp / "store")
    return store, ingest(store, [str(p) for p in paths], IngestOptions(**opts))  # type: ignore[arg-type]


def _sglang(store: Store) -> tuple[pl.DataFrame, object]:
    e = next(e for e in store.sources() if e.path.endswith("sglang.log"))
    return store.records_of(e).sort("line").collect(), e


def test_an_sglang_log_printed_in_a_zone_east_of_utc_is_moved_to_its_journals_times(tmp_path: Path) -> None:
    store, rep = _ingest(tmp_path, _write(tmp_path, timedelta(hours=8)))
    recs, e = _sglang(store)
    assert iso(recs) == [f"{UTC0 + timedelta(seconds=30 * i):%Y-%m-%dT%H:%M:%S}.000000" for i in range(len(LINES))]
    assert set(recs["ts_source"]) == {"zone_assumed"}   # still not printed whole: the report marks them
    assert e.time_anchor.startswith("zone inferred: UTC +08:00, from 4 lines also in ")
    assert "journal.log:1, :2, :3" in e.time_anchor and "pass --tz to change" in e.time_anchor
    assert e.first_ts == "2025-05-25T20:19:41.000000Z"
    [z] = rep.zones
    assert z.moved and not z.warning and z.path.endswith("sglang.log")
    # its events moved with their records: the ready marker is where the journal has it
    ev = store.events().filter(pl.col("kind") == "server_ready").sort("path").collect()
    assert ev["ts"].dt.strftime("%H:%M:%S").to_list() == ["20:20:41", "20:20:41"]


def test_a_zone_west_of_utc_and_off_the_hour(tmp_path: Path) -> None:
    store, rep = _ingest(tmp_path, _write(tmp_path, -timedelta(hours=3, minutes=30)))
    recs, e = _sglang(store)
    assert iso(recs)[0] == "2025-05-25T20:19:41.000000"
    assert "zone inferred: UTC -03:30" in e.time_anchor


def test_utc_stamps_are_confirmed_and_not_moved(tmp_path: Path) -> None:
    store, rep = _ingest(tmp_path, _write(tmp_path, timedelta(0)))
    recs, e = _sglang(store)
    assert iso(recs)[0] == "2025-05-25T20:19:41.000000"
    assert e.time_anchor.startswith("zone UTC: 4 of its lines are also in ")
    assert "with exact times, at the same times (" in e.time_anchor
    assert "zone assumed" not in e.time_anchor
    [z] = rep.zones
    assert not z.moved and not z.warning


def test_a_zone_given_is_kept_whatever_the_journal_says(tmp_path: Path) -> None:
    store, rep = _ingest(tmp_path, _write(tmp_path, timedelta(hours=8)), tz="UTC", given=("tz",))
    recs, e = _sglang(store)
    assert iso(recs)[0] == "2025-05-26T04:19:41.000000"   # as the user said: UTC
    assert rep.zones == [] and "zone assumed UTC" in e.time_anchor


def test_the_right_zone_given_reads_the_same_times(tmp_path: Path) -> None:
    store, rep = _ingest(tmp_path, _write(tmp_path, timedelta(hours=8)), tz="Asia/Shanghai")
    recs, e = _sglang(store)
    assert iso(recs)[0] == "2025-05-25T20:19:41.000000" and rep.zones == []


def test_one_line_is_too_few_to_move_the_times_and_says_so(tmp_path: Path) -> None:
    store, rep = _ingest(tmp_path, _write(tmp_path, timedelta(hours=8), shared=1))
    recs, e = _sglang(store)
    assert iso(recs)[0] == "2025-05-26T04:19:41.000000"
    [z] = rep.zones
    assert z.warning and not z.moved
    assert "1 line also in a source with exact times" in z.said and "UTC +08:00: too few" in z.said
    assert "zone assumed UTC" in e.time_anchor


def test_a_journal_of_another_zone_than_the_log_is_still_one_offset(tmp_path: Path) -> None:
    # journalctl printed the times in the zone of the machine it ran on, +02:00; the stamps are +08:00: the journal's
    # offsets make its times exact whatever zone it printed them in
    store, rep = _ingest(tmp_path, _write(tmp_path, timedelta(hours=8), journal_east=timedelta(hours=2)))
    recs, e = _sglang(store)
    assert iso(recs)[0] == "2025-05-25T20:19:41.000000"


def test_reading_again_infers_the_same_zone(tmp_path: Path) -> None:
    paths = _write(tmp_path, timedelta(hours=8))
    store, _ = _ingest(tmp_path, paths)
    first = _sglang(store)[0]
    store, rep = _ingest(tmp_path, paths, force=True)
    again, e = _sglang(store)
    assert iso(again) == iso(first) and "zone inferred: UTC +08:00" in e.time_anchor
    assert [z.moved for z in rep.zones] == [True]


def test_tz_given_after_a_zone_was_inferred_reads_the_source_again_with_it(tmp_path: Path) -> None:
    paths = _write(tmp_path, timedelta(hours=8))
    store, _ = _ingest(tmp_path, paths)
    store, rep = _ingest(tmp_path, paths, tz="UTC", given=("tz",))   # the user's word: the stamps are UTC
    recs, e = _sglang(store)
    assert iso(recs)[0] == "2025-05-26T04:19:41.000000" and rep.zones == []
    assert e.time_anchor.startswith("zone assumed UTC")
    [again] = [r.again for r in rep.results if r.path.endswith("sglang.log")]
    assert again == "read again, with --tz UTC (it was read with UTC +08:00, inferred from its lines)"
    # the journal, whose zone is printed, is not read again
    assert [r.status for r in rep.results if r.path.endswith("journal.log")] == ["unchanged"]


def test_a_journal_ingested_later_moves_the_log_read_before(tmp_path: Path) -> None:
    log, journal = _write(tmp_path, timedelta(hours=8))
    store, rep = _ingest(tmp_path, [log])
    assert rep.zones == [] and iso(_sglang(store)[0])[0] == "2025-05-26T04:19:41.000000"
    store, rep = _ingest(tmp_path, [journal])
    recs, e = _sglang(store)
    assert iso(recs)[0] == "2025-05-25T20:19:41.000000" and [z.moved for z in rep.zones] == [True]
    _, rep = _ingest(tmp_path, [log, journal])   # nothing new: nothing read again
    assert rep.zones == []


def _pairs(diffs: list[float]) -> pl.DataFrame:
    t0 = datetime(2025, 5, 25, 20, 0, 0)
    return pl.DataFrame({"ts": [t0 + timedelta(seconds=d) for d in diffs], "ts_exact": [t0] * len(diffs),
                         "path": ["j.log"] * len(diffs), "line": list(range(1, len(diffs) + 1))})


def test_find_offset_allows_the_seconds_a_journal_takes() -> None:
    f = find_offset(_pairs([28800 - 0.9, 28800 - 2.0, 28800 + 0.2]))
    assert f is not None and f.offset == 28800 and f.pairs == 3 and f.where == ("j.log:1", ":2", ":3")


def test_find_offset_says_nothing_of_a_clock_off_by_minutes() -> None:
    f = find_offset(_pairs([420.0, 421.0, 419.0]))
    assert f is not None and f.offset is None and f.offsets == ()


def test_find_offset_does_not_settle_two_offsets() -> None:
    f = find_offset(_pairs([3600, 3600, 3601, 7200, 7200]))
    assert f is not None and f.offset is None and f.offsets == ((3600, 3), (7200, 2))


def test_find_offset_needs_half_the_pairs_at_a_whole_quarter_hour() -> None:
    f = find_offset(_pairs([3600, 3600, 3611, 3650, 3700]))
    assert f is not None and f.offset is None and f.offsets == ((3600, 2),)
    f = find_offset(_pairs([3600, 3600, 3600, 3650, 3700]))   # three of five: the boot's lines a journal took late
    assert f is not None and f.offset == 3600


def test_only_lines_held_once_on_each_side_pair() -> None:
    t = datetime(2025, 5, 25, 20, 0, 0)
    assumed = pl.DataFrame({"_h": [1, 2, 2, 3], "ts": [t, t, t, t]})
    exact = pl.DataFrame({"_h": [1, 1, 2, 3, 3], "ts_exact": [t, t, t, t, t + timedelta(hours=1)],
                          "path": ["a", "b", "a", "a", "a"], "line": [1, 1, 2, 3, 4]})
    # 1: the same line at the same time in two exact sources is one; 2: twice in the assumed source; 3: twice exact
    assert unique_pairs(assumed, exact).get_column("_h").to_list() == [1]


def test_find_offset_outside_the_zones_is_no_zone() -> None:
    f = find_offset(_pairs([15 * 3600.0, 15 * 3600.0]))
    assert f is not None and f.offset is None


@pytest.mark.parametrize(("offset", "text"), [(28800, "UTC +08:00"), (-12600, "UTC -03:30"), (20700, "UTC +05:45"),
                                              (0, "UTC +00:00")])
def test_label(offset: int, text: str) -> None:
    assert label(offset) == text


def test_zone_note_replaces_only_the_zone_of_a_year_note() -> None:
    f = find_offset(_pairs([3600.0, 3600.0]))
    assert f is not None
    note = zone_note("year inferred: the dated lines around them in the same file; zone assumed UTC", f, "j.log")
    assert note.startswith("year inferred: the dated lines around them in the same file; zone inferred: UTC +01:00")


def test_cli_says_the_zone_and_warns_even_when_quiet(tmp_path: Path) -> None:
    paths = _write(tmp_path, timedelta(hours=8))
    store = str(tmp_path / "store")
    res = CliRunner().invoke(main, ["--store", store, "ingest", *map(str, paths)])
    assert res.exit_code == 0, res.output
    assert "zone      " + str(paths[0]) + ": zone inferred: UTC +08:00" in res.stderr
    other = tmp_path / "other"
    other.mkdir()
    paths = _write(other, timedelta(hours=8), shared=1)
    res = CliRunner().invoke(main, ["--store", str(other / "store"), "ingest", "-q", *map(str, paths)])
    assert res.exit_code == 0 and f"warning: {paths[0]}: 1 line also in" in res.stderr


def _shift_stamps(text: str, by: timedelta) -> str:
    """Every `YYYY-MM-DD HH:MM:SS` (or with a `T`) in `text` moved by `by`."""
    import re

    def move(m: re.Match[str]) -> str:
        t = datetime.strptime(f"{m.group(1)} {m.group(3)}", "%Y-%m-%d %H:%M:%S") + by
        return t.strftime(f"%Y-%m-%d{m.group(2)}%H:%M:%S")

    return re.sub(r"(20\d\d-\d\d-\d\d)([ T])(\d\d:\d\d:\d\d)", move, text)


def test_the_seed_copied_off_a_host_at_utc_plus_8_is_the_seeds_one_incident(tmp_path: Path) -> None:
    """The seed's logs as a host whose zone is +08:00 prints them: its journals with `-o short-iso` (+08:00), the
    SGLang log in local time, the kernel's with `dmesg -T`. Unmoved, the SGLang log's FlashInfer failure and the
    dmesg's OOM kill stood 8 hours after their units' deaths, incidents of their own; read off the journal, the zone
    puts them back into the seed's one incident."""
    import re

    src = Path(__file__).resolve().parent.parent / "samples" / "incident"
    out = tmp_path / "box"
    out.mkdir()
    east = timedelta(hours=8)
    lines = []
    for line in (src / "journal-eagle3.log").read_text().splitlines(keepends=True):
        m = re.match(r"(\w{3} \d\d \d\d:\d\d:\d\d) (.*)", line, re.S)
        if m:
            t = datetime.strptime(f"2025 {m.group(1)}", "%Y %b %d %H:%M:%S") + east
            lines.append(f"{t:%Y-%m-%dT%H:%M:%S}+0800 " + _shift_stamps(m.group(2), east))
    (out / "journal-eagle3.log").write_text("".join(lines))
    k26 = _shift_stamps((src / "journal-k26.log").read_text(), east).replace("+00:00 ", "+08:00 ")
    (out / "journal-k26.log").write_text(k26)
    (out / "sglang-k26.log").write_text(_shift_stamps((src / "sglang-k26.log").read_text(), east))
    for name in ("sglang-k26.service", "sglang-k26-eagle3.service"):
        (out / name).write_bytes((src / name).read_bytes())
    # `dmesg -T`: the kernel's seconds since boot as local time (the boot at 07:59:59.987 UTC)
    boot = datetime(2025, 5, 25, 7, 59, 59, 987242) + east
    dmesg = []
    for line in (src / "dmesg.log").read_text().splitlines(keepends=True):
        m = re.match(r"\[\s*(\d+\.\d+)\] (.*)", line, re.S)
        t = boot + timedelta(seconds=float(m.group(1))) if m else None
        dmesg.append(f"[{t:%a %b %d %H:%M:%S %Y}] {m.group(2)}" if m and t else line)
    (out / "dmesg-T.log").write_text("".join(dmesg))
    store = str(tmp_path / "store")
    res = CliRunner().invoke(main, ["--store", store, "ingest", str(out)])
    assert res.exit_code == 0, res.output
    assert f"zone      {out / 'sglang-k26.log'}: zone inferred: UTC +08:00, from 3 lines" in res.stderr
    assert f"zone      {out / 'dmesg-T.log'}: zone inferred: UTC +08:00, from 92 lines also in " in res.stderr
    res = CliRunner().invoke(main, ["--store", store, "incidents"])
    assert res.exit_code == 0, res.output
    [incident] = res.stdout.splitlines()
    assert incident.startswith("2025-05-25-dflash-train-sglang-k26-eagle3\t2025-05-25 20:17:18 .. 20:29:48\t")
    assert "FlashInfer JIT cannot build for sm_120" in incident


def test_a_big_store_pairs_a_sample_of_the_lines_the_same_on_both_sides(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from forensics import zonefix

    assert zonefix.key_step(zonefix.MAX_KEYS) == 1 and zonefix.key_step(zonefix.MAX_KEYS + 1) == 2
    monkeypatch.setattr(zonefix, "MAX_KEYS", 10)   # 60 exact lines: 1 key in 6 kept
    east, sglang, journal = timedelta(hours=8), [], []
    for i in range(60):
        utc = UTC0 + timedelta(seconds=i)
        stamp = f"[{utc + east:%Y-%m-%d %H:%M:%S} TP{i % 8}]"
        sglang.append(f"{stamp} Decode batch {i}. #running-req: {i}\n")
        journal.append(f"{utc + east:%Y-%m-%dT%H:%M:%S}+0800 gpu-a07 python3[51877]: {stamp} Decode batch {i}. "
                       f"#running-req: {i}\n")
    (tmp_path / "sglang.log").write_text("".join(sglang))
    (tmp_path / "journal.log").write_text("".join(journal))
    store, rep = _ingest(tmp_path, [tmp_path / "sglang.log", tmp_path / "journal.log"])
    recs, e = _sglang(store)
    assert iso(recs)[0] == "2025-05-25T20:19:41.000000"
    n = int(e.time_anchor.split("from ")[1].split(" lines")[0])
    assert 2 <= n < 60    # a sample, its lines paired on both sides
