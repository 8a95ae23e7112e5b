#!/usr/bin/env bash
# Throughput with many idle sessions held (the goal: "throughput flat to 10k
# sessions"). One fresh rzk (the settings of compare.sh); for each workload,
# alternating rounds of `rzk-bench run` (32 sessions, 1 request in flight,
# 128 B values): first without idle sessions, then while `rzk-bench
# idle-sessions` holds --idle sessions (opened once, kept alive by pings), ...
# Printed per run: ops/s, p50 and p99 in ms, the server's CPU µs per op, and
# the load average (the machine is shared: throughput depends on it).
#
#   benches/run idle-throughput                       # get,create; 10000 idle; 2 rounds of 5 s
#   benches/run idle-throughput --workloads get --idle 2000 --rounds 3 --seconds 6
set -euo pipefail

# shellcheck source=../scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

WORKLOADS=get,create
IDLE=10000
ROUNDS=2
SECONDS_PER_RUN=5
while [ $# -gt 0 ]; do
  case $1 in
  --workloads) WORKLOADS=$2; shift ;;
  --idle) IDLE=$2; shift ;;
  --rounds) ROUNDS=$2; shift ;;
  --seconds) SECONDS_PER_RUN=$2; shift ;;
  -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
  *) die "unknown argument $1" ;;
  esac
  shift
done

trap cleanup_started EXIT
resolve_bins
WORK_DIR=$(mktemp -d /tmp/rzk-idle-throughput.XXXXXX)
raise_nofile "$((IDLE + 64))"
prepare_rzk srv "$WORK_DIR/srv"
start_server srv
pid=${SRV_PID[srv]}
addr="127.0.0.1:${SRV_PORT[srv]}"
IFS=, read -r -a WLS <<<"$WORKLOADS"

# One timed run; prints its figures on one line.
bench() {
  local wl=$1 label=$2 out="$WORK_DIR/run.json"
  "$RZK_BENCH_BIN" run --server "$addr" --workload "$wl" --sessions 32 --inflight 1 \
    --value-bytes 128 --seconds "$SECONDS_PER_RUN" --server-pid "$pid" --json >"$out" 2>"$out.err" ||
    { tail -20 "$out.err" >&2; die "rzk-bench run $wl failed"; }
  python3 - "$out" "$wl" "$label" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
cpu = r.get("server_cpu_us_per_op")
cpu = f"{cpu:.1f}" if isinstance(cpu, (int, float)) else "-"
print(f"{sys.argv[2]:7} {sys.argv[3]:16} {r['ops_per_sec']:9.0f} ops/s  p50 {r['p50_us']/1000:.2f} ms  p99 {r['p99_us']/1000:.2f} ms  server CPU {cpu} us/op  load {sys.argv[4]}")
PY
}

idle_pid=""
start_idle() {
  local out="$WORK_DIR/idle.out" fifo="$WORK_DIR/idle.fifo"
  rm -f "$fifo" "$out"
  mkfifo "$fifo"
  "$RZK_BENCH_BIN" idle-sessions --server "$addr" --sessions "$IDLE" \
    --session-timeout-ms 10000 --hold-seconds 3600 <"$fifo" >"$out" 2>"$out.err" &
  idle_pid=$!
  STARTED_PIDS+=("$idle_pid")
  exec 4>"$fifo"
  local deadline=$(($(date +%s) + 600))
  until grep -q '^READY' "$out"; do
    kill -0 "$idle_pid" 2>/dev/null || { tail -20 "$out.err" >&2; die "idle-sessions exited before READY"; }
    [ "$(date +%s)" -lt $deadline ] || die "no READY within 600 s"
    sleep 0.1
  done
}
stop_idle() {
  exec 4>&-
  wait "$idle_pid" || { tail -20 "$WORK_DIR/idle.out.err" >&2; die "idle-sessions failed"; }
}

for ((round = 1; round <= ROUNDS; round++)); do
  for wl in "${WLS[@]}"; do bench "$wl" "no idle"; done
  start_idle
  for wl in "${WLS[@]}"; do bench "$wl" "$IDLE idle"; done
  stop_idle
done
stop_server srv
rm -rf "$WORK_DIR"
