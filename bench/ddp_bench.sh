#!/usr/bin/env bash
# DDP step time: 1 rank vs 2 ranks on the same per-rank batch, and 2 ranks with and
# without hook-driven buckets (all-reduce launched during backward vs after it).
# usage: bench/ddp_bench.sh [BUILD_DIR]   (default: build); prints one JSON line per run.
# Each rank is one process with --threads intra-op threads (default 1); on a machine
# with fewer than 2 x threads free cores the 2-rank figures include CPU contention.
set -euo pipefail
BIN="${1:-build}/bin/nightshift-ddp-bench"
STEPS="${STEPS:-20}" BATCH="${BATCH:-16}" LEN="${LEN:-128}" THREADS="${THREADS:-1}"
common=(--steps "$STEPS" --batch "$BATCH" --len "$LEN" --threads "$THREADS")
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
two_ranks() {  # extra flags
  local port; port=$(free_port)
  "$BIN" --rank 1 --world 2 --port "$port" "${common[@]}" "$@" & local pid=$!
  "$BIN" --rank 0 --world 2 --port "$port" "${common[@]}" "$@"
  wait "$pid"
}
"$BIN" --rank 0 --world 1 "${common[@]}"
two_ranks --bucket-mb 1 --overlap 1
two_ranks --bucket-mb 1 --overlap 0
two_ranks --bucket-mb 25 --overlap 1
