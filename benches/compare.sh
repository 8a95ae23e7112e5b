#!/usr/bin/env bash
# rzk vs Apache ZooKeeper 3.8, side by side on this machine, with the same load
# generator (rzk-bench) and the same settings. See --help.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: benches/compare.sh [options]

Starts Apache ZooKeeper 3.8 (Debian package; installed if missing) and rzk on free
loopback ports with equivalent settings (tickTime=2000, fsync on, the same snapCount,
maxClientCnxns=0, 4lw.commands.whitelist=*), runs each workload against each server
alternately for several rounds, and prints medians and rzk/ZooKeeper ratios.

  --mode standalone        topology (only standalone exists until replication lands)
  --rounds N               rounds of every workload on both servers (default 3)
  --seconds S              seconds per run (default 5)
  --workloads a,b,..       default: create,set,get,exists,children,delete,mixed,mix,multi,watch,storm
  --sessions N             rzk-bench --sessions (default 32)
  --inflight N             rzk-bench --inflight (default 8)
  --value-bytes N          rzk-bench --value-bytes (default 128)
  --snap-count N           snapCount of both servers (default 100000, the default of both; quick 10000)
  --warmup-seconds S        before round 1, every workload once for S s on each server,
                           not counted (JIT and caches; default 1, quick 0; 0 = none)
  --zk-heap SIZE           ZooKeeper JVM heap, -Xms = -Xmx (default 2g)
  --quick                  1 round of 1 s on create,get,set,mixed; small footprint numbers (CI)
  --footprint              after the throughput runs, measure memory, restart and snapshot time
  --footprint-only         only the footprint part (benches/footprint.sh does this)
  --fp-znodes N            znodes before the RSS reading (default 200000; quick 20000)
  --fp-idle-sessions N     idle sessions for the RSS reading (default 10000; quick 500)
  --fp-restart-znodes N    znodes for the restart and snapshot timing (default 1000000; quick 50000)
  --work-dir DIR           data dirs and logs (default: a new dir under /var/tmp, removed at the end)
  --keep                   keep the work dir
  --note TEXT              a sentence printed with the results (e.g. "machine shared with builds")
  --write-benchmarks       replace the comparison section of BENCHMARKS.md with this run's results

Environment: RZK_BENCH_BIN, RZK_BIN (default: built from this repository with
`cargo build --release -p rzk-benches -p rzk-server --bin rzk-bench --bin rzk`), CARGO_TARGET_DIR.
Exit status: non-zero if any rzk-bench run fails or reports errors.
EOF
}

# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/scripts/lib.sh"

ORIG_ARGS=("$@")
MODE=standalone
ROUNDS=3
SECONDS_PER_RUN=5
WORKLOADS=create,set,get,exists,children,delete,mixed,mix,multi,watch,storm
SESSIONS=32
INFLIGHT=8
VALUE_BYTES=128
ZK_HEAP=2g
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
  --mode | --rounds | --seconds | --workloads | --sessions | --inflight | --value-bytes | --zk-heap | \
    --note | --warmup-seconds | --snap-count | --fp-* | --work-dir)
    [ $# -ge 2 ] || die "$1 needs a value"
    ;;
  esac
  case $1 in
  --mode) MODE=$2; shift ;;
  --rounds) ROUNDS=$2; rounds_given=1; shift ;;
  --seconds) SECONDS_PER_RUN=$2; seconds_given=1; shift ;;
  --workloads) WORKLOADS=$2; workloads_given=1; shift ;;
  --sessions) SESSIONS=$2; shift ;;
  --inflight) INFLIGHT=$2; shift ;;
  --value-bytes) VALUE_BYTES=$2; shift ;;
  --zk-heap) ZK_HEAP=$2; shift ;;
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
standalone) ;;
ensemble) die "--mode ensemble: rzk has no replication between servers yet; only --mode standalone exists" ;;
*) die "--mode $MODE: unknown mode (only 'standalone' exists)" ;;
esac
if [ $QUICK = 1 ]; then
  [ $rounds_given = 1 ] || ROUNDS=1
  [ $seconds_given = 1 ] || SECONDS_PER_RUN=1
  [ $workloads_given = 1 ] || WORKLOADS=create,get,set,mixed
  [ $snap_given = 1 ] || SNAP_COUNT=10000
  [ $warmup_given = 1 ] || WARMUP=0
  FP_ZNODES=${FP_ZNODES:-20000} FP_IDLE=${FP_IDLE:-500} FP_RESTART=${FP_RESTART:-50000}
  [ $WRITE = 0 ] || die "--write-benchmarks with --quick: BENCHMARKS.md holds full runs only"
fi
FP_ZNODES=${FP_ZNODES:-200000} FP_IDLE=${FP_IDLE:-10000} FP_RESTART=${FP_RESTART:-1000000}
for n in SNAP_COUNT ROUNDS SECONDS_PER_RUN SESSIONS INFLIGHT VALUE_BYTES FP_ZNODES FP_IDLE FP_RESTART; do
  [[ ${!n} =~ ^[1-9][0-9]*$ ]] || die "$n=${!n}: expected a positive integer"
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
CMD_SHOWN="benches/compare.sh"
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

# run_workload W NAME ROUND [SECONDS]: one rzk-bench run; its JSON line and exit
# status go to runs/ (round "warmup" to runs/warmup/, which the report ignores).
run_workload() {
  local w=$1 name=$2 round=$3 secs=${4:-$SECONDS_PER_RUN} kind=${SRV_KIND[$2]} base rc=0
  base="$WORK_DIR/runs/$w.$kind.r$round"
  [ "$round" != warmup ] || base="$WORK_DIR/runs/warmup/$w.$kind"
  # A run that hangs (a stalled server) is stopped and counted as failed.
  timeout --kill-after=10 $((secs * 4 + 180)) "$RZK_BENCH_BIN" run --server "127.0.0.1:${SRV_PORT[$name]}" --workload "$w" \
    --sessions "$SESSIONS" --inflight "$INFLIGHT" --value-bytes "$VALUE_BYTES" \
    --seconds "$secs" --seed "${round/warmup/0}" --json >"$base.json" 2>"$base.err" || rc=$?
  echo $rc >"$base.rc"
  local summary ok=1
  summary=$(python3 "$REPO_ROOT/benches/scripts/report.py" line "$base.json") || ok=0
  log "round $round $w on $kind: $summary (exit $rc)"
  if [ $rc != 0 ] || [ $ok = 0 ]; then
    FAILED=1
    log "rzk-bench reported a failure; its stderr:"
    tail -20 "$base.err" >&2
  fi
}

# setup_servers: prepares and starts the servers of --mode, named zk and rzk (the
# names clients connect to). Ensemble mode will start three of each here and
# point zk and rzk at one member; the rest of the script is topology-blind.
setup_servers() {
  case $MODE in
  standalone)
    prepare_zookeeper zk "$WORK_DIR/zookeeper" "$ZK_HEAP"
    prepare_rzk rzk "$WORK_DIR/rzk"
    start_server zk
    start_server rzk
    ;;
  esac
}

throughput() {
  log "ZooKeeper JVM flags: $(zk_jvm_flags "$ZK_HEAP")"
  setup_servers
  local r w first second
  if [ "$WARMUP" -gt 0 ]; then
    mkdir -p "$WORK_DIR/runs/warmup"
    for w in "${WL[@]}"; do
      run_workload "$w" zk warmup "$WARMUP"
      run_workload "$w" rzk warmup "$WARMUP"
    done
  fi
  for ((r = 1; r <= ROUNDS; r++)); do
    # Alternate who goes first, so neither server always runs on a disk or page
    # cache the other has just warmed (or dirtied).
    if ((r % 2)); then first=zk second=rzk; else first=rzk second=zk; fi
    for w in "${WL[@]}"; do
      run_workload "$w" "$first" "$r"
      run_workload "$w" "$second" "$r"
    done
  done
  stop_server zk
  stop_server rzk
}

# shellcheck source=scripts/footprint.sh
source "$REPO_ROOT/benches/scripts/footprint.sh"

[ $THROUGHPUT = 0 ] || throughput
[ $FOOTPRINT = 0 ] || footprint

report_args=(
  --work-dir "$WORK_DIR"
  --command "$CMD_SHOWN" "${BINS_FROM_ENV[@]}" --note "$NOTE"
  --zk-jvm "$(zk_jvm_flags "$ZK_HEAP")"
  --rzk-bin "$RZK_BIN" --bench-bin "$RZK_BENCH_BIN"
  --rounds "$ROUNDS" --seconds "$SECONDS_PER_RUN" --warmup-seconds "$WARMUP" --sessions "$SESSIONS"
  --inflight "$INFLIGHT" --value-bytes "$VALUE_BYTES" --workloads "$WORKLOADS"
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
