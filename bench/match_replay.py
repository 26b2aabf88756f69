"""Time the rule matching alone: ingest the given files once, keeping every batch of records the matcher was handed,
then replay those batches through a fresh `Matcher` per source, on one thread, and print the wall and CPU time of
the replay and of each of its steps.

    .venv/bin/python bench/match_replay.py bench/.cache/42-1024/*.log --runs 3

Why: in a real ingest matching shares the two cores with reading, parsing and staging, and a sampling profiler
sees little of it. py-spy samples Python threads, and while polars works on its own thread pool the calling
thread waits and is counted idle: a profile of this replay saw 2.3 s of its 8.5 s. Timers around the steps, in a
process that does nothing else, give each step's share; the wall and CPU times of the replay are what matching
costs a single core.
"""

from __future__ import annotations

import argparse
import functools
import resource
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable

import polars as pl

from forensics import match, pipeline
from forensics.cli import main as cli
from forensics.regexbudget import RegexBudget
from forensics.rulepacks import load_rules

# the matcher's steps timed (module functions and Matcher methods); a step's time includes the steps it calls
STEPS = ("_frame", "detached", "_pairs", "_keys", "_apply_rules", "_rule_matches", "_context_fields",
         "_events_python", "_with_records")
METHODS = ("keep", "_candidates", "_run", "_hold", "_deferred_from")


def capture(files: list[str], into: Path) -> dict[str, list[Path]]:
    """Ingest `files` into a store under `into`, writing each batch the sink hands the matcher as an Arrow file;
    the batches of each source, in order."""
    seen: dict[str, list[Path]] = defaultdict(list)
    put = pipeline._Sink.put

    def keep_and_put(self: Any, recs: pl.DataFrame) -> None:
        source = Path(self.staging).name
        part = into / f"{source}-{len(seen[source]):05d}.arrow"
        recs.write_ipc(part, compression="uncompressed")
        seen[source].append(part)
        put(self, recs)

    pipeline._Sink.put = keep_and_put  # type: ignore[method-assign]
    try:
        cli(["--store", str(into / "store"), "ingest", "--quiet", *files], standalone_mode=False)
    except SystemExit as e:  # `ingest` exits with its status
        if e.code:
            raise
    finally:
        pipeline._Sink.put = put  # type: ignore[method-assign]
    return dict(seen)


def _timed(times: Counter, name: str, f: Callable) -> Callable:
    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return f(*args, **kwargs)
        finally:
            times[name] += time.perf_counter() - t
    return wrapper


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def replay(sources: dict[str, list[pl.DataFrame]], times: Counter) -> tuple[float, float, int]:
    """(wall s, CPU s, events) of matching every source's batches with a Matcher of its own, as ingest does."""
    rules = load_rules()
    times.clear()
    wall, cpu, events = time.perf_counter(), _cpu(), 0
    for batches in sources.values():
        m = match.Matcher(rules, budget=RegexBudget(), carry=pipeline.EXTRA)
        for b in batches:
            if m.keep(b):
                events += m.flush().height
        events += m.finish().height
    return time.perf_counter() - wall, _cpu() - cpu, events


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="forensics-replay-"))
    try:
        parts = capture(args.files, work)
        sources = {s: [pl.read_ipc(p) for p in ps] for s, ps in parts.items()}
        records = sum(b.height for bs in sources.values() for b in bs)
        times: Counter = Counter()
        for name in STEPS:
            setattr(match, name, _timed(times, name, getattr(match, name)))
        for name in METHODS:
            setattr(match.Matcher, name, _timed(times, f"Matcher.{name}", getattr(match.Matcher, name)))
        for run in range(1, args.runs + 1):
            wall, cpu, events = replay(sources, times)
            steps = ", ".join(f"{k} {v:.2f}" for k, v in sorted(times.items(), key=lambda kv: -kv[1]))
            print(f"run {run}: {records} records, {events} events: wall {wall:.2f} s, CPU {cpu:.2f} s; steps (s): {steps}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
