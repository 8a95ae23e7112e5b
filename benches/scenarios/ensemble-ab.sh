#!/usr/bin/env bash
# Two or more rzk binaries as 3-member ensembles side by side (the
# ensemble's write path): each binary runs one ensemble of three members on
# this machine (zoo.cfg as benches/scripts/ensemble.sh writes them: tickTime
# 2000, initLimit 10, syncLimit 5, forceSync=yes); then, round by round, every
# workload at every number of requests in flight runs on each ensemble in turn
# (the order reversed in even rounds): `rzk-bench run` with the connect string
# of all three members (session i on member i mod 3), 32 sessions, 128 B
# values, --server-pid of the three members (CPU summed over them).
#
# Printed per run: ops/s, p99, the members' CPU µs per op summed, and from
# `perf stat -p` over 2 s of the run: context switches and syscalls per op
# summed over the three members. On a shared machine the CPU and switch
# figures per op are what to compare; ops/s follows the load. The load
# average is printed at the start and the end.
#
#   benches/run ensemble-ab --rounds 3 --seconds 4 --workloads create,set \
#       --inflights 1,8 old=/work/ab/x/rzk new=target/release/rzk
#
# A BINARY may carry settings: 'one=env TOKIO_WORKER_THREADS=1 target/release/rzk'.
# MNTR=1: after each run, the members' mntr counters over the run (fsyncs,
# txns per group commit, proposals, COMMITs received by learners), summed.
# FORCE_SYNC=no: every member with forceSync=no (the path without the disk's fsync).
# Environment: RZK_BENCH_BIN (default target/release/rzk-bench), KEEP=1 keeps
# the work dir (members' logs).
set -euo pipefail

ROUNDS=3
SECS=4
WORKLOADS=create,set
INFLIGHTS=1,8
SESSIONS=32
while [ $# -gt 0 ]; do
  case $1 in
  --rounds) ROUNDS=$2; shift 2 ;;
  --seconds) SECS=$2; shift 2 ;;
  --workloads) WORKLOADS=$2; shift 2 ;;
  --inflights) INFLIGHTS=$2; shift 2 ;;
  --sessions) SESSIONS=$2; shift 2 ;;
  -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
  *=*) break ;;
  *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[ $# -ge 1 ] || { echo "give at least one NAME=BINARY" >&2; exit 2; }
# shellcheck source=../scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
RZK_BENCH_BIN=${RZK_BENCH_BIN:-$REPO_ROOT/target/release/rzk-bench}
BENCH=$RZK_BENCH_BIN
[ -x "$BENCH" ] || { echo "RZK_BENCH_BIN=$BENCH is not an executable" >&2; exit 2; }
export RZK_BENCH_BIN
HAVE_PERF=0
command -v perf >/dev/null && HAVE_PERF=1

work_dir /var/tmp/rzk-ens-ab
WORK=$WORK_DIR
declare -A PIDS CONNECT PORTS
NAMES=()

# start_binary_ensemble NAME BINARY: three members of BINARY (which may start with
# `env VAR=VALUE ...`) in $WORK/NAME, started by rzk-ensemble (lib.sh's start_ensemble:
# zoo.cfg, myid, the members settled, each serving a session and a read).
start_binary_ensemble() {
  local name=$1 n words envs=() modes=""
  read -r -a words <<<"$2"
  if [ "${words[0]}" = env ]; then
    words=("${words[@]:1}")
    while [[ ${words[0]} == *=* ]]; do envs+=(--env "${words[0]}"); words=("${words[@]:1}"); done
  fi
  start_ensemble "$name" "$WORK/$name" rzk --rzk "${words[0]}" --voters 3 --tick-ms 2000 \
    --init-limit 10 --sync-limit 5 --set maxClientCnxns=0 --set snapCount=100000 \
    --set "forceSync=${FORCE_SYNC:-yes}" --env NO_COLOR=1 --env RUST_LOG=warn "${envs[@]}"
  PIDS[$name]=$("$RZK_ENSEMBLE" pids --dir "$WORK/$name")
  CONNECT[$name]=$("$RZK_ENSEMBLE" connect --dir "$WORK/$name")
  PORTS[$name]=""
  for n in 1 2 3; do
    PORTS[$name]+="${PORTS[$name]:+ }${SRV_PORT[$name-m$n]}"
    modes+=" m$n $( (exec 3<>"/dev/tcp/127.0.0.1/${SRV_PORT[$name-m$n]}" && printf srvr >&3 &&
      sed -n 's/^Mode: //p' <&3) 2>/dev/null)"
  done
  echo "$name serving:$modes"
}

# perf stat over 2 s of the run, summed over the members: "switches syscalls".
perf_counts() {
  local pids=$1 out
  [ "$HAVE_PERF" = 1 ] || { echo "0 0"; return; }
  out=$(perf stat -x, -e context-switches,raw_syscalls:sys_enter -p "$pids" -- sleep 2 2>&1 >/dev/null || true)
  awk -F, '/context-switches/ {s=$1} /sys_enter/ {c=$1} END {print (s==""?0:s), (c==""?0:c)}' <<<"$out"
}

# mntr_sum NAME: "fsyncs txns_in_groups proposals learner_commits" summed over
# the members of NAME's ensemble.
mntr_sum() {
  local port
  for port in ${PORTS[$1]}; do
    (exec 3<>"/dev/tcp/127.0.0.1/$port" && printf mntr >&3 && cat <&3) 2>/dev/null || true
  done | awk '$1=="zk_cnt_fsynctime"{f+=$2} $1=="zk_rzk_sum_group_commit_size"{g+=$2}
    $1=="zk_proposal_count"{p+=$2} $1=="zk_learner_commit_received_count"{c+=$2}
    END {print f+0, g+0, p+0, c+0}'
}

# cpu_ticks PIDS: each pid's utime+stime in clock ticks, space-separated.
cpu_ticks() {
  local p out=""
  for p in ${1//,/ }; do
    out+="$(awk '{print $14 + $15}' "/proc/$p/stat") "
  done
  printf '%s' "$out"
}

run_one() {
  local name=$1 w=$2 inflight=$3 round=$4 json perf ops cpu p99 sw sc
  json=$WORK/$name.$w.i$inflight.r$round.json
  local before="" t0 t1
  [ "${MNTR:-0}" != 1 ] || before=$(mntr_sum "$name")
  t0=$(cpu_ticks "${PIDS[$name]}")
  (sleep 1; perf_counts "${PIDS[$name]}" >"$json.perf") &
  local perf_pid=$!
  "$BENCH" run --server "${CONNECT[$name]}" --workload "$w" --sessions "$SESSIONS" \
    --inflight "$inflight" --value-bytes 128 --seconds "$SECS" --seed "$round" \
    --server-pid "${PIDS[$name]}" --json >"$json" 2>"$json.err" || {
    echo "rzk-bench failed on $name:" >&2
    tail -5 "$json.err" >&2
  }
  wait "$perf_pid" || true
  read -r sw sc <"$json.perf"
  t1=$(cpu_ticks "${PIDS[$name]}")
  # Per member, over the whole run (set-up and clean-up included): CPU ms.
  echo "  members' CPU over the run, ms (m1 m2 m3): $(python3 -c '
import os, sys
hz = os.sysconf("SC_CLK_TCK")
a, b = sys.argv[1].split(), sys.argv[2].split()
print(" ".join(str((int(y) - int(x)) * 1000 // hz) for x, y in zip(a, b)))' "$t0" "$t1")"
  if [ -n "$before" ]; then
    local f0 g0 p0 c0 f1 g1 p1 c1 ops_done
    read -r f0 g0 p0 c0 <<<"$before"
    read -r f1 g1 p1 c1 <<<"$(mntr_sum "$name")"
    ops_done=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["ops"])' "$json")
    echo "  mntr over the run: ops $ops_done, fsyncs $((f1 - f0)), txns in group commits $((g1 - g0)), proposals $((p1 - p0)), learner COMMITs received $((c1 - c0))"
  fi
  python3 - "$json" "$name" "$w" "$inflight" "$round" "$sw" "$sc" <<'EOF'
import json, sys
path, name, w, inflight, rnd, sw, sc = sys.argv[1:]
d = json.loads(open(path).read().strip().splitlines()[-1])
ops = d.get("ops_per_sec") or d.get("throughput") or 0
p99 = d.get("p99_us") or d.get("latency_p99_us") or 0
cpu = d.get("server_cpu_us_per_op") or 0
per = lambda v: float(v) / (ops * 2) if ops else 0
print(f"round {rnd} {w:7s} x{inflight:<2s} {name:8s} {ops:9.0f} ops/s  p99 {p99:7.0f} us  "
      f"cpu {cpu:6.1f} us/op  cs {per(sw):5.2f}/op  syscalls {per(sc):6.2f}/op")
EOF
}

echo "load at start: $(uptime)"
NAMES=()
for arg in "$@"; do
  name=${arg%%=*}
  NAMES+=("$name")
  start_binary_ensemble "$name" "${arg#*=}"
done
for ((r = 1; r <= ROUNDS; r++)); do
  order=("${NAMES[@]}")
  if ((r % 2 == 0)); then
    order=()
    for ((i = ${#NAMES[@]} - 1; i >= 0; i--)); do order+=("${NAMES[$i]}"); done
  fi
  for w in ${WORKLOADS//,/ }; do
    for inflight in ${INFLIGHTS//,/ }; do
      for name in "${order[@]}"; do
        run_one "$name" "$w" "$inflight" "$r"
      done
    done
  done
done
echo "load at end: $(uptime)"
