#!/usr/bin/env python3
"""Where one decode step's GPU time goes, from an Nsight Compute kernel list.

    ncu_decode.py [--window] [--each] LOG.csv[.xz] [LOG.csv ...] [--top N]

Each LOG is `ncu --csv --metrics gpu__time_duration.sum[,dram__bytes_read.sum]`
of `hearth dev decode-bench --rows R` (bench/cuda/h200.sh, H200_NCU_DECODE).
decode-bench ends every step with one argmax over the logits
(`arg_reduce_general`), so the kernels between two argmaxes are one decode
step; the prefill before the first is dropped, and so are the first two
steps (kernel compiles). With --window the log holds only the steps that
`decode-bench --profile` bracketed (ncu --profile-from-start off): all kept. Printed per log: the median step's GPU time and
kernel count, then kernels grouped by name and grid (which tells the weight
matrices apart), with time per step, DRAM bytes read and the bandwidth.
With --each every step gets its table instead of the median one: for
`prefill-bench --profile`, whose window holds two different passes (one
prompt, then the batched prompts), each ended by an argmax.
"""
import statistics
import sys
from collections import defaultdict

from ncu_steps import kernels, short_name

MARK = "arg_reduce_general"


def steps(ks, window):
    """Kernel lists of whole steps. With `window` the log holds only
    profiled decode steps (decode-bench --profile), all of them kept."""
    out, cur, seen = [], [], window
    for k in ks:
        cur.append(k)
        if MARK in k[0]:
            if seen:
                out.append(cur)
            seen, cur = True, []
    if window:
        return out
    return out[2:] if len(out) > 3 else out


def main():
    args = sys.argv[1:]
    top = 14
    window = "--window" in args
    each = "--each" in args
    args = [a for a in args if a not in ("--window", "--each")]
    if "--top" in args:
        i = args.index("--top")
        top = int(args[i + 1])
        del args[i : i + 2]
    for path in args:
        st = steps(kernels(path), window)
        if not st:
            print(f"{path}: no decode steps found")
            continue
        totals = [sum(k[2] for k in s) for s in st]
        mid = sorted(range(len(st)), key=lambda i: totals[i])[len(st) // 2]
        print(f"### {path}")
        print(
            f"{len(st)} steps; median step {totals[mid] / 1e3:.0f} us of GPU time in {len(st[mid])} kernels"
            f" (all steps: {min(totals) / 1e3:.0f}-{max(totals) / 1e3:.0f} us,"
            f" mean {statistics.mean(totals) / 1e3:.0f})"
        )
        for i in range(len(st)) if each else [mid]:
            if each:
                print(f"\nstep {i + 1}: {totals[i] / 1e3:.0f} us of GPU time in {len(st[i])} kernels")
            table(st[i], totals[i], top)
        print()


def table(step, total, top):
    """One step's kernels grouped by name and grid, as a Markdown table."""
    groups = defaultdict(lambda: [0, 0.0, 0.0])
    for name, grid, ns, nbytes in step:
        g = groups[(short_name(name), grid)]
        g[0] += 1
        g[1] += ns
        g[2] += nbytes
    print("| kernel | grid | calls | us | share | MB read | GB/s |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for (name, grid), (n, ns, nbytes) in sorted(groups.items(), key=lambda kv: -kv[1][1])[:top]:
        bw = f"{nbytes / ns:.0f}" if nbytes and ns else ""
        mb = f"{nbytes / 1e6:.1f}" if nbytes else ""
        print(f"| `{name}` | {grid} | {n} | {ns / 1e3:.1f} | {100 * ns / total:.1f}% | {mb} | {bw} |")


if __name__ == "__main__":
    main()
