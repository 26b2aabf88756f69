"""Journal tracebacks made one record again (`normalise._merge_journal_blocks`): the run-based version (blocks
looked for only in runs of consecutive rows of one process that hold a block start) gives exactly what the
reference gives, the earlier version that looked at every row of every process that logged a block start (with
one difference: a process whose host or identifier is null is a process too; the earlier version's join left
those out, so their tracebacks stayed one record per line)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.formats import JOURNAL_TEXT
from forensics.normalise import _BLOCK_RX, BLOCK_START, KEY, NEW_RECORD, _merge_journal_blocks, merge_blocks

T0 = datetime(2025, 5, 25, 20, 0, tzinfo=timezone.utc)


def reference(recs: pl.DataFrame) -> pl.DataFrame:
    """The earlier version, kept as the reference: every row of each (host, ident, pid) that logged a block start
    in the batch, windows over the process (the merge of the blocks found is `merge_blocks`, shared)."""
    journal = pl.col("format").is_in(list(JOURNAL_TEXT)) & pl.col("pid").is_not_null()
    keys = recs.filter(journal & pl.col("message").str.contains(_BLOCK_RX)).select(KEY).unique()
    if keys.height == 0:
        return recs
    df = recs.with_row_index("_i")
    j = df.filter(journal).join(keys, on=KEY, how="semi", nulls_equal=True)
    gap = (pl.col("ts") - pl.col("ts").shift(1).over(KEY)).dt.total_seconds().abs()
    apart = (pl.col("_i") - pl.col("_i").shift(1).over(KEY)).ne(1).fill_null(True)
    new_rec = (pl.col("message").str.contains(NEW_RECORD) | gap.is_null() | (gap > 2) | apart)
    start = pl.col("message").str.contains(BLOCK_START)
    j = j.with_columns(new_rec.alias("_new"), start.alias("_start"))
    j = j.with_columns(pl.when(pl.col("_new")).then(pl.col("_start")).forward_fill().over(KEY).alias("_in"))
    j = j.with_columns((pl.col("_in") & ~pl.col("_new")).alias("_cont"))
    if not j["_cont"].any():
        return recs
    return merge_blocks(recs, df, j, KEY)  # shared: the property is about which rows form a block


MESSAGES = ["Traceback (most recent call last):", '  File "x.py", line 1, in f', "    raise RuntimeError()",
            "RuntimeError: boom", "Exception raised from c10 at x.cpp:1", "in the middle: Exception raised from x",
            "[2025-05-25 20:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
            "INFO:     127.0.0.1 - GET /health", "[rank0]: NCCL error", "E0525 20:00:00.1 x.cc:1] glog", "plain line",
            ""]
PROCS = [("h1", "python3", 7), ("h1", "python3", 8), ("h1", "sglang", 7), ("h2", "python3", 7), (None, "python3", 7),
         ("h1", None, 9), ("h1", "python3", None)]
row = st.tuples(st.sampled_from(PROCS), st.sampled_from(MESSAGES), st.sampled_from([0, 0, 0, 1, 3, None]),
                st.sampled_from(["journal-short-iso", "journal-short", "sglang", None]), st.integers(1, 3))


def frame(rows: list) -> pl.DataFrame:
    t, line, out = T0, 1, []
    for (host, ident, pid), msg, step, fmt, span in rows:
        t = t + timedelta(seconds=step) if step is not None else t
        out.append({"host": host, "ident": ident, "pid": pid, "message": msg, "format": fmt,
                    "ts": None if step is None else t, "line": line, "line_end": line + span - 1, "unit": None})
        line += span
    return pl.DataFrame(out, schema={"host": pl.String, "ident": pl.String, "pid": pl.Int64, "message": pl.String,
                                     "format": pl.String, "ts": pl.Datetime("us", "UTC"), "line": pl.Int64,
                                     "line_end": pl.Int64, "unit": pl.String})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(row, min_size=1, max_size=40))
def test_runs_give_what_every_row_of_the_process_gives(rows: list) -> None:
    recs = frame(rows)
    assert _merge_journal_blocks(recs).equals(reference(recs))


def test_a_block_is_one_record_and_stops_at_another_process_or_a_new_record() -> None:
    """An example the property would find too, spelled out: a traceback of pid 7 (three lines, then an SGLang
    record that starts a new one), interrupted once by pid 8 (which ends it: the rest are records of their own)."""
    p7, p8 = (("h", "python3", 7), ("h", "python3", 8))
    j = "journal-short-iso"
    rows = [(p7, "Traceback (most recent call last):", 0, j, 1), (p7, '  File "x.py", line 1, in f', 0, j, 1),
            (p7, "RuntimeError: boom", 1, j, 1), (p7, "[2025-05-25 20:00:01 TP0] next record", 0, j, 1),
            (p7, "Traceback (most recent call last):", 0, j, 1), (p8, "other process", 0, j, 1),
            (p7, '  File "y.py", line 2, in g', 0, j, 1)]
    out = _merge_journal_blocks(frame(rows))
    assert out["line"].to_list() == [1, 4, 5, 6, 7]
    assert out["line_end"].to_list() == [3, 4, 5, 6, 7]
    assert out["message"][0] == 'Traceback (most recent call last):\n  File "x.py", line 1, in f\nRuntimeError: boom'
    assert out.equals(reference(frame(rows)))


def test_a_line_of_another_format_is_no_part_of_a_journal_block() -> None:
    """A traceback start that is not a journal line (an SGLang log line of the same host, name and pid) starts no
    block, and the journal lines after it are records of their own; the journal's own traceback after them is one."""
    p, j = ("h", "python3", 7), "journal-short-iso"
    rows = [(p, "Traceback (most recent call last):", 0, "sglang", 1), (p, '  File "x.py", line 1, in f', 0, j, 1),
            (p, "RuntimeError: boom", 0, j, 1), (p, "Traceback (most recent call last):", 0, j, 1),
            (p, '  File "y.py", line 2, in g', 0, j, 1)]
    out = _merge_journal_blocks(frame(rows))
    assert out["line_end"].to_list() == [1, 2, 3, 5]
    assert out.equals(reference(frame(rows)))


_TB = ["[2025-05-25 20:17:19 TP0] Scheduler hit an exception: Traceback (most recent call last):",
       '  File "/sgl/scheduler.py", line 2311, in run_scheduler_process',
       "    scheduler.event_loop_overlap()",
       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 5.24 GiB."]


def _journal(before: int, after: int) -> str:
    """A journal of one SGLang process: `before` lines, its crash logged line by line, `after` lines of systemd."""
    head = [f"May 25 20:{10 + i // 600:02d}:{i // 10 % 60:02d} gpu-node-1 python3[48213]: "
            f"[2025-05-25 20:{10 + i // 600:02d}:{i // 10 % 60:02d} TP0] Decode batch. #running-req: {i}"
            for i in range(before)]
    tb = [f"May 25 20:17:19 gpu-node-1 python3[48213]: {t}" for t in _TB]
    tail = [f"May 25 20:17:2{i % 10} gpu-node-1 systemd[1]: sglang.service: Main process exited, code=exited, "
            f"status=1/FAILURE" for i in range(after)]
    return "\n".join(head + tb + tail) + "\n"


def _crash_events(tmp_path, text: str, monkeypatch=None, batch: int | None = None):  # noqa: ANN001, ANN202
    import forensics.pipeline as pipeline
    from forensics.store import Store

    if batch is not None:
        monkeypatch.setattr(pipeline, "BATCH_BYTES", batch)
    (tmp_path / "j.log").write_text(text)
    store = Store(tmp_path / "s")
    pipeline.ingest(store, [str(tmp_path / "j.log")], pipeline.IngestOptions())
    recs = store.records().collect()
    ev = store.events().collect()
    return recs.filter(pl.col("message").str.contains("Traceback")), ev


def test_a_traceback_at_the_end_of_a_file_is_one_record(tmp_path) -> None:  # noqa: ANN001
    """A journal (or a container's log) that ends with the crash: the parser held the last line back in case the
    next line continued it, and that line was parsed on its own, after the merge: the exception was a record of
    its own, the scheduler's crash read `SGLang Scheduler crashed: ?` and no `python_traceback` event came."""
    tbs, ev = _crash_events(tmp_path, _journal(20, 0))
    assert tbs.height == 1 and tbs["message"][0].endswith(_TB[-1]) and tbs["line_end"][0] == 24
    titles = dict(zip(ev["kind"], ev["title"]))
    assert titles["scheduler_exception"] == ("SGLang Scheduler crashed: torch.OutOfMemoryError: CUDA out of memory. "
                                             "Tried to allocate 5.24 GiB.")
    assert "python_traceback" in titles


def test_a_traceback_across_a_batch_cut_is_one_record(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """The same where a batch ends inside the traceback: the block is parsed again with the next batch."""
    text = _journal(200, 30)
    for cut in (len(text.split("Traceback")[0]) + 40, len(text.split("event_loop")[0]) + 5):
        head = text[:cut].rsplit("\n", 1)[0].count("\n") + 1  # lines wholly before the cut
        assert 200 < head < 205
        d = tmp_path / str(cut)
        d.mkdir()
        tbs, ev = _crash_events(d, text, monkeypatch, batch=cut)
        assert tbs.height == 1 and tbs["message"][0].endswith(_TB[-1]), tbs["message"].to_list()
        titles = dict(zip(ev["kind"], ev["title"]))
        assert titles["scheduler_exception"] == ("SGLang Scheduler crashed: torch.OutOfMemoryError: CUDA out of memory. "
                                             "Tried to allocate 5.24 GiB.")
        assert (ev["kind"] == "python_traceback").sum() == 1


def test_vllm_under_systemd_a_traceback_logged_line_by_line_is_one_record(tmp_path) -> None:  # noqa: ANN001
    """vLLM in the journal: every line of `logger.exception`'s output is an entry that starts with vLLM's prefix
    again. The repeated prefix is taken off the lines that continue the message, so the traceback is one record
    (the exception read by the python pack); an entry that starts a message keeps its prefix and stays a record of
    its own (`Route: ...` lines logged in a loop from one line of code in one second)."""
    j = "May 25 20:16:40 gpu-node-1 python3[48213]: "
    p = "(EngineCore_DP0 pid=413) ERROR 05-25 20:16:40 [core.py:710] "
    r = "May 25 20:11:52 gpu-node-1 python3[48213]: INFO 05-25 20:11:52 [launcher.py:36] "
    text = "\n".join([
        r + "Route: /openapi.json, Methods: HEAD, GET", r + "Route: /docs, Methods: HEAD, GET",
        j + p + "EngineCore encountered a fatal error.", j + p + "Traceback (most recent call last):",
        j + p + '  File "/usr/lib/python3/dist-packages/vllm/v1/engine/core.py", line 701, in run_engine_core',
        j + p + "    engine_core.run_busy_loop()",
        j + p + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "May 25 20:16:41 gpu-node-1 systemd[1]: vllm.service: Main process exited, code=exited, status=1/FAILURE",
    ]) + "\n"
    tbs, ev = _crash_events(tmp_path, text)
    assert tbs.select("line", "line_end").rows() == [(4, 7)]
    assert tbs["message"][0] == ("Traceback (most recent call last):\n"
                                 '  File "/usr/lib/python3/dist-packages/vllm/v1/engine/core.py", line 701, in '
                                 "run_engine_core\n    engine_core.run_busy_loop()\n"
                                 "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")
    titles = dict(zip(ev["kind"], ev["title"]))
    assert titles["python_traceback"].startswith("torch.OutOfMemoryError: CUDA out of memory")
    assert titles["scheduler_exception"] == "vLLM EngineCore encountered a fatal error"
    assert "cuda_oom" in titles


_PROBE = ['I0525 20:12:09.100000    4052 prober.go:107] "Probe failed" probeType="Liveness" '
          'pod="inference/sglang-llama-0" podUID="93e17ecc-ab55-461a-b526-29248d2554ad" containerName="sglang" '
          'probeResult="failure" output=<',
          "\tcurl: (7) Failed to connect to localhost port 30000 after 0 ms: Connection refused",
          " >"]


def _kubelet(before: int) -> str:
    """A kubelet's journal: `before` lines, then a failed exec probe whose output klog prints as a multi-line value
    (one entry a line), then one more line of the kubelet."""
    head = [f"May 25 20:{10 + i // 600:02d}:{i // 10 % 60:02d} gpu-node-3 kubelet[4052]: I0525 20:10:00.000000    "
            f'4052 kubelet_node_status.go:486] "Fast updating node status as it just became ready" n={i}'
            for i in range(before)]
    probe = [f"May 25 20:12:09 gpu-node-3 kubelet[4052]: {t}" for t in _PROBE]
    after = ['May 25 20:12:10 gpu-node-3 kubelet[4052]: I0525 20:12:10.000000    4052 kubelet.go:2528] "SyncLoop '
             '(probe)" probe="liveness" status="unhealthy" pod="inference/sglang-llama-0"']
    return "\n".join(head + probe + after) + "\n"


def test_a_klog_multi_line_value_is_one_record_with_its_line(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """klog prints a multi-line value (an exec probe's output) as `key=<`, its lines after a tab, and ` >`; through
    the journal each is an entry: the three are the probe's record again, also where a batch ends inside them, and
    the line after them (a record of its own) is not taken in."""
    import forensics.pipeline as pipeline
    from forensics.store import Store

    text = _kubelet(200)
    for cut in (None, len(text.split("output=<")[0]) + 20, len(text.split("curl: (7)")[0]) + 5):
        d = tmp_path / str(cut)
        d.mkdir()
        if cut is not None:
            monkeypatch.setattr(pipeline, "BATCH_BYTES", cut)
        (d / "j.log").write_text(text)
        store = Store(d / "s")
        store.init()
        pipeline.ingest(store, [str(d / "j.log")], pipeline.IngestOptions())
        recs = store.records().sort("line").collect()
        assert recs.height == 202, cut
        probe = recs.filter(pl.col("message").str.contains("Probe failed"))
        assert probe["message"].to_list() == ["\n".join(_PROBE)], cut
        assert (probe["line"][0], probe["line_end"][0]) == (201, 203)
        ev = store.events().collect().filter(pl.col("kind") == "health_check_failed")
        assert ev.height == 1 and '"output":"curl: (7) Failed to connect' in ev["fields"][0], cut
