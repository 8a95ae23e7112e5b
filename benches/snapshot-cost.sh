#!/usr/bin/env bash
# benches/snapshot-cost.sh: what snapshots cost the log. Runs rzk-bench create
# (32 sessions, 1 request in flight each, 128 B values) against a fresh rzk per
# run, once per setting, alternating the settings round by round, and prints
# ops/s, p99 and the snapshots the server began and saved during the run.
#
#   benches/snapshot-cost.sh [--rounds K] [--seconds S] [--inflight N] \
#       'label:key=value,key=value' ...
#
# Example (snapshots at the default snapCount, off, and with the writer paced):
#   benches/snapshot-cost.sh --rounds 3 'on:snapCount=100000' 'off:snapCount=1000000000' \
#       'paced:snapCount=100000,rzk.snapshot.writeBytesPerSecMax=33554432'
# Binaries: RZK_BIN, RZK_BENCH_BIN (default target/release of this checkout).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
RZK_BIN=${RZK_BIN:-$here/target/release/rzk}
RZK_BENCH_BIN=${RZK_BENCH_BIN:-$here/target/release/rzk-bench}
ROUNDS=3 SECONDS_PER_RUN=8 INFLIGHT=1 SETTINGS=()
while [ $# -gt 0 ]; do
  case $1 in
  --rounds) ROUNDS=$2; shift ;;
  --seconds) SECONDS_PER_RUN=$2; shift ;;
  --inflight) INFLIGHT=$2; shift ;;
  -*) echo "unknown argument $1" >&2; exit 2 ;;
  *) SETTINGS+=("$1") ;;
  esac
  shift
done
[ ${#SETTINGS[@]} -gt 0 ] || { echo "give at least one 'label:key=value,...'" >&2; exit 2; }
WORK_DIR=$(mktemp -d /var/tmp/rzk-snapcost.XXXXXX)
PID=""
cleanup() {
  if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then kill -9 "$PID"; wait "$PID" 2>/dev/null || true; fi
  rm -rf "$WORK_DIR"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
echo "uptime before: $(uptime)"
for ((r = 1; r <= ROUNDS; r++)); do
  n=${#SETTINGS[@]}
  for ((k = 0; k < n; k++)); do
    # Alternate which setting goes first from round to round.
    s=${SETTINGS[$(((k + r - 1) % n))]}
    label=${s%%:*} sets=${s#*:}
    args=()
    IFS=, read -ra kvs <<<"$sets"
    for kv in "${kvs[@]}"; do [ -n "$kv" ] && args+=(--set "$kv"); done
    port=$(free_port)
    dir="$WORK_DIR/$label-$r"
    "$RZK_BIN" --client-port "$port" --data-dir "$dir" --set maxClientCnxns=0 "${args[@]}" >"$dir.log" 2>&1 &
    PID=$!
    "$RZK_BENCH_BIN" wait-serving --server "127.0.0.1:$port" >/dev/null
    out=$("$RZK_BENCH_BIN" run --server "127.0.0.1:$port" --workload create --sessions 32 \
      --inflight "$INFLIGHT" --seconds "$SECONDS_PER_RUN" --json | head -1)
    kill -TERM "$PID"; wait "$PID" 2>/dev/null || true; PID=""
    began=$(grep -ac "snapshot started" "$dir.log" || true)
    saved=$(grep -ac "snapshot saved" "$dir.log" || true)
    python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print("round %s %-8s ops/s %9.0f  p50 %5.2f ms  p99 %6.2f ms  snapshots begun %s saved %s  load %s" % (sys.argv[2], sys.argv[3], j["ops_per_sec"], j["p50_us"]/1000, j["p99_us"]/1000, sys.argv[4], sys.argv[5], sys.argv[6]))' \
      "$out" "$r" "$label" "$began" "$saved" "$(cut -d' ' -f1 /proc/loadavg)" 2>/dev/null || echo "round $r $label: $out"
  done
done
echo "uptime after: $(uptime)"
