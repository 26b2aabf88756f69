"""Run the atheris harnesses for a bounded time each, seeded with the sample logs and the rule packs.

    python fuzz/run.py --seconds 20                  # each harness 20 s (tests/test_fuzz_short.py, CI)
    python fuzz/run.py --seconds 600                 # `make fuzz`: longer, corpus kept in fuzz/corpus/
    python fuzz/run.py --seconds 60 fuzz_rules       # one harness

Prints one line per harness (executions, seconds, known bugs hit) and exits 1 when a harness found a new
problem, naming the input file that reproduces it: `python fuzz/fuzz_X.py CRASH_FILE` runs it once.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
HARNESSES = {"fuzz_ingest": 8192, "fuzz_formats": 8192, "fuzz_rules": 32768}   # name -> -max_len
SMALL_SEEDS = [
    b"", b"\n", b"\r\n\r\n", b"\x00\x00\x00\n", b"caf\xe9 \xff\xfe\n", b"a" * 300,
    b"2025-05-25T20:17:19+00:00 h a[1]: one\r\n2025-05-25T20:17:20+00:00 h a[1]: two\r\n",
    b"1970-01-01T00:00:00+00:00 h a[1]: epoch\n9999-12-31T23:59:59+00:00 h a[1]: far\n",
    b'{"__REALTIME_TIMESTAMP":"1748204239000000","MESSAGE":"x"}\n{"__REALTIME_TIMESTAMP":"17482',
    gzip.compress(b"2025-05-25T20:17:19+00:00 h a[1]: zipped\n" * 40, mtime=0),
    gzip.compress(b"2025-05-25T20:17:19+00:00 h a[1]: zipped\n" * 400, mtime=0)[:200],
    b"\xff\xfe\xfe\x00\x00\x00\x00\x00\x00\xff\xfe\x00\x00\x00\n\n",  # UTF-16LE: `0a 0a` is U+0A0A
]


QUICK = ("journal-short", "journal-json", "systemctl-status", "dmesg", "sglang", "unit-file", "syslog", "glog")


def seeds(name: str, quick: bool = False) -> list[tuple[str, bytes]]:
    """The seed inputs. `quick` (a short run): the small seeds and eight format samples of 2 KiB, so that the
    seeds take a few seconds of the run, not all of it."""
    out: list[tuple[str, bytes]] = [(f"small{i}", b) for i, b in enumerate(SMALL_SEEDS)]
    files = sorted((ROOT / "samples" / "formats").glob("*.log"))
    if quick:
        files = [f for f in files if f.stem in QUICK]
    elif name != "fuzz_formats":   # the incident's logs: what the rules look for
        files += sorted((ROOT / "samples" / "incident").glob("*"))
    limit = 2048 if quick else HARNESSES[name]
    for f in files:
        out.append((f"{f.parent.name}-{f.name}", f.read_bytes()[:limit]))
    if name == "fuzz_rules":
        packs = sorted((ROOT / "rules").glob("*.yaml"))
        out += [(f"pack-{f.name}", f.read_bytes()) for f in (packs[:2] if quick else packs)]
    if name == "fuzz_formats":   # the first byte picks the batch cut and the extra formats
        out = [(n, bytes([i % 251]) + b) for i, (n, b) in enumerate(out)]
    return out


def run(name: str, seconds: float, work: Path, corpus_root: Path, runs: int | None, quick: bool = False) -> dict:
    corpus = corpus_root / name
    corpus.mkdir(parents=True, exist_ok=True)
    seed_dir = work / f"{name}-seeds"
    shutil.rmtree(seed_dir, ignore_errors=True)
    seed_dir.mkdir(parents=True)
    for n, b in seeds(name, quick):
        (seed_dir / n).write_bytes(b)
    stats = work / f"{name}-stats.json"
    stats.unlink(missing_ok=True)
    artifacts = work / "artifacts"
    artifacts.mkdir(exist_ok=True)
    before = set(artifacts.glob(f"{name}-*"))  # crash files of earlier runs are not this run's findings
    cmd = [sys.executable, str(HERE / f"{name}.py"), str(corpus), str(seed_dir),
           f"-max_total_time={int(seconds)}", f"-max_len={HARNESSES[name]}", f"-dict={HERE / 'forensics.dict'}",
           f"-artifact_prefix={artifacts}/{name}-", "-print_final_stats=1", "-timeout=30", "-rss_limit_mb=4096",
           "-seed=1"]
    if runs:
        cmd.append(f"-atheris_runs={runs}")
    # unbuffered: atheris prints the uncaught exception and then _exit()s, which would lose a buffered pipe
    env = {**os.environ, "FORENSICS_FUZZ_STATS": str(stats), "FORENSICS_RULES": "", "PYTHONUNBUFFERED": "1"}
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env,
                          timeout=seconds * 3 + 120)
    took = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    done = re.search(r"Done (\d+) runs in (\d+) second", out)
    execs = int(done.group(1)) if done else None
    info = json.loads(stats.read_text()) if stats.exists() else {}
    crashes = sorted(str(p) for p in set(artifacts.glob(f"{name}-*")) - before)
    res = {"harness": name, "returncode": proc.returncode, "execs": execs if execs is not None else info.get("execs"),
           "seconds": round(took, 1), "known": info.get("known", {}), "crashes": crashes,
           "corpus": len(list(corpus.iterdir()))}
    if proc.returncode != 0 or crashes:
        tail = out[-6000:]
        start = tail.find("=== Uncaught Python exception")
        res["output"] = tail[start:] if start >= 0 else tail
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("harness", nargs="*", choices=[*HARNESSES, []], help="default: all")
    ap.add_argument("--seconds", type=float, default=20.0, help="time per harness (default 20)")
    ap.add_argument("--runs", type=int, default=None, help="also stop a harness after this many executions")
    ap.add_argument("--work", type=Path, default=HERE / "work", help="seeds, stats, crash files (default fuzz/work)")
    ap.add_argument("--corpus", type=Path, default=HERE / "corpus", help="kept corpus (default fuzz/corpus)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here as JSON")
    ap.add_argument("--quick", action="store_true", help="fewer, smaller seeds (for short runs such as make test)")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    results = [run(n, args.seconds, args.work, args.corpus, args.runs, args.quick)
               for n in (args.harness or list(HARNESSES))]
    bad = False
    for r in results:
        known = ", ".join(f"{k} x{v}" for k, v in sorted(r["known"].items())) or "none"
        print(f"{r['harness']:14} {r['execs'] or 0:>8} executions in {r['seconds']:>6.1f} s, corpus {r['corpus']}, "
              f"known bugs hit: {known}, exit {r['returncode']}")
        if r["returncode"] != 0 or r["crashes"]:
            bad = True
            print(f"  NEW PROBLEM; reproduce: {sys.executable} fuzz/{r['harness']}.py {' '.join(r['crashes'])}")
            print("  " + r.get("output", "").replace("\n", "\n  "))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
