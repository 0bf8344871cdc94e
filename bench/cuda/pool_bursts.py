"""Pools HEARTH_STEP_TRACE bursts over server processes, route by route.

Identical servers on the lent H200 differ by up to ~10% (docs/cuda.md), so a
route is judged on several processes' bursts at once. Each trace is named
`trace-MODEL-VARIANT.tsv[.xz]` (bench/cuda/h200.sh); a group names the variants
that ran one route at some row counts:

    python3 bench/cuda/pool_bursts.py --group warp4=w4a,w4a2,w4b@2 \
        --group default=base,base2,w4b@3-16 run1/trace-*.tsv.xz run2/trace-*.tsv.xz

`VARIANT@ROWS` (`@2`, `@3-16`) keeps that variant's bursts of those decode row
counts only (w4b ran warp4 at 2 rows and the default route above). Prints,
per row count and group: bursts, servers, and the mean over bursts of the
p50 step time, of the part in MLX's async_eval (queue_us) and of graph
building (decode_us - queue_us), in ms. Bursts are the runs of decode-only
steps between idle spells with at least 20 steps (warm-up bursts are the
first three of each trace and are skipped)."""
import argparse
import os
import re
import statistics
import sys

from trace_summary import decode_bursts, pct, read_trace

WARMUP_BURSTS = 3


def p50(values):
    return pct(sorted(values), 0.5)


def parse_member(text):
    """`w4b@4-16` -> ("w4b", 4, 16); `base` -> ("base", 1, any)."""
    m = re.fullmatch(r"([^@]+)(?:@(\d+)(?:-(\d+))?)?", text.strip())
    if not m:
        raise SystemExit(f"bad group member {text!r}")
    lo = int(m.group(2) or 1)
    hi = int(m.group(3) or m.group(2) or 1 << 30)
    return m.group(1), lo, hi


def variant_of(path):
    """`.../trace-dense-w4a2.tsv.xz` -> "w4a2" (the model name has no '-')."""
    name = os.path.basename(path).split(".tsv")[0]
    return name.split("-", 2)[2] if name.count("-") >= 2 else name


def pool(groups, paths):
    """{(rows, group): [(step, queue, build, path)]} over every matching burst."""
    table = {}
    for path in paths:
        variant = variant_of(path)
        header, rows = read_trace(path)
        if "queue_us" not in header:
            print(f"{path}: no queue_us column (a trace from before session 16)", file=sys.stderr)
            continue
        for b, steps in decode_bursts(rows).items():
            if b < WARMUP_BURSTS:
                continue
            n = p50(r["decode_rows"] for r in steps)
            for group, members in groups:
                if any(v == variant and lo <= n <= hi for v, lo, hi in members):
                    table.setdefault((n, group), []).append(
                        (
                            p50(r["step_us"] for r in steps),
                            statistics.mean(r["queue_us"] for r in steps),
                            statistics.mean(r["decode_us"] - r["queue_us"] for r in steps),
                            path,
                        )
                    )
    return table


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--group", action="append", required=True, help="NAME=VARIANT[@ROWS],...")
    ap.add_argument("traces", nargs="+")
    args = ap.parse_args(argv)
    groups = []
    for g in args.group:
        name, _, members = g.partition("=")
        groups.append((name, [parse_member(m) for m in members.split(",")]))
    table = pool(groups, args.traces)
    print("rows  group            bursts  servers  step p50  async_eval  build  (ms, means over bursts)")
    for n, group in sorted(table, key=lambda k: (k[0], [g for g, _ in groups].index(k[1]))):
        got = table[(n, group)]
        mean = lambda i: statistics.mean(x[i] for x in got) / 1000
        print(
            f"{n:4d}  {group:15s}  {len(got):6d}  {len({x[3] for x in got}):7d}"
            f"  {mean(0):8.2f}  {mean(1):10.2f}  {mean(2):5.2f}"
        )
    return table


if __name__ == "__main__":
    main()
