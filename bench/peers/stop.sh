#!/usr/bin/env bash
# Stop a peer started by start.sh: SIGTERM to its process group, then SIGKILL
# after 15 s if it is still there.
#
#   bench/peers/stop.sh NAME PORT
set -euo pipefail
source "$(dirname "$0")/common.sh"
[[ $# -eq 2 ]] || { echo "usage: $0 NAME PORT" >&2; exit 2; }
pid_file="$PEERS_ROOT/run/$1-$2.pid"
[[ -s "$pid_file" ]] || { echo "no PID file $pid_file" >&2; exit 1; }
pid=$(cat "$pid_file")
if kill -0 "$pid" 2>/dev/null; then
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid"
  for _ in $(seq 1 30); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid"
  fi
  peer_log "stopped $1 (pid $pid)"
fi
rm -f "$pid_file"
