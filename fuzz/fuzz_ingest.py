"""atheris harness: any bytes as one log source, through the whole ingest (detect, parse, normalise, times,
rules, store). Run by `fuzz/run.py` (seeds, dictionary, time limit); alone: `python fuzz/fuzz_ingest.py
CORPUS_DIR -max_total_time=60`. See fuzz/README.md."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

if __name__ == "__main__":
    common.fuzz_main(common.check_ingest)
