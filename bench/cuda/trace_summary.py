"""Summarises HEARTH_STEP_TRACE files: decode-only step time by batch size."""
import statistics
import sys


def pct(values, q):
    return values[min(len(values) - 1, int(q * len(values)))]


for path in sys.argv[1:]:
    lines = [line.rstrip("\n").split("\t") for line in open(path)][1:]
    rows = [list(map(int, r)) for r in lines if len(r) == 7]
    print(f"== {path}: {len(rows)} steps")
    print("rows  steps  step_us p50   mean    p99     max   gap_us p50  mean  >50ms")
    by_rows = {}
    for _t, step, gap, decode, prefill, _span, _pipe in rows:
        if prefill == 0:
            by_rows.setdefault(decode, []).append((step, gap))
    for decode in sorted(by_rows):
        steps = sorted(x[0] for x in by_rows[decode])
        gaps = sorted(x[1] for x in by_rows[decode])
        slow = sum(1 for x in steps if x > 50_000)
        print(
            f"{decode:4d} {len(steps):6d}  {pct(steps, .5):11d} {int(statistics.mean(steps)):6d}"
            f" {pct(steps, .99):7d} {steps[-1]:7d}  {pct(gaps, .5):10d} {int(statistics.mean(gaps)):5d}  {slow:5d}"
        )
    print("slowest steps: t_us step_us gap_us decode_rows prefill_tokens span pipelined")
    for r in sorted(rows, key=lambda r: -r[1])[:8]:
        print("   ", *r)
