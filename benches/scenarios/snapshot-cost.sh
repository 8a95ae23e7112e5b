#!/usr/bin/env bash
# benches/run snapshot-cost: what snapshots cost the log. Runs rzk-bench create
# (32 sessions, 1 request in flight each, 128 B values) against a fresh rzk per
# run, once per setting, alternating the settings round by round, and prints
# ops/s, p99, the server's CPU per op (utime + stime from /proc/<pid>/stat over
# the timed run), the snapshots the server began and saved during the run, and
# from its `mntr` the log's fsync time (avg/max ms), the snapshots' time (count,
# sum ms) and the average txns per fsync.
#
#   benches/run snapshot-cost [--rounds K] [--seconds S] [--inflight N] \
#       [--populate N] [--binary label=path ...] 'label:key=value,key=value' ...
#
# --populate N creates N znodes (rzk-bench populate) before the timed run, so
# that snapshots write a grown tree as in compare.sh, whose one rzk server keeps
# every earlier run's znodes. --binary (repeatable) runs every setting on every
# binary, alternated the same way (an A/B in the same minutes).
#
# Example (snapshots at the default snapCount, off, and with the writer paced):
#   benches/run snapshot-cost --rounds 3 'on:snapCount=100000' 'off:snapCount=1000000000' \
#       'paced:snapCount=100000,rzk.snapshot.writeBytesPerSecMax=33554432'
# Binaries: RZK_BIN, RZK_BENCH_BIN (default target/release of this checkout).
set -euo pipefail
# shellcheck source=../scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
RZK_BIN=${RZK_BIN:-$REPO_ROOT/target/release/rzk}
RZK_BENCH_BIN=${RZK_BENCH_BIN:-$REPO_ROOT/target/release/rzk-bench}
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
work_dir /var/tmp/rzk-snapcost
PID=""
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
    dir="$WORK_DIR/${label//\//-}-$r"
    # lib.sh's record srv: a fresh port, data in $dir, the log $dir.log.
    SRV_DATA[srv]=$dir
    prepare_rzk srv "$dir"
    SRV_BIN[srv]=$bin SRV_LOG[srv]=$dir.log
    launch srv "$WORK_DIR/t0" "${args[@]}"
    PID=${SRV_PID[srv]} port=${SRV_PORT[srv]}
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
    stop_server srv; PID=""
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
