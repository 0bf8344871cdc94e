#!/usr/bin/env python3
"""Memory behaviour of the small-batch GEMV kernels and MLX's matmul.

    ncu_gemv.py LOG.csv[.xz]

LOG is `ncu --csv --metrics ...` of `hearth dev gemv-bench --no-check`
(bench/cuda/h200.sh, H200_NCU_GEMV). Launches are grouped in launch order by
kernel name and grid (gemv-bench times one product after another, so a
group is one kernel on one shape and row count); groups that read under
1 MB from DRAM (the bench's adds, random weights) are left out. Printed per
group: launches, then the median of each metric: GPU time, DRAM bytes read
and the bandwidth, L2 bytes moved (all traffic through L2, so loads that
hit there too: the activations every block re-reads), L1 and L2 hit rates,
active warps, registers and the occupancy limit they set.
"""
import statistics
import sys

from ncu_steps import BYTES, SCALE, csv_rows


def launches(path):
    """[(name, grid, {metric: value})] in launch order, values in ns/bytes."""
    by_id = {}
    for row in csv_rows(path):
        name, grid, metrics = by_id.setdefault(
            row["ID"], (row["Kernel Name"], row.get("Grid Size", ""), {})
        )
        text = row["Metric Value"].replace(",", "")
        try:
            value = float(text or 0)
        except ValueError:
            continue
        unit = row.get("Metric Unit", "")
        metrics[row["Metric Name"]] = value * SCALE.get(unit, BYTES.get(unit, 1.0))
    return [by_id[i] for i in sorted(by_id, key=int)]


def label(name):
    """The kernel's name without its parameter list (template arguments
    kept: they hold the row count)."""
    return name.split("(")[0].strip()[:60]


def groups(ls):
    out = []
    for name, grid, m in ls:
        if out and out[-1][0] == name and out[-1][1] == grid:
            out[-1][2].append(m)
        else:
            out.append((name, grid, [m]))
    return out


def main():
    cols = [
        ("us", "gpu__time_duration.sum", 1e-3, "{:.1f}"),
        ("DRAM MB", "dram__bytes_read.sum", 1e-6, "{:.1f}"),
        ("L2 MB", "lts__t_bytes.sum", 1e-6, "{:.1f}"),
        ("L1 hit %", "l1tex__t_sector_hit_rate.pct", 1, "{:.0f}"),
        ("L2 hit %", "lts__t_sector_hit_rate.pct", 1, "{:.0f}"),
        ("warps %", "sm__warps_active.avg.pct_of_peak_sustained_active", 1, "{:.0f}"),
        ("regs", "launch__registers_per_thread", 1, "{:.0f}"),
        ("blocks/SM (regs)", "launch__occupancy_limit_registers", 1, "{:.0f}"),
    ]
    for path in sys.argv[1:]:
        print(f"### {path}")
        print("| kernel | grid | n | " + " | ".join(c[0] for c in cols) + " | DRAM GB/s |")
        print("|---|---|---:|" + "---:|" * (len(cols) + 1))
        for name, grid, ms in groups(launches(path)):
            med = {
                key: statistics.median(m.get(key, float("nan")) for m in ms)
                for _, key, _, _ in cols
            }
            dram = med["dram__bytes_read.sum"]
            if not dram >= 1e6:
                continue
            cells = [fmt.format(med[key] * scale) for _, key, scale, fmt in cols]
            gbps = dram / med["gpu__time_duration.sum"]
            print(f"| {label(name)} | {grid} | {len(ms)} | " + " | ".join(cells) + f" | {gbps:.0f} |")


if __name__ == "__main__":
    main()
