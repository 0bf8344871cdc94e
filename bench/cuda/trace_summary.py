"""Summarises HEARTH_STEP_TRACE files: decode-only step time by batch size,
then the steps that read prompts, split into their parts (src/scheduler/trace.rs)."""
import lzma
import statistics
import sys

PARTS = ["prefill_us", "first_tokens_us", "decode_us", "deliver_us", "cache_mb"]
HOST = ["cpu_us", "preempted", "cpu", "burst", "sys_us", "waits", "faults", "queue_us"]
# Per-step means in the burst table, where the trace has them (newer traces:
# the kernel's share of the CPU time, blocks, page faults, and the part of
# decode_us in MLX's eval call, the rest being graph building).
EXTRA = ["sys_us", "waits", "faults", "queue_us"]


def pct(values, q):
    return values[min(len(values) - 1, int(q * len(values)))]


def read_trace(path):
    """(header, rows): the trace's column names and its lines as dicts of
    ints (lines of the wrong width dropped); `.xz` files are read as such."""
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        lines = [line.rstrip("\n").split("\t") for line in f]
    header = lines[0]
    return header, [dict(zip(header, map(int, r))) for r in lines[1:] if len(r) == len(header)]


def decode_bursts(rows, min_steps=20):
    """{burst: its decode-only steps}, for bursts of at least `min_steps`."""
    bursts = {}
    for r in rows:
        if r["prefill_tokens"] == 0 and r["decode_rows"] > 0:
            bursts.setdefault(r["burst"], []).append(r)
    return {b: g for b, g in bursts.items() if len(g) >= min_steps}


def summarise(path):
    header, rows = read_trace(path)
    print(f"== {path}: {len(rows)} steps")
    print("rows  steps  step_us p50   mean    p99     max   gap_us p50  mean  >50ms")
    by_rows = {}
    for r in rows:
        if r["prefill_tokens"] == 0:
            by_rows.setdefault(r["decode_rows"], []).append((r["step_us"], r["gap_us"]))
    for decode in sorted(by_rows):
        steps = sorted(x[0] for x in by_rows[decode])
        gaps = sorted(x[1] for x in by_rows[decode])
        slow = sum(1 for x in steps if x > 50_000)
        print(
            f"{decode:4d} {len(steps):6d}  {pct(steps, .5):11d} {int(statistics.mean(steps)):6d}"
            f" {pct(steps, .99):7d} {steps[-1]:7d}  {pct(gaps, .5):10d} {int(statistics.mean(gaps)):5d}  {slow:5d}"
        )
    cols = ["t_us", "step_us", "gap_us", "decode_rows", "prefill_tokens", "span"]
    cols += [c for c in PARTS + HOST if c in header]
    print("slowest steps:", " ".join(cols))
    for r in sorted(rows, key=lambda r: -r["step_us"])[:8]:
        print("   ", *(r[c] for c in cols))
    if "prefill_us" not in header:
        return
    # Steps with prompt tokens: is the first step of a burst (empty buffer
    # cache) the slow one, and which part of it?
    pre = [r for r in rows if r["prefill_tokens"] > 0]
    for label, group in [
        ("cache empty (<16 MiB)", [r for r in pre if r["cache_mb"] < 16]),
        ("cache warm", [r for r in pre if r["cache_mb"] >= 16]),
    ]:
        if not group:
            continue
        print(f"prompt steps, {label}: {len(group)}; p50 / max us:", end="")
        for c in ["step_us", "prefill_us", "first_tokens_us", "decode_us", "deliver_us"]:
            v = sorted(r[c] for r in group)
            print(f"  {c} {pct(v, .5)} / {v[-1]}", end="")
        tok = sorted(r["prefill_tokens"] for r in group)
        print(f"  tokens p50 {pct(tok, .5)}")
    if "burst" not in header:
        return
    # Burst by burst (one bench request batch each, in order): is a slow
    # repeat slow in every step, and did the engine thread compute (cpu_us),
    # wait for the device (deliver_us) or lose its core (preempted, cpus)?
    extra = [c for c in EXTRA if c in header]
    print(
        "bursts: burst steps rows_p50  step_us p50  mean   decode_us  deliver_us  cpu_us  preempted  cpus"
        + "".join(f"  {c}" for c in extra)
    )
    bursts = decode_bursts(rows)
    for b in sorted(bursts):
        g = bursts[b]
        step = sorted(r["step_us"] for r in g)
        rws = sorted(r["decode_rows"] for r in g)
        mean = lambda c: int(statistics.mean(r[c] for r in g))
        cpus = sorted({r["cpu"] for r in g})
        print(
            f"   {b:5d} {len(g):5d} {pct(rws, .5):8d}  {pct(step, .5):11d} {int(statistics.mean(step)):6d}"
            f" {mean('decode_us'):10d} {mean('deliver_us'):11d} {mean('cpu_us'):7d}"
            f" {sum(r['preempted'] for r in g):10d}  {','.join(map(str, cpus))}"
            + "".join(f"  {statistics.mean(r[c] for r in g):.1f}" for c in extra)
        )


if __name__ == "__main__":
    for path in sys.argv[1:]:
        summarise(path)
