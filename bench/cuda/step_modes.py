"""Splits a server's decode steps into a fast and a slow mode, row count by row count.

On the lent H200s a host-bound decode step (the MoE's) runs at one of two
speeds for stretches of tens of steps: every host part of the step (graph
building, MLX's async_eval, delivering tokens, the gap between steps) is
slower together, on the same CPU, without preemption or system time
(docs/cuda.md, "Benchmark"; bench/results/h200-2026-12-07-s33.md). This prints, per trace and
decode row count: the steps, the share of slow ones (step time above
--factor times the row count's 10th percentile), the p50 step of each mode,
and, slow over fast, the p50 of graph building (decode_us - queue_us), of
async_eval (queue_us) and of delivery (deliver_us). When all three grow by
about the step's own factor, the whole thread ran slower; when only one
does, that part is the cause. Last, tokens per second over one stream at
each row count from the fast steps alone, beside the same from all steps.

    python3 bench/cuda/step_modes.py bench/results/h200-2026-12-07-s33/trace-moe-hearth.tsv.xz
"""
import argparse

from trace_summary import decode_bursts, pct, read_trace


def p50(values):
    return pct(sorted(values), 0.5) if values else 0


def modes(path, factor):
    _, rows = read_trace(path)
    steps = {}
    for burst in decode_bursts(rows).values():
        for r in burst:
            steps.setdefault(r["decode_rows"], []).append(r)
    print(f"== {path}")
    print("rows  steps  slow %  fast p50  slow p50  slow/fast: step  graph  async_eval  deliver")
    fast_p50, all_p50 = {}, {}
    for n in sorted(steps):
        group = steps[n]
        floor = pct(sorted(r["step_us"] for r in group), 0.1)
        fast = [r for r in group if r["step_us"] <= factor * floor]
        slow = [r for r in group if r["step_us"] > factor * floor]
        fast_p50[n] = p50([r["step_us"] for r in fast])
        all_p50[n] = p50([r["step_us"] for r in group])

        def ratio(key):
            f, s = p50([key(r) for r in fast]), p50([key(r) for r in slow])
            return f"{s / f:5.2f}" if f and slow else "    -"

        print(
            f"{n:4d} {len(group):6d}  {100 * len(slow) / len(group):5.1f}  {fast_p50[n]:8d}"
            f"  {p50([r['step_us'] for r in slow]):8d}  {ratio(lambda r: r['step_us']):>16}"
            f"  {ratio(lambda r: r['decode_us'] - r['queue_us'])}  {ratio(lambda r: r['queue_us']):>10}"
            f"  {ratio(lambda r: r['deliver_us']):>7}"
        )
    if 1 in fast_p50:
        print("speed-up over one row: fast steps / all steps")
        for n in sorted(fast_p50):
            if fast_p50[n] and all_p50[n]:
                f = n * fast_p50[1] / fast_p50[n]
                a = n * all_p50[1] / all_p50[n]
                print(f"{n:4d}  {f:5.2f}x / {a:5.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--factor", type=float, default=1.3, help="slow: above FACTOR x the 10th percentile")
    args = ap.parse_args()
    for path in args.traces:
        modes(path, args.factor)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
