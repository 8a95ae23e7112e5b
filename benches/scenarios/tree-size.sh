#!/usr/bin/env bash
# Throughput against the size of the tree (the goal: "throughput flat from 1k to
# 1M znodes, ± 10 %"). For each size N in --sizes: a fresh rzk (the settings of
# compare.sh: fsync on, snapCount=100000), `rzk-bench populate` N znodes of
# 128 B (parents of at most 100,000 children, as footprint.sh does), then, in
# alternating rounds, each workload of --workloads with `rzk-bench run`: 32
# sessions, 1 request in flight, 128 B values, each session on its own 64 keys
# beside the populated tree. A write load on a big tree also pays for its
# snapshots (one every 50,000–100,000 txns, of the whole tree), which is what
# a user of a big tree sees.
# Printed per run: ops/s, p50 and p99 in ms, the server's CPU µs per op, the
# load average; at the end, per workload, the median of each size and its
# ratio to the smallest size's.
#
#   benches/run tree-size                                    # 1000,10000,100000,1000000; get,set; 2 rounds of 4 s
#   benches/run tree-size --sizes 1000,1000000 --workloads get --rounds 3 --seconds 5
#   benches/run tree-size --set rzk.snapshot.writeBytesPerSecMax=33554432   # zoo.cfg keys (repeatable)
#   benches/run tree-size --keep        # keep the work dir (the servers' logs) under /var/tmp
#
# Environment: RZK_BIN, RZK_BENCH_BIN (default: built from this repository).
set -euo pipefail

# shellcheck source=../scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

SIZES=1000,10000,100000,1000000
WORKLOADS=get,set
ROUNDS=2
SECONDS_PER_RUN=4
CHUNK=100000
SETS=()
KEEP=0
while [ $# -gt 0 ]; do
  case $1 in
  --sizes) SIZES=$2; shift ;;
  --workloads) WORKLOADS=$2; shift ;;
  --rounds) ROUNDS=$2; shift ;;
  --seconds) SECONDS_PER_RUN=$2; shift ;;
  --set) SETS+=("$2"); shift ;;
  --keep) KEEP=1 ;;
  -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
  *) die "unknown argument $1" ;;
  esac
  shift
done

trap cleanup_started EXIT
resolve_bins
WORK_DIR=$(mktemp -d /var/tmp/rzk-tree-size.XXXXXX)
IFS=, read -r -a NS <<<"$SIZES"
IFS=, read -r -a WLS <<<"$WORKLOADS"
RESULTS=$WORK_DIR/results.tsv
: >"$RESULTS"

# populate NAME N: N znodes of 128 B under /rzk-populate-0, -1, ...
populate() {
  local name=$1 n=$2 k=0 left=$2 here
  while [ "$left" -gt 0 ]; do
    here=$((left < CHUNK ? left : CHUNK))
    "$RZK_BENCH_BIN" populate --server "127.0.0.1:${SRV_PORT[$name]}" --znodes "$here" \
      --path "/rzk-populate-$k" >/dev/null 2>"$WORK_DIR/populate.err" ||
      { tail -20 "$WORK_DIR/populate.err" >&2; die "populate of $n znodes failed"; }
    left=$((left - here)) k=$((k + 1))
  done
}

# bench NAME N WORKLOAD ROUND: one timed run; its figures go to stdout and RESULTS.
bench() {
  local name=$1 n=$2 wl=$3 round=$4 out="$WORK_DIR/run.json"
  "$RZK_BENCH_BIN" run --server "127.0.0.1:${SRV_PORT[$name]}" --workload "$wl" --sessions 32 \
    --inflight 1 --value-bytes 128 --seconds "$SECONDS_PER_RUN" --seed "$round" \
    --server-pid "${SRV_PID[$name]}" --json >"$out" 2>"$out.err" ||
    { tail -20 "$out.err" >&2; die "rzk-bench run $wl on $n znodes failed"; }
  python3 - "$out" "$n" "$wl" "$(cut -d' ' -f1-3 /proc/loadavg)" "$RESULTS" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
if r.get("errors"):
    sys.exit(f"rzk-bench reported errors: {r.get('messages')}")
cpu = r.get("server_cpu_us_per_op")
n, wl, load = sys.argv[2], sys.argv[3], sys.argv[4]
print(f"{n:>8} znodes  {wl:4} {r['ops_per_sec']:9.0f} ops/s  p50 {r['p50_us']/1000:.2f} ms  "
      f"p99 {r['p99_us']/1000:.2f} ms  server CPU {cpu:.1f} us/op  load {load}")
with open(sys.argv[5], "a") as f:
    f.write(f"{n}\t{wl}\t{r['ops_per_sec']}\t{cpu}\n")
PY
}

log "sizes $SIZES, workloads $WORKLOADS, $ROUNDS round(s) of $SECONDS_PER_RUN s; load $(cut -d' ' -f1-3 /proc/loadavg)"
# Every size's server runs for the whole script, so the runs can alternate
# between them round by round (the machine's load moves; each size sees it alike).
for n in "${NS[@]}"; do
  prepare_rzk "size$n" "$WORK_DIR/size$n" "${SETS[@]}"
  start_server "size$n"
  populate "size$n" "$n"
  log "$n znodes populated; VmRSS $(awk '/VmRSS/ {print $2, $3}' "/proc/${SRV_PID[size$n]}/status")"
done
for ((round = 1; round <= ROUNDS; round++)); do
  order=("${NS[@]}")
  if ((round % 2 == 0)); then
    order=()
    for ((i = ${#NS[@]} - 1; i >= 0; i--)); do order+=("${NS[i]}"); done
  fi
  for wl in "${WLS[@]}"; do
    for n in "${order[@]}"; do bench "size$n" "$n" "$wl" "$round"; done
  done
done
for n in "${NS[@]}"; do stop_server "size$n"; done

python3 - "$RESULTS" <<'PY'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines()]
sizes = sorted({int(r[0]) for r in rows})
for wl in dict.fromkeys(r[1] for r in rows):
    med = {}
    for n in sizes:
        got = [(float(r[2]), float(r[3])) for r in rows if r[1] == wl and int(r[0]) == n]
        med[n] = (statistics.median(g[0] for g in got), statistics.median(g[1] for g in got))
    base = med[sizes[0]]
    print(f"{wl}: " + "; ".join(
        f"{n:,} znodes {o:,.0f} ops/s ({o / base[0]:.2f}×), {c:.1f} us/op ({c / base[1]:.2f}×)"
        for n, (o, c) in med.items()))
PY
if [ $KEEP = 1 ]; then log "work dir kept: $WORK_DIR"; else rm -rf "$WORK_DIR"; fi
