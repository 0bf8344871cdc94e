"""MLX's CPU quantized product against the same weights as dense float32.

One matrix of SmolLM2-135M's shape (576 in, 1536 out, 4-bit, group 32,
float16 scales like its GGUF), float32 activations, at several row counts:
`mx.quantized_matmul` against `x @ W.T` with W dequantized once to float32.
The dense product goes through whichever BLAS libmlx resolves: run it twice,
once as is and once with Debian's OpenBLAS preloaded, to see both
(docs/mlx-on-linux.md, "CPU speed"):

    .venv/bin/python bench/cpu_quantized_matmul.py
    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 \\
        OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/cpu_quantized_matmul.py
"""

import argparse
import time

import mlx.core as mx


def timed(f, calls):
    mx.eval(f())
    t = time.perf_counter()
    for _ in range(calls):
        mx.eval(f())
    return (time.perf_counter() - t) / calls * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,8,256")
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    mx.set_default_device(mx.cpu)
    k, n = 576, 1536
    w = mx.random.normal((n, k), key=mx.random.key(0)).astype(mx.float16)
    wq, scales, biases = mx.quantize(w, group_size=32, bits=4)
    dense = mx.dequantize(wq, scales.astype(mx.float32), biases.astype(mx.float32), group_size=32, bits=4)
    print("| rows | quantized ms | dense float32 ms | quantized / dense |")
    print("|---:|---:|---:|---:|")
    for m in (int(r) for r in args.rows.split(",")):
        x = mx.random.normal((m, k), key=mx.random.key(1))
        mx.eval(wq, scales, biases, dense, x)
        q = timed(lambda: mx.quantized_matmul(x, wq, scales, biases, transpose=True, group_size=32, bits=4), args.calls)
        d = timed(lambda: x @ dense.T, args.calls)
        print(f"| {m} | {q:.2f} | {d:.2f} | {q / d:.1f}x |")


if __name__ == "__main__":
    main()
