"""Compiles Hearth's CUDA kernels (models/src/cuda_gemv.rs, cuda_attn.rs, cuda_qk.rs,
cuda_norm.rs, cuda_delta.rs, cuda_moe.rs, cuda_swiglu.rs, cuda_experts.rs) with NVRTC the way
MLX's custom-kernel API does, for sm_90a, without a GPU: catches compile
errors before a device call and prints ptxas' register/spill report.

Needs the wheels nvidia-cuda-nvrtc, nvidia-cuda-runtime, nvidia-cuda-cccl (13.x)
and mlx-cuda-13==0.32.2 unpacked into one folder (SITE):
    pip download --no-deps --only-binary=:all: --python-version 3.12 \
        --platform manylinux_2_35_x86_64 --platform manylinux_2_17_x86_64 -d W \
        'nvidia-cuda-nvrtc==13.*' 'nvidia-cuda-runtime==13.*' 'nvidia-cuda-cccl==13.*' mlx-cuda-13==0.32.2
    for f in W/*.whl; do unzip -qo $f -d SITE; done
    LD_LIBRARY_PATH=SITE/nvidia/cu13/lib python3 bench/cuda/nvrtc_check.py SITE [CUBIN_DIR]
(NVRTC_ONLY=REGEX compiles only the kernels whose name matches; NVRTC loads libnvrtc-builtins from the library path.)
MLX embeds its device headers in libmlx: SITE/mlxsrc must hold MLX's source tree
(its `mlx/` folder) at the wheel's version.
"""
import ctypes
import os
import pathlib
import re
import sys

site = pathlib.Path(sys.argv[1])
srcdir = pathlib.Path(__file__).resolve().parents[2] / "models/src"
sources = {f: (srcdir / f).read_text() for f in ["cuda_gemv.rs", "cuda_attn.rs", "cuda_qk.rs", "cuda_norm.rs", "cuda_delta.rs", "cuda_moe.rs", "cuda_swiglu.rs", "cuda_experts.rs"]}


def const(file, name):
    m = re.search(rf'const {name}: &str = r#"(.*?)"#;', sources[file], re.S)
    if not m:
        sys.exit(f"{file}: no const {name}")
    return m.group(1)


GEMV = "const {T}* x, const {T}* w, const int32_t* dims, {T}* y"
ATTN_IN = "const {T}* q, const {T}* k, const {T}* v, const int32_t* lens, const int32_t* dims, "
# (kernel name, body, header, signature, constants per compiled variant):
# the variants MLX compiles (gemv: ROWS per route; attention: D per head size)
kernels = [
    ("hearth_gemv", const("cuda_gemv.rs", "SOURCE"), "", GEMV,
     [f"constexpr int ROWS = {r}; constexpr int NW = 8;" for r in range(1, 9)]),
    ("hearth_gemv_mma", const("cuda_gemv.rs", "MMA_SOURCE"), const("cuda_gemv.rs", "MMA_HEADER"), GEMV,
     [f"constexpr int ROWS = {r}; constexpr int NW = 8;" for r in range(1, 17)]),
    ("hearth_gemv_mmas", const("cuda_gemv.rs", "MMAS_SOURCE"),
     const("cuda_gemv.rs", "MMA_HEADER") + const("cuda_gemv.rs", "STREAM_HEADER"), GEMV,
     [f"constexpr int ROWS = {r}; constexpr int NW = {nw}; constexpr int D = {d}; constexpr int PF = {pf};"
      for r in (1, 2, 4, 8, 9, 16) for nw, d, pf in ((4, 4, 0), (8, 4, 0), (4, 2, 0), (4, 8, 0), (4, 4, 1))]),
    ("hearth_gemv_warp4", const("cuda_gemv.rs", "WARP4_SOURCE"), const("cuda_gemv.rs", "STREAM_HEADER"), GEMV,
     [f"constexpr int ROWS = {r}; constexpr int NW = 8; constexpr int C = 4;" for r in range(1, 9)]),
    ("hearth_attn", const("cuda_attn.rs", "SOURCE"), const("cuda_attn.rs", "HEADER"),
     ATTN_IN + "{T}* out", [f"constexpr int D = {d}; constexpr int NTH = {nth};" for d in (64, 128, 256) for nth in (128, 256, 512)]),
    ("hearth_attn_part", const("cuda_attn.rs", "PARTIAL_SOURCE"), const("cuda_attn.rs", "HEADER"),
     ATTN_IN + "float* o_part, float* ml_part", [f"constexpr int D = {d}; constexpr int NTH = {nth};" for d in (64, 128, 256) for nth in (128, 256, 512)]),
    ("hearth_attn_combine", const("cuda_attn.rs", "COMBINE_SOURCE"), "",
     "const float* o_part, const float* ml_part, const int32_t* dims, {T}* out",
     [f"constexpr int D = {d}; constexpr int NTH = {nth};" for d in (64, 128, 256) for nth in (128, 256, 512)]),
    ("hearth_qk", const("cuda_qk.rs", "SOURCE"), "",
     "const {T}* qkv, const {T}* qw, const {T}* kw, const float* inv, const int32_t* pos, "
     "const int32_t* dims, {T}* q_out, {T}* k_out, {T}* v_out",
     [f"constexpr int D = {d}; constexpr int R = {r}; constexpr int NORM = {n}; constexpr int NW = 4;"
      for d in (64, 128, 256) for r in sorted({d, d // 4}) for n in (0, 1)]),
    # hidden sizes of the models we serve (SmolLM2, Qwen3 0.6B-32B, Qwen3.5 MoE) and the extremes
    ("hearth_add_norm", const("cuda_norm.rs", "SOURCE"), "",
     "const {T}* x, const {T}* r, const {T}* w, const int32_t* dims, {T}* h_out, {T}* n_out",
     [f"constexpr int H = {h}; constexpr int NT = {min(256, -(-h // 8 // 32) * 32)};"
      for h in (8, 576, 1024, 2048, 2560, 4096, 5120, 16384)]),
    ("hearth_swiglu_joined", const("cuda_swiglu.rs", "SOURCE"), "",
     "const {T}* y, const int32_t* dims, {T}* out", [""]),
    # Qwen3.5's DeltaNet shape (16 key heads, 32 value heads, 128 wide, kernel 4) and a small odd one
    ("hearth_delta_step", const("cuda_delta.rs", "SOURCE"), const("cuda_delta.rs", "HEADER"),
     "const {T}* proj, const {T}* conv, const {T}* taps, const {T}* dt_bias, const float* neg_a, "
     "const float* ssm, const {T}* nw, const int32_t* dims, {T}* y_out, {T}* conv_out, float* ssm_out",
     [f"constexpr int HK = {hk}; constexpr int HV = {hv}; constexpr int DK = {dk}; constexpr int DV = {dv}; "
      f"constexpr int KS = {ks}; constexpr int W = {2*hk*dk + 2*hv*dv + 2*hv}; constexpr int NT = {-(-max(dk, dv) // 32) * 32 * p}; "
      f"constexpr int P = {p};"
      for hk, hv, dk, dv, ks, p in ((16, 32, 128, 128, 4, 4), (2, 6, 72, 40, 3, 4), (1, 2, 127, 128, 4, 1))]),
    # MoE router (Qwen3.5: 256 experts, top 8; Qwen3-30B: 128; a small and the largest) and combine
    ("hearth_moe_route", const("cuda_moe.rs", "ROUTE_SOURCE"), const("cuda_moe.rs", "ROUTE_HEADER"),
     "const {T}* logits, uint32_t* inds, {T}* scores",
     [f"constexpr int E = {e}; constexpr int K = {k}; constexpr int NT = 256; constexpr int NORM = {n};"
      for e, k in ((256, 8), (128, 8), (16, 4), (2048, 32)) for n in (0, 1)]),
    ("hearth_moe_combine", const("cuda_moe.rs", "COMBINE_SOURCE"), "",
     "const {T}* y, const {T}* scores, const {T}* shared, const {T}* sgate, {T}* out",
     [f"constexpr int K = {k}; constexpr int H = {h}; constexpr int SHARED = {s};"
      for k, h in ((8, 2048), (8, 4096)) for s in (0, 1)]),
    # MoE experts (Qwen3.5-35B-A3B: 256 experts, top 8, hidden 2048, expert width 512; Qwen3-30B-A3B: 128, 2048, 768):
    # the gate/up+SwiGLU kernel (GLU=1, C=4) and the down kernel (GLU=0, C=8), each in its
    # decode form (a list of MAXP=16 token rows) and its prompt form (4096), 4 pairs a pass
    ("hearth_experts", const("cuda_experts.rs", "SOURCE"), const("cuda_gemv.rs", "STREAM_HEADER"),
     "const {T}* x, const uint32_t* inds, const {T}* wg, const {T}* wu, const int32_t* dims, {T}* y",
     [f"constexpr int E = {e}; constexpr int K = 8; constexpr int H = {h}; constexpr int O = {o}; "
      f"constexpr int C = {c}; constexpr int NW = 8; constexpr int MAXP = {maxp}; constexpr int PCH = 4; "
      f"constexpr int GLU = {g}; constexpr int XPAIR = {1 - g};"
      for e, hid, mid in ((256, 2048, 512), (128, 2048, 768))
      for g, h, o, c in ((1, hid, mid, 4), (0, mid, hid, 8))
      for maxp in (16, 4096)]),
]
cu = site / "nvidia/cu13"
nvrtc = ctypes.CDLL(str(next((cu / "lib").glob("libnvrtc.so*"))))
includes = [site / "mlxsrc", site / "mlx/include", site / "mlx/include/cccl", cu / "include", cu / "include/cccl", cu / "cccl"]
failed = 0
dump = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else None
only = re.compile(os.environ.get("NVRTC_ONLY", ""))  # e.g. NVRTC_ONLY=gemv_warp4
for name, body, header, signature, variants in kernels:
    if not only.search(name):
        continue
    for dtype in ["__nv_bfloat16", "__half"]:
        for consts in variants:
            tag = "_".join(f"{n}_{v}" for n, v in re.findall(r"int (\w+) = (\d+)", consts))
            fn = f"custom_kernel_{name}_{dtype}_{tag}"
            text = (
                '#include "mlx/backend/cuda/device/utils.cuh"\n#include <cooperative_groups.h>\n'
                + header
                + "namespace mlx::core::cu {\nnamespace cg = cooperative_groups;\n"
                + f"__global__ void {fn}({signature.format(T=dtype)}) {{\n"
                + f"  using T = {dtype};\n  {consts}\n"
                + body
                + "\n}\n}\n"
            )
            prog = ctypes.c_void_p()
            assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), text.encode(), b"k.cu", 0, None, None) == 0
            args = [b"--device-as-default-execution-space", b"--gpu-architecture=sm_90a", b"--ptxas-options=-v"]
            args += [f"--include-path={p}".encode() for p in includes if p.exists()]
            argv = (ctypes.c_char_p * len(args))(*args)
            rc = nvrtc.nvrtcCompileProgram(prog, len(args), argv)
            size = ctypes.c_size_t()
            nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value + 1)
            nvrtc.nvrtcGetProgramLog(prog, log)
            text_log = log.value.decode(errors="replace")
            usage = [l.strip() for l in text_log.splitlines() if "registers" in l or "spill" in l]
            status = "ok" if rc == 0 else f"FAILED ({rc})"
            failed += rc != 0
            print(f"{name} {dtype} {tag}: {status}; {' | '.join(usage)}")
            if rc != 0:
                print(text_log)
                sys.exit(1)
            if dump:  # the cubin, for cuobjdump --dump-sass
                dump.mkdir(parents=True, exist_ok=True)
                n = ctypes.c_size_t()
                nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(n))
                buf = ctypes.create_string_buffer(n.value)
                nvrtc.nvrtcGetCUBIN(prog, buf)
                (dump / f"{fn}.cubin").write_bytes(buf.raw)
print("all compiled" if not failed else f"{failed} failed")
