#!/usr/bin/env bash
# benches/snapshot-cost.sh: what snapshots cost the log. Runs rzk-bench create
# (32 sessions, 1 request in flight each, 128 B values) against a fresh rzk per
# run, once per setting, alternating the settings round by round, and prints
# ops/s, p99, the server's CPU per op (utime + stime from /proc/<pid>/stat over
# the timed run), the snapshots the server began and saved during the run, and
# from its `mntr` the log's fsync time (avg/max ms), the snapshots' time (count,
# sum ms) and the average txns per fsync.
#
#   benches/snapshot-cost.sh [--rounds K] [--seconds S] [--inflight N] \
#       [--populate N] [--binary label=path ...] 'label:key=value,key=value' ...
#
# --populate N creates N znodes (rzk-bench populate) before the timed run, so
# that snapshots write a grown tree as in compare.sh, whose one rzk server keeps
# every earlier run's znodes. --binary (repeatable) runs every setting on every
# binary, alternated the same way (an A/B in the same minutes).
#
# Example (snapshots at the default snapCount, off, and with the writer paced):
#   benches/snapshot-cost.sh --rounds 3 'on:snapCount=100000' 'off:snapCount=1000000000' \
#       'paced:snapCount=100000,rzk.snapshot.writeBytesPerSecMax=33554432'
# Binaries: RZK_BIN, RZK_BENCH_BIN (default target/release of this checkout).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
RZK_BIN=${RZK_BIN:-$here/target/release/rzk}
RZK_BENCH_BIN=${RZK_BENCH_BIN:-$here/target/release/rzk-bench}
ROUNDS=3 SECONDS_PER_RUN=8 INFLIGHT=1 POPULATE=0 SETTINGS=() BINARIES=()
while [ $# -gt 0 ]; do
  case $1 in
  --rounds) ROUNDS=$2; shift ;;
  --seconds) SECONDS_PER_RUN=$2; shift ;;
  --inflight) INFLIGHT=$2; shift ;;
  --populate) POPULATE=$2; shift ;;
  --binary) BINARIES+=("$2"); shift ;;
  -*) echo "unknown argument $1" >&2; exit 2 ;;
  *) SETTINGS+=("$1") ;;
  esac
  shift
done
[ ${#SETTINGS[@]} -gt 0 ] || { echo "give at least one 'label:key=value,...'" >&2; exit 2; }
[ ${#BINARIES[@]} -gt 0 ] || BINARIES=("rzk=$RZK_BIN")
# Every (binary, setting) pair is one case.
CASES=()
for b in "${BINARIES[@]}"; do
  for s in "${SETTINGS[@]}"; do
    if [ ${#BINARIES[@]} -gt 1 ]; then CASES+=("${b%%=*}/$s|${b#*=}"); else CASES+=("$s|${b#*=}"); fi
  done
done
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
mntr() { python3 -c 'import socket,sys; s=socket.create_connection(("127.0.0.1",int(sys.argv[1]))); s.sendall(b"mntr"); d=b""
while True:
    b=s.recv(65536)
    if not b: break
    d+=b
print(d.decode())' "$1"; }
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
  n=${#CASES[@]}
  for ((k = 0; k < n; k++)); do
    # Alternate which case goes first from round to round.
    c=${CASES[$(((k + r - 1) % n))]}
    s=${c%%|*} bin=${c#*|}
    label=${s%%:*} sets=${s#*:}
    args=()
    IFS=, read -ra kvs <<<"$sets"
    for kv in "${kvs[@]}"; do [ -n "$kv" ] && args+=(--set "$kv"); done
    port=$(free_port)
    dir="$WORK_DIR/${label//\//-}-$r"
    "$bin" --client-port "$port" --data-dir "$dir" --set maxClientCnxns=0 --set "4lw.commands.whitelist=*" "${args[@]}" >"$dir.log" 2>&1 &
    PID=$!
    "$RZK_BENCH_BIN" wait-serving --server "127.0.0.1:$port" >/dev/null
    if [ "$POPULATE" -gt 0 ]; then
      "$RZK_BENCH_BIN" populate --server "127.0.0.1:$port" --znodes "$POPULATE" --path /pre >/dev/null
    fi
    began0=$(grep -ac "snapshot started" "$dir.log" || true)
    t0=$(ticks "$PID")
    out=$("$RZK_BENCH_BIN" run --server "127.0.0.1:$port" --workload create --sessions 32 \
      --inflight "$INFLIGHT" --seconds "$SECONDS_PER_RUN" --json | head -1)
    t1=$(ticks "$PID")
    m=$(mntr "$port")
    kill -TERM "$PID"; wait "$PID" 2>/dev/null || true; PID=""
    began=$(($(grep -ac "snapshot started" "$dir.log" || true) - began0))
    python3 -c '
import json, sys, os
j = json.loads(sys.argv[1])
m = dict(l.split("\t", 1) for l in sys.argv[7].splitlines() if "\t" in l)
ops = j["ops"]
hz = os.sysconf("SC_CLK_TCK")
cpu = (int(sys.argv[6]) / hz) / max(ops, 1) * 1e6
g = lambda k: m.get(k, "?")
print("round %s %-12s ops/s %8.0f  p50 %5.2f ms  p99 %6.2f ms  CPU %5.1f us/op  fsync avg %s max %s ms  txns/fsync %s  snapshots begun %s (all %s, %s ms)  load %s" % (
    sys.argv[2], sys.argv[3], j["ops_per_sec"], j["p50_us"]/1000, j["p99_us"]/1000, cpu,
    g("zk_avg_fsynctime"), g("zk_max_fsynctime"), g("zk_rzk_avg_group_commit_size"),
    sys.argv[4], g("zk_cnt_snapshottime"), g("zk_sum_snapshottime"), sys.argv[5]))' \
      "$out" "$r" "$label" "$began" "$(cut -d' ' -f1 /proc/loadavg)" "$((t1 - t0))" "$m" "" "$SECONDS_PER_RUN" 2>/dev/null || echo "round $r $label: $out"
  done
done
echo "uptime after: $(uptime)"
