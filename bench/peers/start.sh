#!/usr/bin/env bash
# Start a peer OpenAI-compatible server in the background on a model folder,
# with the same BLAS environment as Hearth, and wait until it answers.
#
#   bench/peers/start.sh mlx-lm            --model DIR --port 8081 [--host 127.0.0.1] [-- EXTRA ARGS]
#   bench/peers/start.sh mlx-openai-server --model DIR --port 8082 [--host 127.0.0.1] [-- EXTRA ARGS]
#   bench/peers/start.sh hearth            --model DIR --port 8000 [--host 127.0.0.1] [-- EXTRA ARGS]
#
# Prints the server's PID; its log and PID file are in .hearth/peers/run/.
# Stop it with bench/peers/stop.sh NAME PORT. Install peers first with
# bench/peers/install.sh. `hearth` runs target/release/hearth serve (no
# venv), so all three start the same way for a --compare run.
set -euo pipefail
source "$(dirname "$0")/common.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

usage() { sed -n '2,13p' "$0" >&2; exit 2; }
[[ $# -ge 1 ]] || usage
name=$1; shift
model="" port="" host=127.0.0.1 extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --host) host=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) usage ;;
  esac
done
[[ -n "$model" && -n "$port" ]] || usage
[[ -e "$model" ]] || { echo "model '$model' not found" >&2; exit 1; }
model=$(cd "$model" && pwd)  # absolute: mlx_lm.server reports and reloads by path

case "$name" in
  hearth)
    bin=${HEARTH_BIN:-$ROOT/target/release/hearth}
    [[ -x "$bin" ]] || { echo "$bin not built (cargo build --release)" >&2; exit 1; }
    cmd=("$bin" serve --model "$model" --host "$host" --port "$port") ;;
  mlx-lm)
    venv="$PEERS_ROOT/mlx-lm/venv"
    [[ -x "$venv/bin/python" ]] || { echo "run bench/peers/install.sh mlx-lm first" >&2; exit 1; }
    cmd=("$venv/bin/python" -m mlx_lm.server --model "$model" --host "$host" --port "$port") ;;
  mlx-openai-server)
    venv="$PEERS_ROOT/mlx-openai-server/venv"
    [[ -x "$venv/bin/mlx-openai-server" ]] || { echo "run bench/peers/install.sh mlx-openai-server first" >&2; exit 1; }
    cmd=("$venv/bin/mlx-openai-server" launch --model-path "$model" --model-type lm
         --host "$host" --port "$port") ;;
  *) peer_known "$name" ;;
esac

run_dir="$PEERS_ROOT/run"
mkdir -p "$run_dir"
pid_file="$run_dir/$name-$port.pid"
log_file="$run_dir/$name-$port.log"
if [[ -s "$pid_file" ]] && kill -0 "$(cat "$pid_file")" 2>/dev/null; then
  echo "$name already running on port $port (pid $(cat "$pid_file"))" >&2
  exit 1
fi

peer_blas_env
# Local model folders only: no Hub traffic. An existing (empty) Hub cache
# keeps mlx_lm.server's GET /v1/models working (it fails when the cache
# directory is missing, and clients read the model id from it).
export HF_HUB_OFFLINE=1
export HF_HUB_CACHE=${HF_HUB_CACHE:-$PEERS_ROOT/hf-cache}
mkdir -p "$HF_HUB_CACHE"
peer_log "starting $name on $host:$port ($model); log: $log_file"
# setsid: the server gets its own process group, so stop.sh can end it and
# any workers it spawned without touching anything else.
setsid "${cmd[@]}" "${extra[@]}" >"$log_file" 2>&1 < /dev/null &
pid=$!
echo "$pid" > "$pid_file"

url="http://$host:$port/v1/models"
for _ in $(seq 1 600); do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "$name exited during start-up; last lines of $log_file:" >&2
    tail -n 20 "$log_file" >&2
    rm -f "$pid_file"
    exit 1
  fi
  if curl -fsS -m 2 "$url" >/dev/null 2>&1; then
    peer_log "$name ready at http://$host:$port (pid $pid)"
    echo "$pid"
    exit 0
  fi
  sleep 0.5
done
echo "$name did not answer $url within 300 s (still running as pid $pid)" >&2
exit 1
