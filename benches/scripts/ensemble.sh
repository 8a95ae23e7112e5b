# The ensemble topology of benches/compare.sh (--mode ensemble): 3 Apache ZooKeeper
# 3.8 members against 3 rzk members on this machine, every workload at every number
# of requests in flight, the sessions of each run spread over the members. Sourced
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
# Both ensembles are started the way an operator starts one: a zoo.cfg per member
# with the same server.N lines and myid in its dataDir. Settings as in standalone
# mode (tickTime=2000, forceSync=yes, snapCount, maxClientCnxns=0, 4lw whitelist,
# admin server off) plus initLimit=10, syncLimit=5. ZooKeeper members run
# QuorumPeerMain with the standalone run's JVM flags (-Xmx, no -Xms unless --zk-xms).

ENS_SIZE=3
# The two ensembles, by the names the result files carry (report.py's convention).
ENS_KINDS=(zookeeper rzk)

# ens_member KIND N: the lib.sh record name of member N of KIND's ensemble.
ens_member() { printf '%s-m%s' "$1" "$2"; }

# ens_prepare KIND DIR: writes DIR/m{1..3}/zoo.cfg and data/myid and records the
# members (SRV_* of lib.sh; ZooKeeper's heap flags too).
ens_prepare() {
  local kind=$1 dir=$2 n name lines="" client quorum election
  declare -gA ENS_CLIENT_PORT
  for ((n = 1; n <= ENS_SIZE; n++)); do
    client=$(free_port) quorum=$(free_port) election=$(free_port)
    ENS_CLIENT_PORT[$kind.$n]=$client
    lines+="server.$n=127.0.0.1:$quorum:$election;127.0.0.1:$client"$'\n'
  done
  for ((n = 1; n <= ENS_SIZE; n++)); do
    name=$(ens_member "$kind" "$n")
    ens_write_member "$kind" "$name" "$dir/m$n" "$n" "${ENS_CLIENT_PORT[$kind.$n]}" 127.0.0.1 "$lines"
  done
}

# ens_write_member KIND NAME DIR N CLIENT_PORT ADDR CFG_TAIL: one member's data dir,
# myid and zoo.cfg (the settings every ensemble of the benchmarks shares, then
# CFG_TAIL: its own keys and the server.N lines), ZooKeeper's log4j
# configuration, and the member recorded under NAME (SRV_*).
ens_write_member() {
  local kind=$1 name=$2 m=$3 n=$4 client=$5 addr=$6 tail=$7
  mkdir -p "$m/data" "$m/conf"
  echo "$n" >"$m/data/myid"
  {
    echo "tickTime=2000"
    echo "initLimit=10"
    echo "syncLimit=5"
    echo "dataDir=$m/data"
    echo "clientPort=$client"
    echo "clientPortAddress=$addr"
    echo "maxClientCnxns=0"
    echo "4lw.commands.whitelist=*"
    echo "admin.enableServer=false"
    echo "snapCount=$SNAP_COUNT"
    echo "forceSync=yes"
    printf '%s' "$tail"
  } >"$m/zoo.cfg"
  if [ "$kind" = zookeeper ]; then
    write_log4j "$m"
    ZK_HEAP_FOR[$name]=$ZK_HEAP ZK_XMS_FOR[$name]=$ZK_XMS
  fi
  SRV_KIND[$name]=$kind SRV_DIR[$name]=$m SRV_PORT[$name]=$client
  SRV_ADDR[$name]=$addr SRV_LOG[$name]=$m/server.log
}

# ens_argv NAME: the member's argv, one word per line: `rzk zoo.cfg`, or ZooKeeper's
# QuorumPeerMain with the same JVM flags and classpath as the standalone server.
ens_argv() {
  local name=$1 dir=${SRV_DIR[$1]}
  case ${SRV_KIND[$name]} in
  zookeeper)
    local cp="$dir/conf:$ZK_JARS/zookeeper.jar:$ZK_JARS/slf4j-log4j12.jar:$ZK_JARS/log4j-1.2.jar"
    # shellcheck disable=SC2046
    printf '%s\n' java $(zk_jvm_flags "${ZK_HEAP_FOR[$name]}" "${ZK_XMS_FOR[$name]:-0}") \
      "-Dlog4j.configuration=file:$dir/conf/log4j.properties" -cp "$cp" \
      org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg"
    ;;
  rzk) printf '%s\n' "$RZK_BIN" "$dir/zoo.cfg" ;;
  esac
}

# ens_start KIND: launches the three members (all before waiting: they elect a
# leader among themselves) and waits until each serves a session and a read.
ens_start() {
  local kind=$1 n name argv deadline
  for ((n = 1; n <= ENS_SIZE; n++)); do
    name=$(ens_member "$kind" "$n")
    mapfile -t argv < <(ens_argv "$name")
    NO_COLOR=1 RUST_LOG="${RZK_LOG:-info}" "${argv[@]}" >>"${SRV_LOG[$name]}" 2>&1 </dev/null &
    SRV_PID[$name]=$!
    STARTED_PIDS+=("$!")
  done
  deadline=$(($(date +%s) + 180))
  for ((n = 1; n <= ENS_SIZE; n++)); do
    name=$(ens_member "$kind" "$n")
    until ruok "${SRV_PORT[$name]}" "$(srv_addr "$name")"; do
      if ! kill -0 "${SRV_PID[$name]}" 2>/dev/null; then
        log "$name exited during startup; log tail:"
        tail -30 "${SRV_LOG[$name]}" >&2
        return 1
      fi
      [ "$(date +%s)" -lt "$deadline" ] || { log "$name: no imok within 180 s"; return 1; }
      sleep 0.1
    done
    wait_serving "$name" --timeout-seconds 180 >/dev/null
  done
  log "$kind ensemble serving on $(ens_connect "$kind") (pids $(ens_pids "$kind")); $(ens_modes "$kind")"
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
  local n
  for kind in "${ENS_KINDS[@]}"; do
    ens_memory "$kind" end
    log "$kind ensemble after the runs: $(ens_modes "$kind")"
    for ((n = 1; n <= ENS_SIZE; n++)); do stop_server "$(ens_member "$kind" "$n")"; done
  done

  ens_report ensemble_report.py ensemble --workloads "$WORKLOADS"
  exit 0
}
