"""`bench/match_replay.py` replays the batches an ingest handed its matcher through a fresh matcher per source: the
events it makes are the events the ingest stored, and it times each step."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted(str(p) for p in (ROOT / "samples" / "incident").iterdir() if p.is_file())


def test_the_replay_makes_the_events_the_ingest_stored(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "match_replay.py"), *FILES, "--runs", "2"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    runs = re.findall(r"^run (\d): (\d+) records, (\d+) events: wall [\d.]+ s, CPU [\d.]+ s; steps \(s\): (.*)$",
                      r.stdout, re.M)
    assert [n for n, *_ in runs] == ["1", "2"]
    assert len({(rec, ev) for _, rec, ev, _ in runs}) == 1     # the same batches, the same events, each run
    store = ["--store", str(tmp_path / "store")]
    assert CliRunner().invoke(main, [*store, "ingest", "--quiet", *FILES]).exit_code == 0
    stored = CliRunner().invoke(main, [*store, "events", "--json"])
    assert int(runs[0][2]) == len(json.loads(stored.stdout)) > 0
    assert "Matcher._candidates" in runs[0][3] and "_apply_rules" in runs[0][3]
