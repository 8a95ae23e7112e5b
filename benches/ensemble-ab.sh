#!/usr/bin/env bash
# Two or more rzk binaries as 3-member ensembles side by side (issue 11, the
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
#   benches/ensemble-ab.sh --rounds 3 --seconds 4 --workloads create,set \
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
BENCH=${RZK_BENCH_BIN:-$(dirname "$0")/../target/release/rzk-bench}
[ -x "$BENCH" ] || { echo "RZK_BENCH_BIN=$BENCH is not an executable" >&2; exit 2; }
HAVE_PERF=0
command -v perf >/dev/null && HAVE_PERF=1

WORK=$(mktemp -d /var/tmp/rzk-ens-ab.XXXXXX)
declare -A PIDS CONNECT PORTS
ALL_PIDS=()
NAMES=()
cleanup() {
  local p
  for p in "${ALL_PIDS[@]}"; do
    kill -TERM "$p" 2>/dev/null || true
  done
  for p in "${ALL_PIDS[@]}"; do
    wait "$p" 2>/dev/null || true
  done
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_ensemble() {
  local name=$1 bin=$2 n lines="" client pids="" connect=""
  local -a ports=()
  for n in 1 2 3; do
    client=$(free_port)
    ports+=("$client")
    lines+="server.$n=127.0.0.1:$(free_port):$(free_port);127.0.0.1:$client"$'\n'
  done
  for n in 1 2 3; do
    local m=$WORK/$name/m$n
    mkdir -p "$m/data"
    echo "$n" >"$m/data/myid"
    {
      echo "tickTime=2000"
      echo "initLimit=10"
      echo "syncLimit=5"
      echo "dataDir=$m/data"
      echo "clientPort=${ports[$((n - 1))]}"
      echo "clientPortAddress=127.0.0.1"
      echo "maxClientCnxns=0"
      echo "4lw.commands.whitelist=*"
      echo "admin.enableServer=false"
      echo "snapCount=100000"
      echo "forceSync=${FORCE_SYNC:-yes}"
      printf '%s' "$lines"
    } >"$m/zoo.cfg"
    # shellcheck disable=SC2086 # BINARY may be "env VAR=VALUE ... /path/rzk"
    NO_COLOR=1 RUST_LOG=warn $bin "$m/zoo.cfg" >"$m/server.log" 2>&1 </dev/null &
    ALL_PIDS+=("$!")
    pids+="${pids:+,}$!"
    connect+="${connect:+,}127.0.0.1:${ports[$((n - 1))]}"
  done
  PIDS[$name]=$pids
  PORTS[$name]="${ports[*]}"
  CONNECT[$name]=$connect
  local modes=""
  for n in 1 2 3; do
    "$BENCH" wait-serving --server "127.0.0.1:${ports[$((n - 1))]}" --timeout-seconds 120 >/dev/null
    modes+=" m$n $( (exec 3<>"/dev/tcp/127.0.0.1/${ports[$((n - 1))]}" && printf srvr >&3 &&
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
  start_ensemble "$name" "${arg#*=}"
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
