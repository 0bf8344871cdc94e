#!/usr/bin/env python3
"""Per-decode-step kernels from two Nsight Compute kernel lists.

    ncu_steps.py SHORT.csv[.xz] LONG.csv[.xz] STEPS [--top N]

SHORT and LONG are `ncu --csv --metrics gpu__time_duration.sum` logs of the
same program generating a few and a few more tokens (bench/cuda/h200.sh
profile). Everything both runs do once (start-up, load, prefill) cancels in
the difference, which is STEPS decode steps: printed are kernels per step,
GPU time per step, and the kernels that account for it, grouped by name.
"""
import csv
import io
import lzma
import sys
from collections import defaultdict


SCALE = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6}
BYTES = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def csv_rows(path):
    """The rows of an `ncu --csv` log (plain or .xz), one per kernel and metric."""
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", errors="replace") as f:
        lines = [line for line in f if line.startswith('"')]
    return list(csv.DictReader(io.StringIO("".join(lines))))


def kernels(path):
    """The log's kernels in launch order: [(name, grid, ns, dram bytes read)]."""
    by_id = {}
    for row in csv_rows(path):
        k = by_id.setdefault(row["ID"], [row["Kernel Name"], row.get("Grid Size", ""), 0.0, 0.0])
        value = float(row["Metric Value"].replace(",", "") or 0)
        unit = row.get("Metric Unit", "")
        if row["Metric Name"] == "gpu__time_duration.sum":
            k[2] = value * SCALE.get(unit, 1.0)
        elif row["Metric Name"] == "dram__bytes_read.sum":
            k[3] = value * BYTES.get(unit, 1.0)
    return [tuple(v) for _, v in sorted(by_id.items(), key=lambda kv: int(kv[0]))]


def read(path):
    """Launches and GPU time per kernel name."""
    count, time_ns = defaultdict(int), defaultdict(float)
    for name, _grid, ns, _bytes in kernels(path):
        name = short_name(name)
        count[name] += 1
        time_ns[name] += ns
    return count, time_ns


def short_name(name):
    """Kernel names without template arguments and parameter lists."""
    for cut in ("<", "("):
        if cut in name:
            name = name[: name.index(cut)]
    return name.strip()[:70]


def main():
    args = sys.argv[1:]
    top = 25
    if "--top" in args:
        i = args.index("--top")
        top = int(args[i + 1])
        del args[i : i + 2]
    short, long_, steps = args[0], args[1], int(args[2])
    c0, t0 = read(short)
    c1, t1 = read(long_)
    names = set(c0) | set(c1)
    per = {n: ((c1[n] - c0[n]) / steps, (t1[n] - t0[n]) / steps) for n in names}
    kernels = sum(k for k, _ in per.values())
    gpu_us = sum(t for _, t in per.values()) / 1e3
    print(f"{long_}: {kernels:.1f} kernels and {gpu_us:.0f} us of GPU time per decode step")
    print(f"(all kernels in the long run: {sum(c1.values())}, short run: {sum(c0.values())})")
    print()
    print("| kernel | per step | GPU us per step | mean us |")
    print("|---|---:|---:|---:|")
    rows = sorted(per.items(), key=lambda kv: -kv[1][1])
    for name, (k, t) in rows[:top]:
        if abs(k) < 0.01 and abs(t) < 1:
            continue
        mean = t / k / 1e3 if k else 0.0
        print(f"| `{name}` | {k:.1f} | {t / 1e3:.1f} | {mean:.1f} |")


if __name__ == "__main__":
    main()
