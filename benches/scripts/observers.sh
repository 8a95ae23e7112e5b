# The observer topology of `benches/run compare --mode observers`
# (benches/scenarios/compare.sh): 3 voters + 2 observers of Apache ZooKeeper 3.8
# (observerMasterPort on every member) against the
# same of rzk, beside 3 voters without observers of each, all on this machine.
# Sourced by compare.sh after its options, binaries and work dir are set; uses
# lib.sh's records and ensemble.sh's ens_* helpers; observers_main runs everything,
# writes the report and exits.
#
# Addresses: every ensemble has its own 127.0.E.0/24 and member N listens on
# 127.0.E.N (clients, quorum and election ports). On one host this is what
# ZooKeeper's observer master needs: an observer dials a voter at the address of
# that voter's server.N line and at the observer's *own* observerMasterPort, so all
# members share one observerMasterPort number and only distinct addresses keep them
# apart. All of 127/8 is loopback on Linux; binding it needs no root.
#
# The runs (labels, as the result files and the report name them):
#   get-observers   getData, the sessions on the two observers (members 4, 5)
#   get-all         getData, the sessions spread over all five members
#   create-voters   create, the sessions on the three voters, observers attached
#   create-noobs    create on the 3-voter ensemble without observers
#   set-voters      setData, the sessions on the three voters, observers attached
#   set-noobs       setData on the 3-voter ensemble without observers
# Each run is one rzk-bench with the connect string of its members (session i on
# member i mod M); --server-pid gets every member of the ensemble, so "server CPU
# per op" is the whole ensemble's (observers included) per operation answered.

# Ensembles: id -> server kind, size, number of voters, address prefix.
declare -A OBS_KIND=([zookeeper]=zookeeper [rzk]=rzk [zookeeper3]=zookeeper [rzk3]=rzk)
declare -A OBS_SIZE=([zookeeper]=5 [rzk]=5 [zookeeper3]=3 [rzk3]=3)
declare -A OBS_NET=([zookeeper]=127.0.1 [rzk]=127.0.2 [zookeeper3]=127.0.3 [rzk3]=127.0.4)
OBS_VOTERS=3
OBS_IDS=(zookeeper rzk zookeeper3 rzk3)
# Each write with observers next to the same without, so the two see the same load.
OBS_LABELS_ALL=get-observers,get-all,create-voters,create-noobs,set-voters,set-noobs

# obs_label_target LABEL: "SUFFIX WORKLOAD MEMBERS..." for a label: the run goes to
# ensemble KIND (SUFFIX -) or KIND3 (SUFFIX 3), to the members listed.
obs_label_target() {
  case $1 in
  get-observers) echo "- get 4 5" ;;
  get-all) echo "- get 1 2 3 4 5" ;;
  create-voters) echo "- create 1 2 3" ;;
  set-voters) echo "- set 1 2 3" ;;
  create-noobs) echo "3 create 1 2 3" ;;
  set-noobs) echo "3 set 1 2 3" ;;
  *) return 1 ;;
  esac
}

# obs_prepare ID DIR: records ensemble ID (ensemble.sh's ens_prepare): OBS_VOTERS voters
# and the rest observers, member N on NET.N, one observerMasterPort number free on
# every member's address (rzk-ensemble --observer-master shared), `:observer` on the
# observers' lines and peerType=observer in their zoo.cfg. ens_start starts it.
obs_prepare() {
  local id=$1 dir=$2 size=${OBS_SIZE[$1]}
  local shape=(--voters "$OBS_VOTERS")
  [ "$size" -le "$OBS_VOTERS" ] || shape+=(--observers $((size - OBS_VOTERS)))
  ens_prepare "$id" "$dir" "${OBS_KIND[$id]}" "${shape[@]}" --net "${OBS_NET[$id]}" \
    --observer-master shared
}

# obs_4lw ADDR PORT WORD: the answer of a four-letter word ("" if none).
obs_4lw() {
  (
    exec 3<>"/dev/tcp/$1/$2" || exit 1
    printf '%s' "$3" >&3
    timeout 5 cat <&3
  ) 2>/dev/null || true
}

# obs_snapshot_state ID LABEL: srvr and mntr of every member into
# state/ID.mLABEL.N.{srvr,mntr} (the report reads roles and synced_observers).
obs_snapshot_state() {
  local id=$1 label=$2 n name
  mkdir -p "$WORK_DIR/state"
  for ((n = 1; n <= ${OBS_SIZE[$id]}; n++)); do
    name=$(ens_member "$id" "$n")
    obs_4lw "$(srv_addr "$name")" "${SRV_PORT[$name]}" srvr >"$WORK_DIR/state/$id.$label.$n.srvr"
    obs_4lw "$(srv_addr "$name")" "${SRV_PORT[$name]}" mntr >"$WORK_DIR/state/$id.$label.$n.mntr"
  done
}

# obs_run LABEL KIND ROUND INFLIGHT [SECONDS]: one rzk-bench run; result files
# runs/LABEL.KIND.iK.rR.{json,err,rc,load} (round warmup: runs/warmup/).
obs_run() {
  local label=$1 kind=$2 round=$3 inflight=$4 secs=${5:-$SECONDS_PER_RUN} base rc=0
  local suffix w members id
  read -r suffix w members <<<"$(obs_label_target "$label")"
  id=$kind${suffix#-}
  base="$WORK_DIR/runs/$label.$kind.i$inflight.r$round"
  [ "$round" != warmup ] || base="$WORK_DIR/runs/warmup/$label.$kind.i$inflight"
  cut -d' ' -f1 /proc/loadavg >"$base.load"
  # shellcheck disable=SC2086
  timeout --kill-after=10 $((secs * 4 + 300)) "$RZK_BENCH_BIN" run --server "$(ens_connect "$id" $members)" \
    --workload "$w" --sessions "$SESSIONS" --inflight "$inflight" --value-bytes "$VALUE_BYTES" \
    --seconds "$secs" --seed "${round/warmup/0}" --server-pid "$(ens_pids "$id" $(seq 1 "${OBS_SIZE[$id]}"))" --json \
    >"$base.json" 2>"$base.err" || rc=$?
  echo $rc >"$base.rc"
  local summary ok=1
  summary=$(python3 "$REPO_ROOT/benches/scripts/report.py" line "$base.json") || ok=0
  log "round $round $label x$inflight on $id (members $members; load $(cat "$base.load")): $summary (exit $rc)"
  if [ $rc != 0 ] || [ $ok = 0 ]; then
    FAILED=1
    log "rzk-bench reported a failure; its stderr:"
    tail -20 "$base.err" >&2
  fi
}

observers_main() {
  [ $FOOTPRINT = 0 ] || die "--mode observers: --footprint is measured in standalone mode only"
  local labels=$OBS_LABELS_ALL
  [ $workloads_given = 0 ] || labels=$WORKLOADS
  local l
  IFS=, read -r -a OBS_LABELS <<<"$labels"
  for l in "${OBS_LABELS[@]}"; do
    obs_label_target "$l" >/dev/null || die "--mode observers --workloads: $l is not one of $OBS_LABELS_ALL"
  done
  log "observers: 3 voters + 2 observers, and 3 voters alone, of each; ZooKeeper JVM flags: $(zk_jvm_flags "$ZK_HEAP" "$ZK_XMS")"
  echo "start $(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)" >"$WORK_DIR/uptime"
  local id
  for id in "${OBS_IDS[@]}"; do obs_prepare "$id" "$WORK_DIR/$id"; done
  # Start them one at a time: eight JVMs electing at once on a small machine only
  # makes every start slower.
  for id in "${OBS_IDS[@]}"; do
    ENS_SIZE=${OBS_SIZE[$id]}
    ens_start "$id"
    ens_memory "$id" idle
    obs_snapshot_state "$id" start
  done
  local r n inflight kind first second
  if [ "$WARMUP" -gt 0 ]; then
    mkdir -p "$WORK_DIR/runs/warmup"
    for l in "${OBS_LABELS[@]}"; do
      for kind in "${ENS_KINDS[@]}"; do obs_run "$l" "$kind" warmup "${INFL[-1]}" "$WARMUP"; done
    done
  fi
  local order=()
  for ((r = 1; r <= ROUNDS; r++)); do
    # Alternate who goes first, as in the other modes, and the order of the runs
    # (a with-observers run goes first in odd rounds, its without-run in even ones).
    if ((r % 2)); then
      first=zookeeper second=rzk order=("${OBS_LABELS[@]}")
    else
      first=rzk second=zookeeper order=()
      for ((n = ${#OBS_LABELS[@]} - 1; n >= 0; n--)); do order+=("${OBS_LABELS[n]}"); done
    fi
    for inflight in "${INFL[@]}"; do
      for l in "${order[@]}"; do
        obs_run "$l" "$first" "$r" "$inflight"
        obs_run "$l" "$second" "$r" "$inflight"
      done
    done
  done
  for id in "${OBS_IDS[@]}"; do
    ENS_SIZE=${OBS_SIZE[$id]}
    ens_memory "$id" end
    obs_snapshot_state "$id" end
    log "$id after the runs: $(ens_modes "$id")"
  done
  echo "end $(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)" >>"$WORK_DIR/uptime"
  for id in "${OBS_IDS[@]}"; do
    ENS_SIZE=${OBS_SIZE[$id]}
    ens_stop "$id"
  done

  ens_report observers_report.py observer --labels "$labels"
  exit 0
}
