#!/usr/bin/env bash
# Latency at a fixed offered load: Apache ZooKeeper 3.8 and rzk (standalone, or
# ensembles of three with --mode ensemble), each offered the same operations per second by `rzk-bench run --rate`
# (open loop: an operation is sent when it is due, whether or not earlier
# ones were answered, and its latency counts from its due time). A closed-loop
# generator on a 2-core host measures the server and the generator competing
# for the CPU at saturation; at a rate both servers can carry, the
# percentiles compare the servers themselves.
#
#   benches/run open-loop [--rates get:20000,create:4000,...] [--seconds S]
#                        [--sessions N] [--inflight K] [--rounds R]
#                        [--warmup-seconds W] [--mode standalone|ensemble]
#
# Prints one table line per workload, rate and server: offered and achieved
# ops/s, p50/p99/p99.9 in µs, the server's CPU µs per operation; each
# measured run follows an unreported one of W seconds at the same rate (JIT,
# caches). Servers as in
# compare.sh (lib.sh): fsync on, tickTime 2000, ZooKeeper with -Xmx1g and no
# -Xms; one server at a time on a fresh data dir, alternating order by round.
# --mode ensemble: three members of each instead (benches/scripts/ensemble.sh:
# the same zoo.cfg settings and server.N lines, all on 127.0.0.1), one ensemble
# at a time; rzk-bench gets the connect string of all three, so session i is on
# member i mod 3, and the CPU column is the three members' CPU together.
# RZK_BIN and RZK_BENCH_BIN as in compare.sh (built if unset).
set -euo pipefail

rates="get:20000,set:4000,create:4000,mixed:10000"
seconds=10
sessions=32
inflight=1
rounds=1
warmup=3
mode=standalone
while [ $# -gt 0 ]; do
  case $1 in
  --rates) rates=$2; shift 2 ;;
  --seconds) seconds=$2; shift 2 ;;
  --sessions) sessions=$2; shift 2 ;;
  --inflight) inflight=$2; shift 2 ;;
  --rounds) rounds=$2; shift 2 ;;
  --warmup-seconds) warmup=$2; shift 2 ;;
  --mode) mode=$2; shift 2 ;;
  -h | --help) sed -n '2,24p' "$0"; exit 0 ;;
  *) echo "open-loop.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

case $mode in
standalone | ensemble) ;;
*) echo "open-loop.sh: --mode is standalone or ensemble, not $mode" >&2; exit 2 ;;
esac

# shellcheck source=../scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
# shellcheck source=../scripts/ensemble.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/ensemble.sh"
ZK_HEAP=1g ZK_XMS=0
ensure_deps
resolve_bins
work=$(mktemp -d /tmp/rzk-open-loop.XXXXXX)
on_exit() {
  cleanup_started
  rm -rf "$work"
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# start_kind KIND NAME DIR: one server (standalone) or three members (ensemble);
# sets TARGET (the connect string) and PIDS (rzk-bench --server-pid).
start_kind() {
  local kind=$1 name=$2 dir=$3
  if [ "$mode" = ensemble ]; then
    ens_prepare "$kind" "$dir"
    ens_start "$kind"
    TARGET=$(ens_connect "$kind") PIDS=$(ens_pids "$kind")
    return
  fi
  case $kind in
  zookeeper) prepare_zookeeper "$name" "$dir" "$ZK_HEAP" "$ZK_XMS" ;;
  rzk) prepare_rzk "$name" "$dir" ;;
  esac
  start_server "$name"
  TARGET="127.0.0.1:${SRV_PORT[$name]}" PIDS=${SRV_PID[$name]}
}

# stop_kind KIND NAME: stops what start_kind started.
stop_kind() {
  local kind=$1 name=$2
  if [ "$mode" = ensemble ]; then
    ens_stop "$kind"
    return
  fi
  stop_server "$name"
}

log "mode: $mode; uptime: $(uptime)"
printf '| round | workload | offered ops/s | server | achieved ops/s | p50 µs | p99 µs | p99.9 µs | server CPU µs/op | errors |\n'
printf '|---|---|---|---|---|---|---|---|---|---|\n'
for ((round = 1; round <= rounds; round++)); do
  order=(zookeeper rzk)
  ((round % 2 == 0)) && order=(rzk zookeeper)
  for kind in "${order[@]}"; do
    name="$kind-$round"
    dir="$work/$name"
    mkdir -p "$dir"
    start_kind "$kind" "$name" "$dir"
    IFS=, read -ra pairs <<<"$rates"
    for pair in "${pairs[@]}"; do
      workload=${pair%%:*} rate=${pair#*:}
      out="$dir/$workload-$rate.json"
      if [ "$warmup" != 0 ]; then
        "$RZK_BENCH_BIN" run --server "$TARGET" --workload "$workload" \
          --sessions "$sessions" --inflight "$inflight" --rate "$rate" --seconds "$warmup" \
          >/dev/null 2>"$out.warmup.err" ||
          { log "$name $workload warm-up: rzk-bench failed:"; cat "$out.warmup.err" >&2; exit 1; }
      fi
      "$RZK_BENCH_BIN" run --server "$TARGET" --workload "$workload" \
        --sessions "$sessions" --inflight "$inflight" --rate "$rate" --seconds "$seconds" \
        --server-pid "$PIDS" --json >"$out" 2>"$out.err" ||
        { log "$name $workload: rzk-bench failed:"; cat "$out.err" >&2; exit 1; }
      python3 - "$out" "$round" "$kind" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"| {sys.argv[2]} | {r['workload']} | {r['offered_ops_per_sec']:.0f} | {sys.argv[3]} "
      f"| {r['ops_per_sec']:.0f} | {r['p50_us']} | {r['p99_us']} | {r['p999_us']} "
      f"| {r.get('server_cpu_us_per_op', 0):.1f} | {r['errors']} |")
PY
    done
    stop_kind "$kind" "$name"
  done
done
log "uptime: $(uptime)"
