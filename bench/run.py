#!/usr/bin/env python3
"""Benchmark: `forensics ingest` vs ripgrep (and lnav when installed) on the generated corpus, same run.

    python bench/run.py [--size-mb 1024] [--seed 42] [--runs 3] [--out bench/results/latest.json]

The corpus comes from ../shared/bench/gen_corpus.py and is cached under bench/.cache/<seed>-<size>/.
Commands run alternately, `--runs` times each; the table shows medians. Peak RSS is the child's
ru_maxrss (os.wait4). After the runs, the planted incidents of truth.json are checked against the events
of the last forensics store.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
GEN = ROOT.parent / "shared" / "bench" / "gen_corpus.py"
FILES = ("journal.log", "journal-iso.log", "dmesg.log", "sglang.log")


def corpus(size_mb: int, seed: int) -> Path:
    out = HERE / ".cache" / f"{seed}-{size_mb}"
    if not (out / "truth.json").exists():
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(GEN), "--out", str(out), "--size-mb", str(size_mb), "--seed", str(seed),
                        "--jobs", "2"], check=True)
    return out


def timed(cmd: list[str], stdout: int | None = subprocess.DEVNULL) -> tuple[float, int, int, float]:
    """(seconds, peak RSS bytes, exit code, CPU seconds: user + system) of one child process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t0
    return dt, ru.ru_maxrss * 1024, os.waitstatus_to_exitcode(status), ru.ru_utime + ru.ru_stime


def literals() -> list[str]:
    """The built-in packs' prefilter literals, read in a child process: this process stays small, so the peak RSS
    of the commands it forks (a forked child starts as a copy of it) is theirs alone."""
    code = ("import json; from forensics.rulepacks import load_rules; r = load_rules(); "
            "print(json.dumps(sorted({x for x in (*r.literals(False), *r.literals(True)) if x})))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "latest.json"))
    ap.add_argument("--scaling", action="store_true",
                    help="also time ingest with matching off and with 2x and 4x the rules (once each)")
    ap.add_argument("--big-mb", type=int, default=0,
                    help="also ingest a corpus of this size once (memory must not grow with the input)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="forensics-bench-"))  # every store and file of the run; removed at the end
    try:
        return run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, work: Path) -> int:
    data = corpus(args.size_mb, args.seed)
    files = [str(data / f) for f in FILES]
    size = sum(os.path.getsize(f) for f in files)
    lines = sum(1 for f in files for _ in open(f, "rb"))
    forensics = str(Path(sys.executable).parent / "forensics")
    pats = work / "patterns.txt"
    pats.write_text("\n".join(literals()) + "\n")
    npats = len(pats.read_text().splitlines())
    cmds: dict[str, list[str] | None] = {
        "cat (floor)": ["cat", *files],
        f"rg -c -F -f ({npats} rule literals)": ["rg", "-c", "-F", "-f", str(pats), *files] if shutil.which("rg") else None,
        "lnav headless index": (["lnav", "-n", "-c", ";SELECT count(*) FROM all_logs", *files]
                                if shutil.which("lnav") else None),
        "forensics ingest": "INGEST",  # type: ignore[dict-item]
    }
    if args.scaling:  # matching off, in the same alternation: the time matching adds is a difference of medians
        cmds["forensics ingest --no-rules"] = "INGEST --no-rules"  # type: ignore[assignment]
    results: dict[str, list[tuple[float, int, float]]] = {k: [] for k, v in cmds.items() if v is not None}
    sizes: dict[str, tuple[int, int]] = {}  # (bytes, lines) of rows not on the main corpus
    store_dir = work / "store"
    other = work / "other"  # the stores of the variants (matching off, more rules, the big corpus)
    for run in range(args.runs):
        for name, cmd in cmds.items():
            if cmd is None:
                continue
            if isinstance(cmd, str) and cmd.startswith("INGEST"):
                where = store_dir if cmd == "INGEST" else other / "v"
                shutil.rmtree(where, ignore_errors=True)
                cmd = [forensics, "--store", str(where), "ingest", "--quiet", *cmd.split()[1:], *files]
            dt, rss, rc, cpu = timed(cmd)  # type: ignore[arg-type]
            if name.startswith("forensics ingest") and rc != 0:
                print(f"forensics ingest failed (exit {rc})", file=sys.stderr)
                return 1
            results[name].append((dt, rss, cpu))
            print(f"run {run + 1}: {name}: {dt:.2f} s, CPU {cpu:.1f} s, {rss / 2**20:.0f} MiB", file=sys.stderr)
    if args.scaling:
        variants = {}
        for k in (2, 4):
            variants[f"forensics ingest, {k}x rules"] = [a for d in scaled_rules(k, work) for a in ("--rules", d)]
        for name, extra in variants.items():
            shutil.rmtree(other / "v", ignore_errors=True)
            dt, rss, rc, cpu = timed([forensics, "--store", str(other / "v"), "ingest", "--quiet", *extra, *files])
            results[name] = [(dt, rss, cpu)]
            print(f"{name}: {dt:.2f} s, {rss / 2**20:.0f} MiB (exit {rc})", file=sys.stderr)
    if args.big_mb:
        big = corpus(args.big_mb, args.seed)
        big_files = [str(big / f) for f in FILES]
        shutil.rmtree(other / "big", ignore_errors=True)
        dt, rss, rc, cpu = timed([forensics, "--store", str(other / "big"), "ingest", "--quiet", *big_files])
        big_size = sum(os.path.getsize(f) for f in big_files)
        big_lines = sum(1 for f in big_files for _ in open(f, "rb"))
        name = f"forensics ingest, {args.big_mb} MiB corpus"
        results[name] = [(dt, rss, cpu)]
        sizes[name] = (big_size, big_lines)
        shutil.rmtree(other / "big", ignore_errors=True)
        print(f"{name}: {dt:.2f} s, {rss / 2**20:.0f} MiB (exit {rc})", file=sys.stderr)
    rows = []
    for name, rs in results.items():
        size_n, lines_n = sizes.get(name, (size, lines))
        t = statistics.median(x[0] for x in rs)
        rss = statistics.median(x[1] for x in rs)
        rows.append({"command": name, "seconds": round(t, 3), "cpu_s": round(statistics.median(x[2] for x in rs), 2),
                     "mb_s": round(size_n / 1e6 / t, 1),
                     "lines_s": round(lines_n / t), "peak_rss_mib": round(rss / 2**20, 1)})
    ours = next(r for r in rows if r["command"] == "forensics ingest")
    for r in rows:
        r["forensics_vs_this"] = round(r["mb_s"] / ours["mb_s"], 2)
    found = check_truth(store_dir, data)
    matching = matching_cpu = None
    if "forensics ingest --no-rules" in results:  # the time matching adds, as a share of the rest
        bare = results["forensics ingest --no-rules"]
        full = results["forensics ingest"]
        # in wall and in CPU time (user + system over both cores): this VM's wall times vary by more than the margin
        matching, matching_cpu = (round(statistics.median(x[k] for x in full) / statistics.median(x[k] for x in bare)
                                        - 1, 3) for k in (0, 2))
        pairs = [round(a[0] / b[0] - 1, 3) for a, b in zip(full, bare)]
    report = {"corpus": str(data), "size_bytes": size, "lines": lines, "runs": args.runs, "rows": rows,
              "matching_adds": matching, "matching_adds_cpu": matching_cpu, "truth": found}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"\ncorpus: {size / 2**20:.0f} MiB, {lines:,} lines, medians of {args.runs} runs\n")
    print("| command | s | CPU s | MB/s | lines/s | peak RSS MiB | x forensics |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['command']} | {r['seconds']} | {r['cpu_s']} | {r['mb_s']:,} | {r['lines_s']:,} | "
              f"{r['peak_rss_mib']:,} | {r['forensics_vs_this']} |")
    if matching is not None:
        print(f"\nmatching adds {matching:.0%} to the ingest time and {matching_cpu:.0%} to its CPU time (full ingest "
              f"vs --no-rules, medians; run by run: {', '.join(f'{p:+.0%}' for p in pairs)})")
    print(f"\nplanted incidents found: {found['found']}/{found['total']}; their host named as planted: "
          f"{found['host_right']} (the others' files name none), named wrong: {len(found['wrong_host'])}")
    for wrong in found["wrong_host"]:
        print(f"  wrong host: {wrong}")
    for miss in found["missed"]:
        print(f"  missed: {miss}")
    return 0


def scaled_rules(k: int, work: Path) -> list[str]:
    """k-1 copies of the built-in packs under new rule ids, as extra --rules directories."""
    import yaml

    dirs = []
    for n in range(1, k):
        d = Path(tempfile.mkdtemp(prefix=f"rules-x{n}-", dir=work))
        for pack in sorted((ROOT / "rules").glob("*.yaml")):
            data = yaml.safe_load(pack.read_text())
            data["pack"] = f"{data['pack']}-copy{n}"
            for r in data.get("rules", []):
                r["id"] = f"{r['id']}.copy{n}"
            (d / f"{pack.stem}-copy{n}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        dirs.append(str(d))
    return dirs


KIND_EVENTS = {"sigkill_cgroup": {"service_killed"}, "kernel_oom": {"oom_kill"},
               "nccl_watchdog_timeout": {"nccl_timeout"}, "flashinfer_sm120": {"flashinfer_arch_unsupported",
                                                                              "cuda_arch_unsupported"},
               "cuda_oom": {"cuda_oom"}}


def check_truth(store_dir: Path, data: Path) -> dict:
    import polars as pl

    sys.path.insert(0, str(ROOT))
    from forensics.store import Store

    truth = json.loads((data / "truth.json").read_text())
    ev = Store(store_dir).events().select("kind", "path", "line", "line_end", "host").collect()
    missed, wrong_host, right_host = [], [], 0
    for inc in truth["incidents"]:
        kinds = KIND_EVENTS[inc["kind"]]
        hit = ev.filter(pl.col("kind").is_in(list(kinds)), pl.col("path").str.ends_with("/" + inc["file"]),
                        pl.col("line") <= inc["line_end"], pl.col("line_end") >= inc["line_start"])
        if hit.height == 0:
            missed.append(f"{inc['id']} {inc['kind']} {inc['file']}:{inc['line_start']}-{inc['line_end']}")
        # a host the file names (a journal's on each line, a dmesg's at boot) must be the planted one; a file that
        # names none (an SGLang log) gives none
        hosts = set(hit["host"].drop_nulls().to_list())
        if hosts and inc.get("host") and hosts != {inc["host"]}:
            wrong_host.append(f"{inc['id']} {inc['file']}:{inc['line_start']}: {sorted(hosts)} for {inc['host']}")
        right_host += hosts == {inc.get("host")}
    return {"total": len(truth["incidents"]), "found": len(truth["incidents"]) - len(missed), "missed": missed,
            "host_right": right_host, "wrong_host": wrong_host}


if __name__ == "__main__":
    sys.exit(main())
