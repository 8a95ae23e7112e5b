#!/usr/bin/env bash
# rzk vs Apache ZooKeeper 3.8, side by side on this machine, with the same load
# generator (rzk-bench) and the same settings. See --help.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: benches/run compare [options]

Starts Apache ZooKeeper 3.8 (Debian package; installed if missing) and rzk on free
loopback ports with equivalent settings (tickTime=2000, fsync on, the same snapCount,
maxClientCnxns=0, 4lw.commands.whitelist=*), runs each workload against each server
alternately for several rounds, and prints medians and rzk/ZooKeeper ratios.

  --mode standalone|ensemble|observers
                           topology: one server of each (default), or 3 ZooKeeper members
                           against 3 rzk members, each run's sessions spread over the
                           members (benches/scripts/ensemble.sh; throughput only), or
                           3 voters + 2 observers of each (ZooKeeper with observerMasterPort)
                           beside 3 voters alone: reads on the observers and on all five,
                           writes on the voters with and without observers; every member
                           on its own 127.0.E.N address (benches/scripts/observers.sh);
                           --workloads then picks among get-observers,get-all,
                           create-voters,set-voters,create-noobs,set-noobs (default: all)
  --rounds N               rounds of every workload on both servers (default 3)
  --seconds S              seconds per run (default 5)
  --workloads a,b,..       default: create,set,get,exists,children,delete,mixed,mix,multi,watch,storm
  --sessions N             rzk-bench --sessions (default 32)
  --inflights a,b,..       requests in flight per session; every workload runs at each
                           (default 1,8: synchronous clients such as kazoo, Curator and
                           zkCli issue one at a time; pipelining ones more)
  --inflight N             the same as --inflights N
  --value-bytes N          rzk-bench --value-bytes (default 128)
  --snap-count N           snapCount of both servers (default 100000, the default of both; quick 10000)
  --no-snapshot-check      do not also run create on an rzk with snapshots off (by default
                           each create run is repeated on rzk with snapCount=1000000000,
                           to show what snapshots cost the log)
  --warmup-seconds S        before round 1, every workload once for S s on each server,
                           not counted (JIT and caches; default 1, quick 0; 0 = none)
  --zk-heap SIZE           ZooKeeper JVM heap, -Xmx (default 1g)
  --zk-xms                 also -Xms = -Xmx (heap committed up front; by default the heap
                           grows as used, so its RSS follows what ZooKeeper needs). The
                           footprint measures memory both ways either way.
  --storm-sessions N       sessions of the connection storm (default 10000; quick 500)
  --storm-parallelism N    connects in progress at once (default 64)
  --no-storm               skip the connection storm
  --quick                  1 round of 1 s on create,get,set,mixed; small footprint numbers (CI)
  --footprint              after the throughput runs, measure memory, restart and snapshot time
  --footprint-only         only the footprint part (benches/run footprint does this)
  --fp-znodes N            znodes before the RSS reading (default 200000; quick 20000)
  --fp-idle-sessions N     idle sessions for the RSS reading (default 10000; quick 500)
  --fp-restart-znodes N    znodes for the restart and snapshot timing (default 1000000; quick 50000)
  --work-dir DIR           data dirs and logs (default: a new dir under /var/tmp, removed at the end)
  --keep                   keep the work dir
  --note TEXT              a sentence printed with the results (e.g. "machine shared with builds")
  --write-benchmarks       replace the comparison section of BENCHMARKS.md with this run's results

Every run also records the server's own CPU time (utime + stime from
/proc/<pid>/stat, before and after) and reports it per operation.

Environment: RZK_BENCH_BIN, RZK_BIN (default: built from this repository with
`cargo build --release -p rzk-benches -p rzk-server --bin rzk-bench --bin rzk`), CARGO_TARGET_DIR.
Exit status: non-zero if any rzk-bench run fails or reports errors.
EOF
}

# shellcheck source=../scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

ORIG_ARGS=("$@")
MODE=standalone
ROUNDS=3
SECONDS_PER_RUN=5
WORKLOADS=create,set,get,exists,children,delete,mixed,mix,multi,watch,storm
SESSIONS=32
INFLIGHTS=1,8
VALUE_BYTES=128
ZK_HEAP=1g
ZK_XMS=0
SNAP_CHECK=1
STORM=1
STORM_SESSIONS=""
STORM_PARALLELISM=64
WARMUP=1
NOTE=""
QUICK=0
THROUGHPUT=1
FOOTPRINT=0
FP_ZNODES=""
FP_IDLE=""
FP_RESTART=""
WORK_DIR=""
KEEP=0
WRITE=0
workloads_given=0 rounds_given=0 seconds_given=0 snap_given=0 warmup_given=0

while [ $# -gt 0 ]; do
  case $1 in
  --mode | --rounds | --seconds | --workloads | --sessions | --inflight | --inflights | --value-bytes | \
    --zk-heap | --note | --warmup-seconds | --snap-count | --fp-* | --work-dir | --storm-sessions | \
    --storm-parallelism)
    [ $# -ge 2 ] || die "$1 needs a value"
    ;;
  esac
  case $1 in
  --mode) MODE=$2; shift ;;
  --rounds) ROUNDS=$2; rounds_given=1; shift ;;
  --seconds) SECONDS_PER_RUN=$2; seconds_given=1; shift ;;
  --workloads) WORKLOADS=$2; workloads_given=1; shift ;;
  --sessions) SESSIONS=$2; shift ;;
  --inflight | --inflights) INFLIGHTS=$2; shift ;;
  --value-bytes) VALUE_BYTES=$2; shift ;;
  --zk-heap) ZK_HEAP=$2; shift ;;
  --zk-xms) ZK_XMS=1 ;;
  --no-snapshot-check) SNAP_CHECK=0 ;;
  --storm-sessions) STORM_SESSIONS=$2; shift ;;
  --storm-parallelism) STORM_PARALLELISM=$2; shift ;;
  --no-storm) STORM=0 ;;
  --note) NOTE=$2; shift ;;
  --warmup-seconds) WARMUP=$2; warmup_given=1; shift ;;
  --snap-count) SNAP_COUNT=$2; snap_given=1; shift ;;
  --quick) QUICK=1 ;;
  --footprint) FOOTPRINT=1 ;;
  --footprint-only) FOOTPRINT=1; THROUGHPUT=0 ;;
  --fp-znodes) FP_ZNODES=$2; shift ;;
  --fp-idle-sessions) FP_IDLE=$2; shift ;;
  --fp-restart-znodes) FP_RESTART=$2; shift ;;
  --work-dir) WORK_DIR=$2; shift ;;
  --keep) KEEP=1 ;;
  --write-benchmarks) WRITE=1 ;;
  -h | --help) usage; exit 0 ;;
  *) usage >&2; die "unknown option: $1" ;;
  esac
  shift
done

case $MODE in
standalone | ensemble | observers) ;;
*) die "--mode $MODE: unknown mode (standalone, ensemble or observers)" ;;
esac
if [ $QUICK = 1 ]; then
  [ $rounds_given = 1 ] || ROUNDS=1
  [ $seconds_given = 1 ] || SECONDS_PER_RUN=1
  [ $workloads_given = 1 ] || WORKLOADS=create,get,set,mixed
  [ $snap_given = 1 ] || SNAP_COUNT=10000
  [ $warmup_given = 1 ] || WARMUP=0
  FP_ZNODES=${FP_ZNODES:-20000} FP_IDLE=${FP_IDLE:-500} FP_RESTART=${FP_RESTART:-50000}
  STORM_SESSIONS=${STORM_SESSIONS:-500}
  [ $WRITE = 0 ] || die "--write-benchmarks with --quick: BENCHMARKS.md holds full runs only"
fi
FP_ZNODES=${FP_ZNODES:-200000} FP_IDLE=${FP_IDLE:-10000} FP_RESTART=${FP_RESTART:-1000000}
STORM_SESSIONS=${STORM_SESSIONS:-10000}
for n in SNAP_COUNT ROUNDS SECONDS_PER_RUN SESSIONS VALUE_BYTES FP_ZNODES FP_IDLE FP_RESTART \
  STORM_SESSIONS STORM_PARALLELISM; do
  [[ ${!n} =~ ^[1-9][0-9]*$ ]] || die "$n=${!n}: expected a positive integer"
done
IFS=, read -r -a INFL <<<"$INFLIGHTS"
for n in "${INFL[@]}"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "--inflights $INFLIGHTS: expected positive integers"
done
[[ $WARMUP =~ ^[0-9]+$ ]] || die "--warmup-seconds $WARMUP: expected an integer"
IFS=, read -r -a WL <<<"$WORKLOADS"

# The exact command for the report, with the binaries when they came from the environment.
# shell_word ARG: ARG quoted so that a shell reads it back as one word.
shell_word() {
  if [[ $1 =~ ^[A-Za-z0-9_./,:=@+-]+$ ]]; then
    printf '%s' "$1"
  elif [[ $1 != *"'"* ]]; then
    printf "'%s'" "$1"
  else
    local e=${1//\\/\\\\}
    e=${e//\"/\\\"}
    e=${e//\$/\\\$}
    e=${e//\`/\\\`}
    printf '"%s"' "$e"
  fi
}
CMD_SHOWN="benches/run compare"
for a in "${ORIG_ARGS[@]}"; do CMD_SHOWN+=" $(shell_word "$a")"; done
BINS_FROM_ENV=()
[ -z "${RZK_BIN:-}" ] || { CMD_SHOWN="RZK_BIN=$RZK_BIN $CMD_SHOWN"; BINS_FROM_ENV=(--bins-from-env); }
[ -z "${RZK_BENCH_BIN:-}" ] || { CMD_SHOWN="RZK_BENCH_BIN=$RZK_BENCH_BIN $CMD_SHOWN"; BINS_FROM_ENV=(--bins-from-env); }

ensure_deps
resolve_bins

if [ -z "$WORK_DIR" ]; then
  # /var/tmp, not /tmp: /tmp may be a tmpfs, and fsync must reach a real disk.
  WORK_DIR=$(mktemp -d /var/tmp/rzk-compare.XXXXXX)
else
  mkdir -p "$WORK_DIR"
  # The report reads every result file under it: an old run's would be counted.
  [ -z "$(ls -A "$WORK_DIR")" ] || die "--work-dir $WORK_DIR is not empty"
fi
on_exit() {
  local rc=$?
  cleanup_started
  if [ $KEEP = 0 ] && [ $rc = 0 ]; then rm -rf "$WORK_DIR"; else log "work dir kept: $WORK_DIR"; fi
  exit $rc
}
trap on_exit EXIT
trap 'exit 130' INT TERM
mkdir -p "$WORK_DIR/runs" "$WORK_DIR/fp"
log "work dir $WORK_DIR ($(findmnt -no SOURCE,FSTYPE -T "$WORK_DIR" | tr -s ' ' ' '))"

FAILED=0

# run_workload W NAME ROUND INFLIGHT [SECONDS]: one rzk-bench run against server NAME;
# its JSON line (with the server's CPU time during the timed phase, read by
# rzk-bench from /proc/<pid>/stat) and exit status go to runs/W.NAME.iINFLIGHT.rROUND.*
# (round "warmup" to runs/warmup/, which the report ignores).
run_workload() {
  local w=$1 name=$2 round=$3 inflight=$4 secs=${5:-$SECONDS_PER_RUN} base rc=0
  base="$WORK_DIR/runs/$w.$name.i$inflight.r$round"
  [ "$round" != warmup ] || base="$WORK_DIR/runs/warmup/$w.$name.i$inflight"
  # A run that hangs (a stalled server) is stopped and counted as failed.
  timeout --kill-after=10 $((secs * 4 + 180)) "$RZK_BENCH_BIN" run --server "127.0.0.1:${SRV_PORT[$name]}" --workload "$w" \
    --sessions "$SESSIONS" --inflight "$inflight" --value-bytes "$VALUE_BYTES" \
    --seconds "$secs" --seed "${round/warmup/0}" --server-pid "${SRV_PID[$name]}" --json >"$base.json" 2>"$base.err" || rc=$?
  echo $rc >"$base.rc"
  local summary ok=1
  summary=$(python3 "$REPO_ROOT/benches/scripts/report.py" line "$base.json") || ok=0
  log "round $round $w x$inflight on $name: $summary (exit $rc)"
  if [ $rc != 0 ] || [ $ok = 0 ]; then
    FAILED=1
    log "rzk-bench reported a failure; its stderr:"
    tail -20 "$base.err" >&2
  fi
}

# The servers of the throughput runs, by the names the result files carry.
TP_SERVERS=(zookeeper rzk)

# setup_servers: prepares and starts the servers of --mode: zookeeper, rzk and (for
# the snapshot check) rzk-nosnap, an rzk with snapshots off. Ensemble mode will
# start three of each here and point each name at one member; the rest of the
# script is topology-blind.
setup_servers() {
  case $MODE in
  standalone)
    prepare_zookeeper zookeeper "$WORK_DIR/zookeeper" "$ZK_HEAP" "$ZK_XMS"
    prepare_rzk rzk "$WORK_DIR/rzk"
    start_server zookeeper
    start_server rzk
    if [ $SNAP_CHECK = 1 ]; then
      prepare_rzk rzk-nosnap "$WORK_DIR/rzk-nosnap" snapCount=1000000000
      start_server rzk-nosnap
    fi
    ;;
  esac
}

# run_pair W ROUND INFLIGHT FIRST SECOND [SECONDS]: W on both servers, and for create
# on rzk with snapshots off right after rzk.
run_pair() {
  local w=$1 round=$2 inflight=$3 first=$4 second=$5 secs=${6:-$SECONDS_PER_RUN} name
  for name in "$first" "$second"; do
    run_workload "$w" "$name" "$round" "$inflight" "$secs"
    if [ "$name" = rzk ] && [ "$w" = create ] && [ $SNAP_CHECK = 1 ]; then
      run_workload create rzk-nosnap "$round" "$inflight" "$secs"
    fi
  done
}

throughput() {
  log "ZooKeeper JVM flags: $(zk_jvm_flags "$ZK_HEAP" "$ZK_XMS")"
  setup_servers
  local r w first second inflight
  if [ "$WARMUP" -gt 0 ]; then
    mkdir -p "$WORK_DIR/runs/warmup"
    for w in "${WL[@]}"; do
      run_pair "$w" warmup "${INFL[-1]}" zookeeper rzk "$WARMUP"
    done
  fi
  for ((r = 1; r <= ROUNDS; r++)); do
    # Alternate who goes first, so neither server always runs on a disk or page
    # cache the other has just warmed (or dirtied).
    if ((r % 2)); then first=zookeeper second=rzk; else first=rzk second=zookeeper; fi
    for inflight in "${INFL[@]}"; do
      for w in "${WL[@]}"; do
        run_pair "$w" "$r" "$inflight" "$first" "$second"
      done
    done
  done
  stop_server zookeeper
  stop_server rzk
  [ $SNAP_CHECK = 0 ] || stop_server rzk-nosnap
}

# storm_round KIND ROUND: on server storm-KIND, STORM_SESSIONS new sessions
# STORM_PARALLELISM at a time, left open; kill -9 and restart the server (a failed
# member); the same sessions resumed at once. Results: storm/KIND.{new,resume}.rROUND.json.
storm_round() {
  local kind=$1 round=$2 name="storm-$1" out rc
  local sessions="$WORK_DIR/storm/$kind.sessions.r$round"
  for phase in new resume; do
    out="$WORK_DIR/storm/$kind.$phase.r$round.json"
    local args=(--save-sessions "$sessions")
    [ $phase = new ] || args=(--resume "$sessions")
    rc=0
    timeout --kill-after=10 900 "$RZK_BENCH_BIN" connect-storm --server "127.0.0.1:${SRV_PORT[$name]}" \
      --sessions "$STORM_SESSIONS" --connect-parallelism "$STORM_PARALLELISM" --session-timeout-ms 30000 \
      "${args[@]}" --json >"$out" 2>"$out.err" || rc=$?
    log "storm round $round on $kind, $phase: $(python3 "$REPO_ROOT/benches/scripts/report.py" storm-line "$out") (exit $rc)"
    if [ $rc != 0 ]; then
      FAILED=1
      tail -20 "$out.err" >&2
      return 0
    fi
    if [ $phase = new ]; then
      kill -KILL "${SRV_PID[$name]}"
      wait "${SRV_PID[$name]}" 2>/dev/null || true
      echo "--- kill -9, restart ---" >>"${SRV_LOG[$name]}"
      launch "$name" "${SRV_DIR[$name]}/t0-storm-$round"
      wait_serving "$name" --timeout-seconds 300 >/dev/null || die "$kind: not serving after the restart"
    fi
  done
}

storm() {
  raise_nofile "$STORM_SESSIONS"
  mkdir -p "$WORK_DIR/storm"
  prepare_zookeeper storm-zookeeper "$WORK_DIR/storm-zookeeper" "$ZK_HEAP" "$ZK_XMS"
  prepare_rzk storm-rzk "$WORK_DIR/storm-rzk"
  start_server storm-zookeeper
  start_server storm-rzk
  local r
  for ((r = 1; r <= ROUNDS; r++)); do
    if ((r % 2)); then
      storm_round zookeeper "$r"
      storm_round rzk "$r"
    else
      storm_round rzk "$r"
      storm_round zookeeper "$r"
    fi
  done
  stop_server storm-zookeeper
  stop_server storm-rzk
}

# shellcheck source=../scripts/footprint.sh
source "$REPO_ROOT/benches/scripts/footprint.sh"

if [ "$MODE" = ensemble ]; then
  # shellcheck source=../scripts/ensemble.sh
  source "$REPO_ROOT/benches/scripts/ensemble.sh"
  ensemble_main # its own runs and report; exits
fi
if [ "$MODE" = observers ]; then
  # shellcheck source=../scripts/ensemble.sh
  source "$REPO_ROOT/benches/scripts/ensemble.sh"
  # shellcheck source=../scripts/observers.sh
  source "$REPO_ROOT/benches/scripts/observers.sh"
  observers_main # its own runs and report; exits
fi
[ $THROUGHPUT = 0 ] || throughput
[ $THROUGHPUT = 0 ] || [ $STORM = 0 ] || storm
[ $FOOTPRINT = 0 ] || footprint

report_args=(
  --work-dir "$WORK_DIR"
  --command "$CMD_SHOWN" "${BINS_FROM_ENV[@]}" --note "$NOTE"
  --zk-jvm "$(zk_jvm_flags "$ZK_HEAP" "$ZK_XMS")" --zk-jvm-xms "$(zk_jvm_flags "$ZK_HEAP" 1)"
  --rzk-bin "$RZK_BIN" --bench-bin "$RZK_BENCH_BIN"
  --rounds "$ROUNDS" --seconds "$SECONDS_PER_RUN" --warmup-seconds "$WARMUP" --sessions "$SESSIONS"
  --inflights "$INFLIGHTS" --value-bytes "$VALUE_BYTES" --workloads "$WORKLOADS"
  --storm-sessions "$STORM_SESSIONS" --storm-parallelism "$STORM_PARALLELISM"
  --snap-count "$SNAP_COUNT" --fp-znodes "$FP_ZNODES" --fp-idle-sessions "$FP_IDLE" --fp-restart-znodes "$FP_RESTART"
)
python3 "$REPO_ROOT/benches/scripts/report.py" report "${report_args[@]}" >"$WORK_DIR/section.md"
cat "$WORK_DIR/section.md"
if [ $FAILED != 0 ]; then
  die "some rzk-bench runs failed or reported errors (see above); BENCHMARKS.md not written"
fi
if [ $WRITE = 1 ]; then
  python3 "$REPO_ROOT/benches/scripts/report.py" write "$REPO_ROOT/BENCHMARKS.md" "$WORK_DIR/section.md"
  log "BENCHMARKS.md: section replaced"
fi
