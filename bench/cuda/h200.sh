#!/usr/bin/env bash
# Hearth vs mlx_lm.server on MLX's CUDA backend (one NVIDIA H200), same run,
# same dummy checkpoint, same client (`hearth bench --compare`, alternating).
#
# Device calls on one warm machine, each carrying the tracked tree too, all
# within 64 MiB a call. The CUDA wheel (90 MB for 0.32.4) travels repacked as
# tar.xz (75 MB), split into parts sized to what each call has room for:
#   0. bench/cuda/h200.sh prepare   (here)  builds .device/stash1 (mlx and
#      mlx-lm wheels, tokenizers, first part), .device/stash2.. if needed,
#      and .device/run (binary, checksum, the last part where it fits);
#      it prints the calls to make
#   1. device run, carry [.device/stashN]: bash bench/cuda/h200.sh stash
#      for each stash folder (the parts and tokenizers stay in /root/stash
#      while the machine is held)
#   2. device run, carry [.device/run]:    bash bench/cuda/h200.sh run
#      (env: H200_MODELS="name:arch:shape[:tokdir];...", H200_CONC, H200_REPEATS,
#      H200_VARIANTS="name:ENV=V,ENV=V;..." Hearth servers measured side by side;
#      write HEARTH_CUDA_GEMV route lists with '+' there, e.g. warp:2-2+mma:3-16:32;
#      H200_DECODE_MODELS / H200_DECODE_BENCH: in-process decode-bench per model
#      and variant (H200_DECODE_ARGS: its extra arguments, e.g. --gemv lists;
#      H200_DECODE_PREFIX: a command in front, e.g. taskset -c 0-3);
#      H200_SWEEP_MODELS: the models whose servers are measured (default all);
#      H200_PEER=0: no mlx_lm.server in the sweep (an A/B of Hearth variants);
#      H200_SERVE_ARGS: extra `hearth serve` arguments for every Hearth server
#      (e.g. --mlx-cache-mb 8192, so several servers share an 80 GB GPU);
#      H200_NCU_DECODE: models whose decode step is profiled with Nsight
#      Compute (decode-bench at H200_NCU_ROWS="1 2 8", per H200_NCU_VARIANTS;
#      a variant's NCU_ROWS=... sets its own row counts; none starts after
#      H200_NCU_UNTIL seconds, default 240, so the sweeps keep their time;
#      H200_NCU_ARGS: ncu arguments instead of the metric list, e.g.
#      "--section SpeedOfLight --kernel-name regex:gemv_mma --launch-count 3");
#      H200_NCU_PREFILL: models whose prompt passes are profiled (one prompt,
#      then H200_NCU_PREFILL_SHAPE="PROMPTSxTOKENS", default 7x136, batched);
#      H200_PREFILL_BENCH: models to run `hearth dev prefill-bench` on, at
#      H200_PREFILL_SHAPES="PROMPTSxTOKENS ..." (default 7x136 16x136 2x512),
#      per H200_PREFILL_VARIANTS="name:ENV=V;..." (default hearth:), with
#      H200_PREFILL_ARGS (e.g. --new-lengths: a new prompt length each round;
#      a variant's ARGS=... sets its own);
#      H200_GEMV_ARGS: gemv-bench's arguments; H200_NCU_GEMV: the same under
#      Nsight Compute (memory metrics, bench/cuda/ncu_gemv.py);
#      H200_ATTN_BENCH=0 / H200_GEMV_BENCH=0
#      skip the kernel benches)
#   or: bash bench/cuda/h200.sh sanitize  (compute-sanitizer memcheck over
#      decode-bench, prefill-bench and a server; H200_SANITIZE models,
#      H200_SAN_PARTS, H200_SAN_ARGS e.g. "--kernel-name kns=hearth_")
#   or: bash bench/cuda/h200.sh pressure  (another process fills the GPU
#      while a server idles: the memory guard against none)
#   or: bash bench/cuda/h200.sh profile  (in-process decode + Nsight Compute
#      kernel lists, Hearth vs mlx-lm; env PROFILE_VARIANTS="name:ENV=V,..  ...")
# Results land in $OUT (Markdown + logs; raw.tar holds the bench JSON, step
# traces, nvidia-smi and vmstat samples and Nsight CSVs); copy them to bench/results/.
#
# The Hearth binary is the one built here on Debian 12 (linked against the
# mlx-cpu wheel's libmlx.so); on the device LD_LIBRARY_PATH points it at the
# mlx-cuda-13 wheel's libmlx.so instead (same MLX version, same symbols).
set -euo pipefail
cd "$(dirname "$0")/../.."
phase=${1:?prepare|stash|run}
# MLX's version, for the CUDA wheel and mlx-lm's peer: scripts/requirements-linux.txt's
# (the binary's mlx-c is built against that wheel's headers); mlx-lm's: scripts/requirements.txt's.
MLXV=$(sed -n 's/^mlx-cpu==//p' scripts/requirements-linux.txt)
MLXLMV=$(sed -n 's/^mlx-lm==//p' scripts/requirements.txt)
[[ -n $MLXV && -n $MLXLMV ]] || { echo "no mlx-cpu or mlx-lm pin in scripts/requirements*.txt" >&2; exit 1; }
WHEEL=mlx_cuda_13-$MLXV-py3-none-manylinux_2_35_x86_64.whl
STASH=/root/stash

# A Hearth variant "name:ENV=V,ENV=V" -> $vname and the array $envs.
variant() {
  IFS=':' read -r vname venv <<< "$1"
  envs=(); [[ -n $venv ]] && IFS=',' read -ra envs <<< "$venv"
  return 0
}

# A model spec "name:arch:shape[:tokenizer-dir]" -> $name and $tokdir, and
# its dummy checkpoint (bf16, seed 1) written to /tmp/$name (after setup).
dummy_model() {
  IFS=':' read -r name arch shape tokdir <<< "$1"
  tokdir=${tokdir:-/tmp/tok}
  $H dev dummy-model --arch "$arch" --shape "$shape" --dtype bf16 --seed 1 \
      --tokenizer "$tokdir/tokenizer.json" --out "/tmp/$name"
  stamp "$name: dummy model written"
}

# Unpack the CUDA wheel, mlx-lm and the Hearth binary on the device.
setup() {
  mkdir -p $STASH
  cp .device/run/payload.part* $STASH/ 2>/dev/null || true
  cat $STASH/payload.part* > /tmp/mlx-cuda.tar.xz
  echo "$(cat .device/run/payload.sha256)  /tmp/mlx-cuda.tar.xz" | sha256sum -c \
    || { echo "the wheel's parts are incomplete: make every stash call prepare printed first" >&2; exit 1; }
  # pip first (it skips a top-level folder that is already there), then the
  # CUDA wheel's files on top (mlx/lib, mlx/include beside the bindings).
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
      $STASH/mlx-$MLXV-cp312-*.whl $STASH/mlx_lm-$MLXLMV-*.whl
  xz -dc /tmp/mlx-cuda.tar.xz | tar -x -C /tmp/site
  ln -sfn /opt/torch/.venv/lib/python3.12/site-packages/nvidia /tmp/site/nvidia
  export PYTHONPATH=/tmp/site LD_LIBRARY_PATH=/tmp/site/mlx/lib CUDA_HOME=/tmp/site/nvidia/cu13
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  # mlx_lm.server's /v1/models scans the HF cache and fails if it is missing.
  mkdir -p /tmp/hfcache && export HF_HUB_CACHE=/tmp/hfcache HF_HUB_OFFLINE=1
  stamp() { echo "[$SECONDS s] $*"; }
  mkdir -p /tmp/tok && xz -dc $STASH/tokenizer.json.xz > /tmp/tok/tokenizer.json
  cp $STASH/tokenizer_config.json /tmp/tok/
  if [[ -f $STASH/tokenizer35.json.xz ]]; then
    mkdir -p /tmp/tok35 && xz -dc $STASH/tokenizer35.json.xz > /tmp/tok35/tokenizer.json
    cp $STASH/tokenizer35_config.json /tmp/tok35/tokenizer_config.json
  fi
  xz -dc .device/run/hearth.xz > /tmp/hearth && chmod +x /tmp/hearth
  H=/tmp/hearth
  ldd $H | grep -E "mlx|not found" || true
}

case "$phase" in
prepare)
  rm -rf .device/stash* .device/run
  mkdir -p .whl .device/stash1 .device/run
  [[ -f .whl/$WHEEL ]] || python3 -m pip download -q --no-deps --only-binary=:all: \
      --python-version 3.12 --implementation cp --platform manylinux_2_35_x86_64 \
      --platform manylinux_2_17_x86_64 -d .whl mlx==$MLXV mlx-cuda-13==$MLXV mlx-lm==$MLXLMV
  # The wheel's files as tar.xz: 75 MB against the wheel's 90 (xz -9 on one
  # core, a few minutes; kept in .whl for the next prepare).
  TXZ=.whl/mlx_cuda_13-$MLXV.tar.xz
  if [[ ! -f $TXZ ]]; then
    rm -rf .whl/unpack && mkdir .whl/unpack
    (cd .whl/unpack && python3 -m zipfile -e "../$WHEEL" .)
    tar -C .whl/unpack -cf - . | xz -9 -T1 > "$TXZ.tmp" && mv "$TXZ.tmp" "$TXZ"
    rm -rf .whl/unpack
  fi
  sha256sum "$TXZ" | cut -d' ' -f1 > .device/run/payload.sha256
  strip -o .device/run/hearth target/release/hearth
  xz -f .device/run/hearth
  cp .whl/mlx-$MLXV-cp312-*.whl .whl/mlx_lm-$MLXLMV-*.whl .device/stash1/
  xz -c .hearth/fixtures/qwen3-tokenizer/tokenizer.json > .device/stash1/tokenizer.json.xz
  cp .hearth/fixtures/qwen3-tokenizer/tokenizer_config.json .device/stash1/
  if [[ -d .hearth/fixtures/qwen3.5-tokenizer ]]; then  # for qwen3_5* models: /tmp/tok35
    xz -c .hearth/fixtures/qwen3.5-tokenizer/tokenizer.json > .device/stash1/tokenizer35.json.xz
    cp .hearth/fixtures/qwen3.5-tokenizer/tokenizer_config.json .device/stash1/tokenizer35_config.json
  fi
  # What a call has room for: 64 MiB less the tree that travels with it
  # (tracked and untracked-not-ignored files) and 256 KiB to spare, all
  # counted as disk blocks (the device tool counts more than the files'
  # bytes: 66.9 MB of bytes was refused, 68.3 MB of blocks).
  bytes() { du -c -B1 "$@" | tail -1 | cut -f1; }
  tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -c -B1 2>/dev/null \
    | awk '$2 == "total" { t += $1 } END { print t + 0 }')
  room=$(( 64 * 1024 * 1024 - tree - 256 * 1024 ))
  total=$(bytes "$TXZ"); off=0; part=1; d=1
  free=$(( room - $(bytes .device/stash1) ))
  while (( off < total )); do
    left=$(( total - off ))
    if (( left <= room - $(bytes .device/run) )); then  # the rest rides with the run
      dir=.device/run n=$left
    else
      dir=.device/stash$d n=$(( left < free ? left : free )); d=$(( d + 1 )); free=$room
      (( n > 0 )) || { echo "no room for the wheel beside the tree ($tree bytes)" >&2; exit 1; }
    fi
    mkdir -p $dir
    dd if="$TXZ" of=$dir/payload.part$(printf %02d $part) bs=1M skip=$off count=$n \
      iflag=skip_bytes,count_bytes status=none
    off=$(( off + n )); part=$(( part + 1 ))
  done
  du -sh .device/stash* .device/run
  echo "calls, one warm machine, back to back:"
  for s in .device/stash*; do echo "  carry [$s]: bash bench/cuda/h200.sh stash"; done
  echo "  carry [.device/run]: bash bench/cuda/h200.sh run   (or sanitize, pressure, profile)"
  ;;
stash)
  # Whichever stash folders this call carried (a stale part from an older
  # prepare fails setup's checksum).
  mkdir -p $STASH
  for d in .device/stash*; do
    [[ -d $d ]] && cp $d/* $STASH/
  done
  ls -la $STASH
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  ;;
run)
  exec > >(tee "$OUT/h200.log") 2>&1
  setup

  # Copy bandwidth (bytes read + written) through MLX, for the decode bound.
  python3 - <<'EOF' | tee "$OUT/bandwidth.txt"
import time, mlx.core as mx
a = mx.random.normal((1 << 30,), dtype=mx.bfloat16); mx.eval(a)
for _ in range(3): b = a + 1; mx.eval(b)
t = time.perf_counter(); n = 10
for _ in range(n): b = a + 1; mx.eval(b)
dt = (time.perf_counter() - t) / n
print(f"copy_bandwidth_GBps {2 * a.nbytes / dt / 1e9:.0f}")
print("device", mx.default_device())
EOF
  # Where the GPU sits relative to the CPUs (per-process placement noise).
  { nvidia-smi topo -m; lscpu | grep -i -E "numa|^cpu\(s\)|model name|per core|per socket"; } 2>&1 | tee -a "$OUT/bandwidth.txt" || true

  stamp "installed"
  # Do the VM's CPUs slow each other down (siblings of one host core)? A
  # busy loop's rate on CPU 0 while a spinning shell runs on CPU k, against
  # none (an idle MLX CUDA process spins one thread: docs/cuda.md).
  [[ ${H200_CPU_PROBE:-1} == 1 ]] && python3 - <<'EOF' | tee -a "$OUT/bandwidth.txt"
import os, subprocess, time
os.sched_setaffinity(0, {0})
def rate():
    n, end = 0, time.perf_counter() + 0.3
    while time.perf_counter() < end:
        n += 1
    return n
base = [rate() for _ in range(3)]
res = []
for k in range(1, os.cpu_count()):
    p = subprocess.Popen(["taskset", "-c", str(k), "sh", "-c", "while :; do :; done"])
    time.sleep(0.05)
    res.append((k, rate() / max(base)))
    p.kill(); p.wait()
res.append(("none", rate() / max(base)))
print("cpu 0 busy-loop rate with a spinner on cpu k (1.00 = alone):",
      " ".join(f"{k}:{x:.2f}" for k, x in res))
EOF
  # Does a small batch cost more than one row in MLX's CUDA matmul? (the
  # batch-1 -> batch-2 step-time jump seen for both servers)
  # (appended to bandwidth.txt: at most 8 files come back from a device call)
  python3 - <<'EOF' | tee -a "$OUT/bandwidth.txt"
import time, mlx.core as mx
for n, k in [(4096, 4096), (12288, 4096), (4096, 12288)]:
    w = mx.random.normal((n, k), dtype=mx.bfloat16); mx.eval(w)
    for m in [1, 2, 4, 8, 16, 64]:
        x = mx.random.normal((m, k), dtype=mx.bfloat16); mx.eval(x)
        for _ in range(5): mx.eval(x @ w.T)
        t = time.perf_counter(); r = 50
        for _ in range(r): y = x @ w.T; mx.eval(y)
        dt = (time.perf_counter() - t) / r
        print(f"x[{m},{k}] @ w[{n},{k}].T: {dt*1e6:.0f} us, {w.nbytes/dt/1e9:.0f} GB/s of weights")
EOF
  # Hearth's small-batch GEMV kernel against MLX's matmul (self-check + timings).
  # shellcheck disable=SC2086  # H200_GEMV_ARGS is a word list (e.g. --kernels mma,warp4 --rows 1,2,4)
  [[ ${H200_GEMV_BENCH:-1} == 1 ]] && { $H dev gemv-bench ${H200_GEMV_ARGS:-} 2>&1 | tee "$OUT/gemv.md" || true; }
  stamp "gemv bench done"
  # Nsight Compute on the GEMV kernels and MLX's matmul: DRAM and L2 bytes,
  # cache hit rates, occupancy (H200_NCU_GEMV: gemv-bench's arguments, e.g.
  # "--shapes 24576x4096 --rows 4,16"; the self-checks are skipped).
  if [[ -n ${H200_NCU_GEMV:-} ]]; then
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
    # shellcheck disable=SC2086  # H200_NCU_GEMV is a word list
    timeout "${H200_NCU_TIMEOUT:-150}" "$NCU" --clock-control none --cache-control all \
      --metrics "${H200_NCU_METRICS:-gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum,l1tex__t_sector_hit_rate.pct,lts__t_sector_hit_rate.pct,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__occupancy_limit_registers,launch__grid_size}" \
      --csv --log-file /tmp/ncu-gemv.csv $H dev gemv-bench --no-check --reps 3 $H200_NCU_GEMV \
      > /dev/null 2>&1 || echo "ncu gemv: exit $?"
    python3 bench/cuda/ncu_gemv.py /tmp/ncu-gemv.csv 2>&1 | tee "$OUT/ncu-gemv.md" || true
    mkdir -p /tmp/raw; xz -c /tmp/ncu-gemv.csv > /tmp/raw/ncu-gemv.csv.xz || true
    stamp "ncu gemv done"
  fi
  # In-process timings (one file: at most 8 come back): the one-token
  # attention kernel against MLX's SDPA, then per model the decode step by
  # row count without the server (H200_DECODE_BENCH="name:ENV=V;..." variants).
  [[ ${H200_ATTN_BENCH:-1} == 1 ]] && { timeout 120 $H dev attn-bench 2>&1 | tee "$OUT/inproc.md" || true; }
  stamp "attn bench done"
  # Models: "name:arch:shape[:tokenizer-dir]" separated by ';' (H200_MODELS).
  IFS=';' read -ra specs <<< "${H200_MODELS:-dense:qwen3:qwen3-8b}"
  for spec in "${specs[@]}"; do
    dummy_model "$spec"
    if [[ ",${H200_DECODE_MODELS:-dense}," == *",$name,"* ]]; then
      IFS=';' read -ra dvariants <<< "${H200_DECODE_BENCH:-hearth:;noattn:HEARTH_CUDA_ATTN=off}"
      for dv in "${dvariants[@]}"; do
        variant "$dv"
        echo "### decode-bench $name $vname" | tee -a "$OUT/inproc.md"
        # shellcheck disable=SC2086  # H200_DECODE_ARGS is a word list
        env "${envs[@]}" ${H200_DECODE_PREFIX:-} timeout 200 $H dev decode-bench --model "/tmp/$name" \
          ${H200_DECODE_ARGS:-} 2>/dev/null | tee -a "$OUT/inproc.md" || echo "decode-bench exit $?"
      done
      stamp "$name: decode bench done"
    fi
    # Where a decode step's GPU time goes, by kernel and weight matrix
    # (Nsight Compute, one run per variant and row count; bench/cuda/ncu_decode.py).
    if [[ ",${H200_NCU_DECODE:-}," == *",$name,"* ]]; then
      NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
      mkdir -p /tmp/ncu
      IFS=';' read -ra nvariants <<< "${H200_NCU_VARIANTS:-hearth:}"
      for nv in "${nvariants[@]}"; do
        variant "$nv"
        rows_list=${H200_NCU_ROWS:-1 2 8}
        for e in "${envs[@]}"; do [[ $e == NCU_ROWS=* ]] && rows_list=${e#NCU_ROWS=}; done
        for r in $rows_list; do
          # The sweep needs its time: no profile starts after H200_NCU_UNTIL s.
          if (( SECONDS > ${H200_NCU_UNTIL:-240} )); then
            echo "ncu $name $vname rows $r: skipped (past H200_NCU_UNTIL)"; continue
          fi
          log=/tmp/ncu/ncu-$name-$vname-r$r.csv
          # Only the last round's steps are profiled (--profile, ncu
          # --profile-from-start off): ncu took 30-70 ms a kernel here, and
          # load, self-checks and prefill are thousands of kernels.
          # H200_NCU_ARGS replaces the metric list (e.g. sections and a
          # kernel filter for one kernel's memory and stall analysis).
          what=(--metrics "${H200_NCU_METRICS:-gpu__time_duration.sum}")
          # shellcheck disable=SC2206  # H200_NCU_ARGS is a word list
          [[ -n ${H200_NCU_ARGS:-} ]] && what=(${H200_NCU_ARGS})
          env "${envs[@]}" timeout "${H200_NCU_TIMEOUT:-150}" "$NCU" --clock-control none \
            --cache-control none --profile-from-start off \
            "${what[@]}" --csv --log-file "$log" \
            $H dev decode-bench --model "/tmp/$name" --rows "$r" --steps "${H200_NCU_STEPS:-3}" \
            --rounds 1 --profile > /dev/null 2>&1 || echo "ncu $name $vname rows $r: exit $?"
          stamp "$name: ncu $vname rows $r"
        done
      done
      python3 bench/cuda/ncu_decode.py --window /tmp/ncu/ncu-$name-*.csv 2>&1 | tee -a "$OUT/ncu-decode.md" || true
      mkdir -p /tmp/raw; tar -cJf "/tmp/raw/ncu-$name.tar.xz" -C /tmp/ncu . || true
      rm -rf /tmp/ncu
    fi
    # Where a prompt pass's GPU time goes: one prompt, then PROMPTS batched
    # (prefill-bench --profile brackets those two passes of its last round;
    # bench/cuda/ncu_decode.py --window --each lists each).
    if [[ ",${H200_NCU_PREFILL:-}," == *",$name,"* ]]; then
      NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
      mkdir -p /tmp/ncu
      pt=${H200_NCU_PREFILL_SHAPE:-7x136}
      log=/tmp/ncu/ncu-prefill-$name-$pt.csv
      timeout "${H200_NCU_TIMEOUT:-150}" "$NCU" --clock-control none --cache-control none \
        --profile-from-start off --metrics "${H200_NCU_METRICS:-gpu__time_duration.sum}" \
        --csv --log-file "$log" $H dev prefill-bench --model "/tmp/$name" --prompts "${pt%x*}" \
        --tokens "${pt#*x}" --rounds 1 --profile > /dev/null 2>&1 || echo "ncu prefill $name: exit $?"
      stamp "$name: ncu prefill $pt"
      python3 bench/cuda/ncu_decode.py --window --each --top 24 "$log" 2>&1 | tee -a "$OUT/ncu-prefill.md" || true
      mkdir -p /tmp/raw; tar -cJf "/tmp/raw/ncu-prefill-$name.tar.xz" -C /tmp/ncu . || true
      rm -rf /tmp/ncu
    fi
    if [[ ",${H200_PREFILL_BENCH:-}," == *",$name,"* ]]; then
      IFS=';' read -ra pvariants <<< "${H200_PREFILL_VARIANTS:-hearth:}"
      for pv in "${pvariants[@]}"; do
        variant "$pv"
        # A variant's ARGS=... replaces H200_PREFILL_ARGS (e.g. one variant
        # with --new-lengths, one without, in the same run).
        pargs=${H200_PREFILL_ARGS:-}
        for e in "${envs[@]}"; do [[ $e == ARGS=* ]] && pargs=${e#ARGS=}; done
        for pt in ${H200_PREFILL_SHAPES:-7x136 16x136 2x512}; do
          echo "### prefill-bench $name $vname $pt $pargs" | tee -a "$OUT/inproc.md"
          # shellcheck disable=SC2086  # pargs is a word list
          env "${envs[@]}" timeout 200 $H dev prefill-bench --model "/tmp/$name" --prompts "${pt%x*}" \
            --tokens "${pt#*x}" $pargs 2>/dev/null | tee -a "$OUT/inproc.md" || echo "prefill-bench exit $?"
        done
      done
      stamp "$name: prefill bench done"
    fi
    [[ ",${H200_SWEEP_MODELS:-$name}," == *",$name,"* ]] || continue
    # Hearth variants ("name:ENV=VAL,ENV=VAL;..."), each its own server, all
    # measured alternately with mlx_lm.server in one bench run.
    # (H200_VARIANTS_<model> overrides H200_VARIANTS for that model.)
    per_model="H200_VARIANTS_$name"
    IFS=';' read -ra variants <<< "${!per_model:-${H200_VARIANTS:-hearth:}}"
    pids=() compare="" ports=()
    for k in "${!variants[@]}"; do
      variant "${variants[$k]}"
      port=$((8000 + 2 * k))
      # shellcheck disable=SC2086  # H200_SERVE_ARGS is a word list (e.g. --mlx-cache-mb 8192)
      env "${envs[@]}" HEARTH_STEP_TRACE="/tmp/trace-$name-$vname.tsv" \
        $H serve --model "/tmp/$name" --port $port --max-running 16 --max-queue 256 ${H200_SERVE_ARGS:-} \
        > "/tmp/hearth-serve-$name-$vname.log" 2>&1 &
      pids+=($!) ports+=($port) compare+="$vname=http://127.0.0.1:$port,"
    done
    # H200_PEER=0: Hearth variants only (an A/B of Hearth settings; the peer's
    # numbers then come from another run).
    if [[ ${H200_PEER:-1} == 1 ]]; then
      python3 -m mlx_lm server --model "/tmp/$name" --port 8081 > "/tmp/mlx-lm-serve-$name.log" 2>&1 &
      pids+=($!) ports+=(8081) compare+="mlx_lm=http://127.0.0.1:8081"
    else
      compare=${compare%,}
    fi
    for port in "${ports[@]}"; do
      for _ in $(seq 1 180); do curl -sf localhost:$port/v1/models >/dev/null && break; sleep 1; done
    done
    curl -s localhost:8000/v1/models; echo
    # Each Hearth server's health: device, KV budget (on CUDA the lesser of
    # host and GPU free memory, other processes counted) and memory use.
    for port in "${ports[@]}"; do
      [[ $port == 8081 ]] || { echo "health :$port $(curl -s localhost:$port/health)"; }
    done
    # The memory guard's measures: a step's working memory after the engine's
    # warm-up, and again after the benchmark (a rise means a pass bigger than
    # the warm-up's largest came later).
    guard_figures() {  # label
      for port in "${ports[@]}"; do
        [[ $port == 8081 ]] && continue
        echo "$1 :$port $(curl -s localhost:$port/metrics | { grep -E '^hearth_(step_working_memory_bytes|gpu_memory_(releases|refusals)_total) ' || true; } | tr '\n' ' ')"
      done
    }
    guard_figures "guard after warm-up"
    nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader || true
    stamp "$name: servers up"
    # Warm up: MLX compiles kernels on first use (20-50 s), batch shapes included.
    # NB: a bare `wait` would also wait for the `tee` process substitution
    # above (bash >= 5.1) and never return: always wait for explicit PIDs.
    warm() {  # port model concurrency
      local wp=()
      for _ in $(seq 1 $3); do
        curl -s -m 150 localhost:$1/v1/completions -H 'content-type: application/json' \
          -d "{\"model\":\"$2\",\"prompt\":\"warm up the kernels please\",\"max_tokens\":64}" >/dev/null &
        wp+=($!)
      done
      wait "${wp[@]}"
    }
    for c in 1 2 16; do
      wpids=()
      for port in "${ports[@]}"; do
        model=default; [[ $port == 8081 ]] && model="/tmp/$name"
        warm $port "$model" $c & wpids+=($!)
      done
      wait "${wpids[@]}"
    done
    stamp "$name: warmed up"
    # Each server's threads a second after warm-up, all idle: which of them
    # still burn CPU (MLX 0.32.2's CUDA completion worker spins once it has
    # run a batch, ml-explore/mlx#4451, fixed in 0.32.3; docs/cuda.md).
    sleep 1
    top -H -b -n 2 -d 1 -p "$(IFS=,; echo "${pids[*]}")" 2>&1 \
      | awk '/^top -/{n++} n==2 && (/PID/ || $9+0 > 1)' | head -24 || true
    # Seconds left before H200_DEADLINE (at least 1: `timeout` refuses 0 or less).
    left() { local l=$(( ${H200_DEADLINE:-570} - SECONDS )); echo $(( l > 0 ? l : 1 )); }
    (( ${H200_DEADLINE:-570} - SECONDS > 30 )) || echo "!! $name: under 30 s left before H200_DEADLINE, the sweep is cut short"
    # The GPU's clocks, power and load every 200 ms while the sweep runs
    # (does a slow repeat coincide with a slower GPU?).
    mkdir -p /tmp/raw
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu,temperature.gpu \
      --format=csv -lms 200 > "/tmp/raw/smi-$name.csv" 2>&1 & smi=$!
    # and the VM's CPU time, steal included, every second.
    { vmstat -t 1 > "/tmp/raw/vmstat-$name.txt" 2>&1 || true; } & vms=$!
    timeout $(left) $H bench --compare "$compare" \
        --scenarios sweep --concurrency "${H200_CONC:-1,2,4,8,16}" --sweep-prompt-tokens 128 --sweep-max-tokens 256 \
        --repeats "${H200_REPEATS:-3}" --warmup 0 --tokenizer "$tokdir/tokenizer.json" \
        --json-out "/tmp/raw/h200-$name.json" --markdown-out "$OUT/h200-$name.md" || echo "bench exit $?"
    stamp "$name: sweep done"
    kill $smi $vms 2>/dev/null || true; pkill -x vmstat 2>/dev/null || true
    first="${compare%%,*}"
    if [[ ",${H200_INTERF:-}," == *",$name,"* ]]; then
      timeout $(left) $H bench --compare "$first,mlx_lm=http://127.0.0.1:8081" --scenarios interference \
          --repeats 3 --warmup 1 --tokenizer "$tokdir/tokenizer.json" \
          --markdown-out "/tmp/interference-$name.md" || echo "bench exit $?"
      sed -n '/^## /,$p' "/tmp/interference-$name.md" | head -40
      stamp "$name: interference done"
    fi
    if [[ ",${H200_PREFILL:-}," == *",$name,"* ]]; then
      timeout $(left) $H bench --compare "$first,mlx_lm=http://127.0.0.1:8081" --scenarios single \
          --prompt-lengths "${H200_PREFILL_LENGTHS:-4096,16384,32768,53248}" --max-tokens 1 \
          --repeats 1 --warmup 0 --tokenizer "$tokdir/tokenizer.json" \
          --markdown-out "/tmp/prefill-$name.md" || echo "bench exit $?"
      sed -n '/^## /,$p' "/tmp/prefill-$name.md" | head -40
      stamp "$name: prefill curve done"
    fi
    guard_figures "guard after the benchmark"
    extra=$(cat /tmp/interference-$name.md /tmp/prefill-$name.md 2>/dev/null || true)
    if [[ -n $extra ]]; then printf '%s\n' "$extra" > "$OUT/extra-$name.md"; fi
    kill "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
    # Where the step time goes, per decode batch size (HEARTH_STEP_TRACE):
    # one file for all models, so two models' runs stay within 8 files.
    python3 bench/cuda/trace_summary.py /tmp/trace-$name-*.tsv | tee -a "$OUT/trace-summary.txt"
    for t in /tmp/trace-$name-*.tsv; do xz -c "$t" > "/tmp/raw/$(basename "$t").xz"; done
    grep -H -i "kernel" /tmp/hearth-serve-$name-*.log | cut -c1-300 || true
    tail -n 5 /tmp/hearth-serve-$name-*.log
    grep -A20 "^| server | streams" "$OUT/h200-$name.md" 2>/dev/null || true
  done
  # One file for the raw material (at most 8 files come back): the bench
  # JSON, step traces, GPU clock samples and Nsight CSVs.
  if [[ -d /tmp/raw ]]; then
    for j in /tmp/raw/*.json /tmp/raw/*.csv /tmp/raw/*.txt; do [[ -f $j ]] && xz -f "$j"; done
    tar -cf "$OUT/raw.tar" -C /tmp/raw . && tar -tvf "$OUT/raw.tar"
  fi
  ;;
profile)
  # Where a decode step's time goes (issue 9). Same checkpoint, same run:
  # in-process decode speed of `hearth generate` and `mlx_lm generate`, then
  # Nsight Compute's kernel list (one metric: GPU time) for runs of
  # $PROFILE_SHORT and $PROFILE_LONG new tokens. The difference between the
  # two lists is (LONG - SHORT) decode steps' kernels, with start-up, load
  # and prefill cancelled out (bench/cuda/ncu_steps.py summarises it).
  exec > >(tee "$OUT/profile.log") 2>&1
  setup
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
  short=${PROFILE_SHORT:-2} long=${PROFILE_LONG:-6}
  prompt="Explain the difference between a process and a thread in an operating system."
  IFS=';' read -ra specs <<< "${H200_MODELS:-moe:qwen3_5_moe:qwen3.5-35b-a3b,layers=8:/tmp/tok35}"
  for spec in "${specs[@]}"; do
    dummy_model "$spec"
    cp "$tokdir/tokenizer_config.json" "/tmp/$name/" 2>/dev/null || true
    for rep in 1 2; do
      for v in ${PROFILE_VARIANTS:-hearth:}; do
        variant "$v"
        echo "== $name $vname rep $rep: $(env "${envs[@]}" $H generate --model "/tmp/$name" \
            --prompt "$prompt" --max-tokens 256 --ignore-eos --json 2>/dev/null | tail -1)"
      done
      echo "== $name mlx_lm rep $rep: $(python3 -m mlx_lm generate --model "/tmp/$name" \
          --prompt "$prompt" --max-tokens 256 2>&1 | grep -E '^(Prompt|Generation|Peak)' | tr '\n' ' ')"
    done
    stamp "$name: in-process decode timed"
    [[ ",${PROFILE_NCU:-$name}," == *",$name,"* ]] || continue
    for n in $short $long; do
      for v in ${PROFILE_VARIANTS:-hearth:}; do
        variant "$v"
        env "${envs[@]}" timeout ${PROFILE_TIMEOUT:-150} $NCU --clock-control none --cache-control none \
          --metrics gpu__time_duration.sum --csv --log-file "$OUT/ncu-$name-$vname-$n.csv" \
          $H generate --model "/tmp/$name" --prompt "$prompt" --max-tokens $n --ignore-eos \
          > /dev/null 2>&1 || echo "ncu $vname $n: exit $?"
        stamp "$name: ncu $vname $n tokens"
      done
      timeout ${PROFILE_TIMEOUT:-150} $NCU --clock-control none --cache-control none \
        --metrics gpu__time_duration.sum --csv --log-file "$OUT/ncu-$name-mlx_lm-$n.csv" \
        python3 -m mlx_lm generate --model "/tmp/$name" --prompt "$prompt" --max-tokens $n \
        > /dev/null 2>&1 || echo "ncu mlx_lm $n: exit $?"
      stamp "$name: ncu mlx_lm $n tokens"
    done
    xz -f "$OUT"/ncu-$name-*.csv || true
  done
  ;;
sanitize)
  # compute-sanitizer's memcheck over every kernel Hearth launches, on small
  # checkpoints of the real layer shapes (H200_SANITIZE: "name:arch:shape[:tok];..."):
  # decode-bench with the carried and host-written step inputs, prefill-bench,
  # then a server (MLX's buffer cache off, so a read past a buffer is past its
  # allocation) under a sweep and a long prompt prefilling beside short ones.
  # One log per run: $OUT/sanitize.log, summaries grepped into it.
  # H200_SAN_ARGS: more sanitizer arguments, e.g. "--kernel-name kns=hearth_"
  # to instrument only our kernels (MLX's run uninstrumented, much faster).
  exec > >(tee "$OUT/sanitize.log") 2>&1
  setup
  SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer | head -1)
  "$SAN" --version | tail -1
  san() {  # label, command...
    local label=$1; shift
    timeout "${H200_SAN_TIMEOUT:-240}" "$SAN" --tool memcheck --leak-check no --print-limit 20 ${H200_SAN_ARGS:-} \
      --log-file "/tmp/san-$label.log" "$@" > "/tmp/san-$label.out" 2>&1 || echo "$label: exit $?"
    echo "== $label: $(grep -h "ERROR SUMMARY" "/tmp/san-$label.log" | tail -1)"
    grep -h -m 40 -E "^=+ +(Invalid|Address|Program hit|Saved host|Host Frame|Error|.*is out of bounds|.*misaligned)" \
      "/tmp/san-$label.log" | head -40 || true
    tail -n 4 "/tmp/san-$label.out"
  }
  IFS=';' read -ra specs <<< "${H200_SANITIZE:-msan:qwen3_5_moe:qwen3.5-35b-a3b,layers=4:/tmp/tok35;dsan:qwen3:qwen3-8b,layers=2}"
  for spec in "${specs[@]}"; do
    dummy_model "$spec"
    parts=",${H200_SAN_PARTS:-decode,prefill,serve},"
    if [[ $parts == *,decode,* ]]; then
      san "$name-decode" $H dev decode-bench --model "/tmp/$name" --rows "${H200_SAN_ROWS:-1,3,16}" \
        --steps "${H200_SAN_STEPS:-3}" --rounds 1 --graph carry,nocarry
      stamp "$name: decode-bench checked"
    fi
    if [[ $parts == *,prefill,* ]]; then
      san "$name-prefill" $H dev prefill-bench --model "/tmp/$name" --prompts 5 --tokens 136 --rounds 1
      stamp "$name: prefill-bench checked"
    fi
    [[ $parts == *,serve,* ]] || continue
    "$SAN" --tool memcheck --leak-check no --print-limit 20 ${H200_SAN_ARGS:-} --log-file "/tmp/san-$name-serve.log" \
      $H serve --model "/tmp/$name" --port 8010 --max-running 16 --mlx-cache-mb 0 \
      > "/tmp/san-$name-serve.out" 2>&1 &
    spid=$!
    for _ in $(seq 1 240); do curl -sf localhost:8010/health >/dev/null && break; sleep 1; done
    stamp "$name: server up under memcheck"
    timeout "${H200_SAN_TIMEOUT:-240}" $H bench --url http://127.0.0.1:8010 --scenarios sweep,interference \
      --concurrency 4,16 --sweep-prompt-tokens 128 --sweep-max-tokens 24 --long-prompt-tokens 1500 \
      --repeats 1 --warmup 0 --tokenizer "$tokdir/tokenizer.json" > "/tmp/san-$name-bench.txt" 2>&1 \
      || echo "bench exit $?"
    grep -E "failed|error" -i "/tmp/san-$name-bench.txt" | head -5 || true
    curl -s localhost:8010/health; echo
    pkill -TERM -f "^/tmp/hearth serve --model /tmp/$name" || true
    wait $spid || echo "serve under memcheck: exit $?"
    echo "== $name-serve: $(grep -h "ERROR SUMMARY" "/tmp/san-$name-serve.log" | tail -1)"
    grep -h -m 40 -E "^=+ +(Invalid|Address|Program hit|Error|.*is out of bounds|.*misaligned)" \
      "/tmp/san-$name-serve.log" | head -40 || true
    tail -n 4 "/tmp/san-$name-serve.out"
    stamp "$name: server checked"
  done
  mkdir -p /tmp/sanraw && cp /tmp/san-* /tmp/sanraw/ && tar -cJf "$OUT/sanitize-raw.tar.xz" -C /tmp/sanraw . || true
  ls -la /tmp/sanraw
  ;;
pressure)
  # Another process takes the GPU's memory while a server idles with its
  # buffers cached (docs/scheduler.md, "Sharing a GPU"): per variant
  # (H200_PRESSURE_VARIANTS="name:serve args;..."), a burst of long prompts
  # fills MLX's cache, a PyTorch process then takes all but
  # H200_PRESSURE_LEFT_MB of the free memory, and a burst of longer prompts
  # follows; then the hog exits and one more request shows whether the
  # server still works. Statuses, /health and the GPU counters per phase.
  exec > >(tee "$OUT/pressure.log") 2>&1
  setup
  dummy_model "pdense:qwen3:${H200_PRESSURE_SHAPE:-qwen3-8b}"
  burst() {  # port, streams, prompt words, label
    python3 - "$@" <<'PY'
import json, sys, threading, urllib.request, urllib.error
port, n, words, label = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
out = []
def one(i):
    body = json.dumps({"model": "default", "prompt": f"{i} " + "lorem ipsum " * (words // 2),
                       "max_tokens": 32, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            u = json.load(r)["usage"]
            out.append(f"200 ({u['prompt_tokens']}+{u['completion_tokens']})")
    except urllib.error.HTTPError as e:
        err = json.load(e).get("error", {})
        out.append(f"{e.code} {err.get('code')}: {err.get('message', '')[:160]}")
    except Exception as e:
        out.append(f"error {type(e).__name__}: {e}"[:200])
ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
[t.start() for t in ts]; [t.join() for t in ts]
from collections import Counter
print(f"{label}: " + "; ".join(f"{c} x {s}" for s, c in Counter(out).most_common()))
PY
  }
  gpu() { nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader; }
  IFS=';' read -ra pvariants <<< "${H200_PRESSURE_VARIANTS:-guard:;noguard:--gpu-reserve-mb 0}"
  for pv in "${pvariants[@]}"; do
    IFS=':' read -r vname vargs <<< "$pv"
    # shellcheck disable=SC2086  # vargs is a word list
    $H serve --model /tmp/$name --port 8000 --max-running 16 $vargs > /tmp/pressure-$vname.log 2>&1 &
    spid=$!
    for _ in $(seq 1 240); do curl -sf localhost:8000/v1/models >/dev/null && break; sleep 1; done
    stamp "$vname: server up ($(gpu))"
    burst 8000 16 "${H200_PRESSURE_WORDS1:-1500}" "$vname burst 1 (cache fills)"
    echo "health: $(curl -s localhost:8000/health)"
    stamp "$vname: idle with its cache ($(gpu))"
    rm -f /tmp/hog.ready
    python3 - "${H200_PRESSURE_LEFT_MB:-600}" <<'PY' &
import sys, time, torch
free, total = torch.cuda.mem_get_info()
take = max(0, free - int(sys.argv[1]) * (1 << 20))
hog = torch.empty(take, dtype=torch.uint8, device="cuda")
print(f"hog: took {take >> 20} MiB of {free >> 20} MiB free", flush=True)
open("/tmp/hog.ready", "w").close()
time.sleep(600)
PY
    hog=$!
    for _ in $(seq 1 60); do [[ -f /tmp/hog.ready ]] && break; sleep 0.5; done
    stamp "$vname: hog holds the rest ($(gpu))"
    burst 8000 16 "${H200_PRESSURE_WORDS2:-3000}" "$vname burst 2 (GPU full)"
    echo "health: $(curl -s localhost:8000/health)"
    curl -s localhost:8000/metrics | grep -E "^hearth_(gpu_memory|device_lost|cache_releases)"
    kill $hog; wait $hog 2>/dev/null || true; rm -f /tmp/hog.ready
    stamp "$vname: hog gone ($(gpu))"
    burst 8000 4 "${H200_PRESSURE_WORDS2:-3000}" "$vname burst 3 (memory back)"
    echo "health: $(curl -s localhost:8000/health)"
    kill $spid 2>/dev/null; wait $spid 2>/dev/null || echo "server exit $?"
    grep -a -E "WARN|ERROR|terminate|what\(\)" /tmp/pressure-$vname.log | cut -c1-400 | head -12 || true
    stamp "$vname: done"
  done
  ;;
diag)
  # Where does a growing batch spend its time on CUDA? Small model, timed
  # rounds of 1, 1, 2, 4, 8 concurrent requests, then the step histogram.
  exec > >(tee "$OUT/diag.log") 2>&1
  setup
  /tmp/hearth dev dummy-model --arch qwen3 --shape qwen3-0.6b --dtype bf16 \
      --tokenizer /tmp/tok/tokenizer.json --out /tmp/q06
  ( RUST_LOG=hearth=debug /tmp/hearth serve --model /tmp/q06 --port 8000 --max-running 16 > "$OUT/diag-serve.log" 2>&1 & )
  for _ in $(seq 1 60); do curl -sf localhost:8000/health >/dev/null && break; sleep 1; done
  for c in 1 1 2 4 8; do
    t0=$(date +%s.%N) pids=()
    for _ in $(seq 1 $c); do
      curl -s -m 90 localhost:8000/v1/completions -H 'content-type: application/json' \
        -d '{"model":"default","prompt":"warm up the kernels please","max_tokens":32,"temperature":0}' -o /dev/null &
      pids+=($!)
    done
    wait "${pids[@]}"
    echo "concurrency $c: $(python3 -c "import time; print(round(time.time() - $t0, 2))") s"
  done
  curl -s localhost:8000/metrics | grep -E "^hearth_(engine_step_seconds_(sum|count)|generated_tokens_total|requests_finished)"
  ;;
*) echo "unknown phase $phase" >&2; exit 2 ;;
esac
