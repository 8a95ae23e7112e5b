# The ensemble topology of `benches/run compare --mode ensemble`
# (benches/scenarios/compare.sh): 3 Apache ZooKeeper 3.8 members against 3 rzk
# members on this machine, every workload at every number of requests in flight,
# the sessions of each run spread over the members. Sourced
# by compare.sh after its options, binaries and work dir are set (lib.sh's records
# and helpers are in scope); ensemble_main runs everything and exits. open-loop.sh
# --mode ensemble sources it for ens_prepare, ens_start, ens_connect and ens_pids.
#
# How the load reaches the members: one rzk-bench per run, given the connect string
# of all three (--server h:p1,h:p2,h:p3), opens session i on member i mod 3 (32
# sessions: 11, 11 and 10); its bookkeeping connections (namespace, the count check
# after a sync, cleanup) use member 1. One generator, so one timed phase, one
# latency histogram and one CPU window for the three members: --server-pid gets the
# three members' pids and rzk-bench reports their CPU time summed.
#
# Both ensembles are started the way an operator starts one, by the repository's
# ensemble launcher (rzk-ensemble, through lib.sh's start_ensemble): a zoo.cfg per
# member with the same server.N lines and myid in its dataDir. Settings as in
# standalone mode (tickTime=2000, forceSync=yes, snapCount, maxClientCnxns=0, 4lw
# whitelist, admin server off) plus initLimit=10, syncLimit=5. ZooKeeper members run
# QuorumPeerMain with the standalone run's JVM flags (-Xmx, no -Xms unless --zk-xms).

ENS_SIZE=3
# The two ensembles, by the names the result files carry (report.py's convention).
ENS_KINDS=(zookeeper rzk)

# ens_member KIND N: the lib.sh record name of member N of KIND's ensemble.
ens_member() { printf '%s-m%s' "$1" "$2"; }

# Where each ensemble goes, its program (rzk or zookeeper) and its own rzk-ensemble
# options (one per line), by ensemble id (a KIND, or observers.sh's ids).
declare -A ENS_DIR ENS_PROGRAM ENS_OPTS

# ens_prepare ID DIR [PROGRAM [rzk-ensemble start options...]]: records ensemble ID
# of PROGRAM (default: ID, a KIND) in DIR, with the options given (default: ENS_SIZE
# voters); ens_start writes and starts it.
ens_prepare() {
  local id=$1
  ENS_DIR[$id]=$2 ENS_PROGRAM[$id]=${3:-$1}
  shift $(($# < 3 ? $# : 3))
  [ $# -gt 0 ] || set -- --voters "$ENS_SIZE"
  ENS_OPTS[$id]=$(printf '%s\n' "$@")
}

# ens_settings PROGRAM: the rzk-ensemble options every ensemble of the benchmarks
# shares, one per line: the zoo.cfg keys above, rzk's log settings, ZooKeeper's JVM
# flags.
ens_settings() {
  printf '%s\n' --tick-ms 2000 --init-limit 10 --sync-limit 5 --set maxClientCnxns=0 \
    --set "snapCount=$SNAP_COUNT" --set forceSync=yes --env NO_COLOR=1 --env "RUST_LOG=${RZK_LOG:-info}"
  if [ "$1" = zookeeper ]; then
    local f
    for f in $(zk_jvm_flags "$ZK_HEAP" "$ZK_XMS"); do
      # The launcher adds the AdminServer's flag from the zoo.cfg (off).
      [ "$f" = -Dzookeeper.admin.enableServer=false ] || printf '%s\n' "--jvm-arg=$f"
    done
  fi
}

# ens_start ID: starts ensemble ID (all members before waiting: they elect a leader
# among themselves), waits until each serves a session and a read, and records
# member N as ID-mN (lib.sh's SRV_*).
ens_start() {
  local id=$1 opts=() settings=()
  mapfile -t settings < <(ens_settings "${ENS_PROGRAM[$id]}")
  mapfile -t opts <<<"${ENS_OPTS[$id]}"
  start_ensemble "$id" "${ENS_DIR[$id]}" "${ENS_PROGRAM[$id]}" "${settings[@]}" "${opts[@]}"
  log "$id ensemble serving on $(ens_connect "$id") (pids $(ens_pids "$id")); $(ens_modes "$id")"
}

# ens_stop ID: stops every member of ensemble ID (SIGTERM, SIGKILL after 120 s).
ens_stop() {
  local n
  stop_ensemble "${ENS_DIR[$1]}"
  for ((n = 1; n <= ENS_SIZE; n++)); do SRV_PID[$(ens_member "$1" "$n")]=""; done
}

# ens_members [N...]: the member numbers given, or 1..ENS_SIZE when none are.
ens_members() {
  if [ $# -gt 0 ]; then printf '%s\n' "$@"; else seq 1 "$ENS_SIZE"; fi
}

# ens_connect KIND [N...]: the connect string of members N... (default: every member).
ens_connect() {
  local kind=$1 n name out=""
  shift
  for n in $(ens_members "$@"); do
    name=$(ens_member "$kind" "$n")
    out+="${out:+,}$(srv_addr "$name"):${SRV_PORT[$name]}"
  done
  printf '%s' "$out"
}

# ens_pids KIND [N...]: the pids of members N... (default: every member), comma-separated
# (rzk-bench --server-pid).
ens_pids() {
  local kind=$1 n out=""
  shift
  for n in $(ens_members "$@"); do
    out+="${out:+,}${SRV_PID[$(ens_member "$kind" "$n")]}"
  done
  printf '%s' "$out"
}

# ens_mode PORT [ADDR]: the Mode line of srvr (leader, follower, ...), "?" if no answer.
ens_mode() {
  (
    exec 3<>"/dev/tcp/${2:-127.0.0.1}/$1" || exit 1
    printf srvr >&3
    sed -n 's/^Mode: //p' <&3
  ) 2>/dev/null || echo "?"
}

# ens_modes KIND: "m1 leader, m2 follower, ..." for the log.
ens_modes() {
  local n out="" name
  for ((n = 1; n <= ENS_SIZE; n++)); do
    name=$(ens_member "$1" "$n")
    out+="${out:+, }m$n $(ens_mode "${SRV_PORT[$name]}" "$(srv_addr "$name")")"
  done
  printf '%s' "$out"
}

# ens_run_workload W KIND ROUND INFLIGHT [SECONDS]: one rzk-bench run against KIND's
# ensemble; result files as compare.sh's run_workload names them (runs/W.KIND.iK.rR.*).
ens_run_workload() {
  local w=$1 kind=$2 round=$3 inflight=$4 secs=${5:-$SECONDS_PER_RUN} base rc=0
  base="$WORK_DIR/runs/$w.$kind.i$inflight.r$round"
  [ "$round" != warmup ] || base="$WORK_DIR/runs/warmup/$w.$kind.i$inflight"
  timeout --kill-after=10 $((secs * 4 + 300)) "$RZK_BENCH_BIN" run --server "$(ens_connect "$kind")" \
    --workload "$w" --sessions "$SESSIONS" --inflight "$inflight" --value-bytes "$VALUE_BYTES" \
    --seconds "$secs" --seed "${round/warmup/0}" --server-pid "$(ens_pids "$kind")" --json \
    >"$base.json" 2>"$base.err" || rc=$?
  echo $rc >"$base.rc"
  local summary ok=1
  summary=$(python3 "$REPO_ROOT/benches/scripts/report.py" line "$base.json") || ok=0
  log "round $round $w x$inflight on the $kind ensemble: $summary (exit $rc)"
  if [ $rc != 0 ] || [ $ok = 0 ]; then
    FAILED=1
    log "rzk-bench reported a failure; its stderr:"
    tail -20 "$base.err" >&2
  fi
}

# ens_memory KIND LABEL: each member's role, VmRSS and VmHWM (peak) in KiB, one JSON
# line per member into mem/KIND.LABEL.jsonl.
ens_memory() {
  local kind=$1 label=$2 n name pid
  mkdir -p "$WORK_DIR/mem"
  for ((n = 1; n <= ENS_SIZE; n++)); do
    name=$(ens_member "$kind" "$n")
    pid=${SRV_PID[$name]}
    printf '{"member":%s,"mode":"%s","rss_kib":%s,"hwm_kib":%s}\n' "$n" \
      "$(ens_mode "${SRV_PORT[$name]}" "$(srv_addr "$name")")" "$(rss_kib "$pid")" \
      "$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status")" >>"$WORK_DIR/mem/$kind.$label.jsonl"
  done
}

# Writes this run's section with a report script (its `report` command, with the
# options every ensemble mode passes and the mode's own after SCRIPT and WHAT),
# prints it, and replaces the section in BENCHMARKS.md unless --no-write.
ens_report() {
  local script=$1 what=$2
  shift 2
  python3 "$REPO_ROOT/benches/scripts/$script" report --work-dir "$WORK_DIR" \
    --command "$CMD_SHOWN" "${BINS_FROM_ENV[@]}" --note "$NOTE" \
    --zk-jvm "$(zk_jvm_flags "$ZK_HEAP" "$ZK_XMS")" --rzk-bin "$RZK_BIN" \
    --rounds "$ROUNDS" --seconds "$SECONDS_PER_RUN" --warmup-seconds "$WARMUP" \
    --sessions "$SESSIONS" --inflights "$INFLIGHTS" --value-bytes "$VALUE_BYTES" \
    --snap-count "$SNAP_COUNT" "$@" >"$WORK_DIR/section.md"
  cat "$WORK_DIR/section.md"
  [ $FAILED = 0 ] || die "some rzk-bench runs failed or reported errors (see above); BENCHMARKS.md not written"
  if [ $WRITE = 1 ]; then
    python3 "$REPO_ROOT/benches/scripts/$script" write "$REPO_ROOT/BENCHMARKS.md" "$WORK_DIR/section.md"
    log "BENCHMARKS.md: $what section replaced"
  fi
}

ensemble_main() {
  [ $FOOTPRINT = 0 ] || die "--mode ensemble: --footprint is measured in standalone mode only"
  log "ensemble of $ENS_SIZE; ZooKeeper JVM flags: $(zk_jvm_flags "$ZK_HEAP" "$ZK_XMS")"
  local kind w r inflight first second
  for kind in "${ENS_KINDS[@]}"; do
    ens_prepare "$kind" "$WORK_DIR/$kind"
    ens_start "$kind"
    ens_memory "$kind" idle
  done
  if [ "$WARMUP" -gt 0 ]; then
    mkdir -p "$WORK_DIR/runs/warmup"
    for w in "${WL[@]}"; do
      for kind in "${ENS_KINDS[@]}"; do ens_run_workload "$w" "$kind" warmup "${INFL[-1]}" "$WARMUP"; done
    done
  fi
  for ((r = 1; r <= ROUNDS; r++)); do
    # Alternate who goes first, as in standalone mode.
    if ((r % 2)); then first=zookeeper second=rzk; else first=rzk second=zookeeper; fi
    for inflight in "${INFL[@]}"; do
      for w in "${WL[@]}"; do
        ens_run_workload "$w" "$first" "$r" "$inflight"
        ens_run_workload "$w" "$second" "$r" "$inflight"
      done
    done
  done
  for kind in "${ENS_KINDS[@]}"; do
    ens_memory "$kind" end
    log "$kind ensemble after the runs: $(ens_modes "$kind")"
    ens_stop "$kind"
  done

  ens_report ensemble_report.py ensemble --workloads "$WORKLOADS"
  exit 0
}
