# The footprint part of benches/scenarios/compare.sh (sourced by it; uses lib.sh and the
# options compare.sh parsed). For each server, one at a time on a fresh data dir:
#   memory:  VmRSS after `rzk-bench populate --znodes FP_ZNODES`, then VmRSS while
#            FP_IDLE idle sessions are held (`rzk-bench idle-sessions`, after READY);
#   restart: populate FP_RESTART znodes; drive setData until the server begins a
#            snapshot of the populated tree and time it from the server's own log;
#            stop gracefully, wait for the exit, start again and time from just
#            before exec until `rzk-bench wait-serving` sees the children of the
#            last populated parent (then checks the others).
# Results go to $WORK_DIR/fp/<kind>.txt as key=value lines for report.py.

# Populates go to parents /rzk-populate-0, -1, ... of at most FP_CHUNK children
# each: rzk-bench populate's count-check session is idle while the children are
# created, and a populate longer than its 30 s session timeout loses it (seen
# on ZooKeeper with 1M children in one populate).
FP_PATH=/rzk-populate
FP_CHUNK=100000
# Requests in flight per session of the populates and the snapshot trigger.
FP_INFLIGHT=8

fp_put() { printf '%s=%s\n' "$2" "$3" >>"$WORK_DIR/fp/$1.txt"; }

# fp_prepare KIND NAME DIR: KIND is rzk, zookeeper (its heap as --zk-xms says) or
# zookeeper-xms (-Xms = -Xmx: the heap committed up front).
fp_prepare() {
  local kind=$1 name=$2 dir=$3
  case $kind in
  zookeeper) prepare_zookeeper "$name" "$dir" "$ZK_HEAP" "$ZK_XMS" ;;
  zookeeper-xms) prepare_zookeeper "$name" "$dir" "$ZK_HEAP" 1 ;;
  rzk) prepare_rzk "$name" "$dir" ;;
  esac
}

# The number of chunks of N znodes, and the size of chunk I.
fp_chunks() { echo $((($1 + FP_CHUNK - 1) / FP_CHUNK)); }
fp_chunk_size() {
  local n=$1 i=$2 rest=$(($1 - $2 * FP_CHUNK))
  [ $rest -lt $FP_CHUNK ] && echo $rest || echo $FP_CHUNK
}

# fp_populate KIND NAME N TAG: N znodes with rzk-bench populate, chunk by chunk;
# the total goes to fp/KIND.TAG.json as {"znodes","seconds","ops_per_sec"}.
fp_populate() {
  local kind=$1 name=$2 n=$3 tag=$4 i chunks secs=0
  chunks=$(fp_chunks "$n")
  log "$kind: populate $n znodes of $VALUE_BYTES B under $FP_PATH-0..$((chunks - 1))"
  for ((i = 0; i < chunks; i++)); do
    local out="$WORK_DIR/fp/$kind.$tag.$i.json"
    if ! timeout --kill-after=10 1800 "$RZK_BENCH_BIN" populate --server "127.0.0.1:${SRV_PORT[$name]}" \
      --znodes "$(fp_chunk_size "$n" "$i")" --value-bytes "$VALUE_BYTES" --path "$FP_PATH-$i" \
      --sessions "$SESSIONS" --inflight "$FP_INFLIGHT" --json >"$out" 2>"$out.err"; then
      tail -20 "$out.err" >&2
      die "$kind: rzk-bench populate failed"
    fi
    secs=$(python3 -c 'import json,sys; print(float(sys.argv[1]) + json.loads(open(sys.argv[2]).read().split("\n")[0])["seconds"])' "$secs" "$out")
  done
  python3 -c 'import json,sys; n,s=int(sys.argv[1]),float(sys.argv[2]); print(json.dumps({"znodes":n,"seconds":round(s,3),"ops_per_sec":round(n/s,1)}))' \
    "$n" "$secs" >"$WORK_DIR/fp/$kind.$tag.json"
  log "$kind: populated: $(cat "$WORK_DIR/fp/$kind.$tag.json")"
}

fp_memory() {
  local kind=$1 name="mem-$1"
  fp_prepare "$kind" "$name" "$WORK_DIR/fp-mem-$kind"
  start_server "$name"
  local pid=${SRV_PID[$name]}
  fp_put "$kind" rss_started_kib "$(rss_kib "$pid")"
  fp_populate "$kind" "$name" "$FP_ZNODES" populate-mem
  fp_put "$kind" rss_populated_kib "$(rss_kib "$pid")"

  # Idle sessions: held until we close rzk-bench's stdin (a fifo we hold open).
  local out="$WORK_DIR/fp/$kind.idle.out" fifo="$WORK_DIR/fp/$kind.idle.fifo" ipid
  mkfifo "$fifo"
  "$RZK_BENCH_BIN" idle-sessions --server "127.0.0.1:${SRV_PORT[$name]}" --sessions "$FP_IDLE" \
    --hold-seconds 900 <"$fifo" >"$out" 2>"$out.err" &
  ipid=$!
  STARTED_PIDS+=("$ipid")
  exec 4>"$fifo"
  log "$kind: opening $FP_IDLE idle sessions"
  local t0 deadline=$(($(date +%s) + 900))
  t0=$(now_ns)
  until grep -q '^READY' "$out"; do
    if ! kill -0 "$ipid" 2>/dev/null; then
      exec 4>&-
      tail -20 "$out.err" >&2
      die "$kind: rzk-bench idle-sessions exited before READY"
    fi
    [ "$(date +%s)" -lt $deadline ] || { exec 4>&-; die "$kind: no READY within 900 s"; }
    sleep 0.1
  done
  fp_put "$kind" idle_connect_ms $((($(now_ns) - t0) / 1000000))
  fp_put "$kind" rss_idle_kib "$(rss_kib "$pid")"
  log "$kind: $(head -1 "$out"); server VmRSS $(rss_kib "$pid") KiB"
  exec 4>&- # stdin closes: rzk-bench closes its sessions and exits
  local i rc=0
  for ((i = 0; i < 1200; i++)); do
    kill -0 "$ipid" 2>/dev/null || break
    sleep 0.05
  done
  kill -0 "$ipid" 2>/dev/null && stop_pid "$ipid" 30
  wait "$ipid" || rc=$?
  [ $rc = 0 ] || { tail -20 "$out.err" >&2; die "$kind: rzk-bench idle-sessions exited with $rc"; }
  stop_server "$name"
}

# fp_snapshot KIND NAME: after the populate, drives setData in chunks until the
# server's log shows a snapshot begun after the populate ended, then waits for it
# to finish and records its duration (report.py snapshot reads the log).
fp_snapshot() {
  local kind=$1 name=$2 logf=${SRV_LOG[$2]} from i found=0
  from=$(wc -l <"$logf")
  fp_put "$kind" snapshot_log_from_line "$from"
  local args=(snapshot --kind "$kind" --log "$logf" --from-line "$from" --min-nodes "$FP_RESTART")
  for ((i = 1; i <= 60; i++)); do
    if python3 "$REPO_ROOT/benches/scripts/report.py" "${args[@]}" --started >/dev/null; then
      found=1
      break
    fi
    local out="$WORK_DIR/fp/$kind.trigger.$i.json"
    timeout --kill-after=10 600 "$RZK_BENCH_BIN" run --server "127.0.0.1:${SRV_PORT[$name]}" --workload set --ops 5000 \
      --sessions "$SESSIONS" --inflight "$FP_INFLIGHT" --value-bytes "$VALUE_BYTES" --seed "$i" \
      --json >"$out" 2>"$out.err" || { tail -20 "$out.err" >&2; die "$kind: setData to trigger a snapshot failed"; }
  done
  [ $found = 1 ] || die "$kind: no snapshot began after 60 x 5000 setData (snapCount is $SNAP_COUNT)"
  fp_put "$kind" snapshot_trigger_chunks $((i - 1))
  local deadline=$(($(date +%s) + 600)) ms
  until ms=$(python3 "$REPO_ROOT/benches/scripts/report.py" "${args[@]}" 2>/dev/null); do
    [ "$(date +%s)" -lt $deadline ] || die "$kind: the snapshot did not finish within 600 s"
    sleep 0.2
  done
  fp_put "$kind" snapshot_ms "$ms"
  log "$kind: snapshot of >= $FP_RESTART znodes took $ms ms (from its log)"
}

fp_restart() {
  local kind=$1 name="restart-$1"
  fp_prepare "$kind" "$name" "$WORK_DIR/fp-restart-$kind"
  start_server "$name"
  fp_populate "$kind" "$name" "$FP_RESTART" populate-restart
  fp_put "$kind" rss_populated_restart_kib "$(rss_kib "${SRV_PID[$name]}")"
  fp_snapshot "$kind" "$name"
  local t0
  t0=$(now_ns)
  stop_server "$name"
  fp_put "$kind" stop_ms $((($(now_ns) - t0) / 1000000))
  echo "--- restart ---" >>"${SRV_LOG[$name]}"
  local t0file="${SRV_DIR[$name]}/t0-restart" ws end
  launch "$name" "$t0file"
  # Serving, and the last chunk's children are all there (a server loads its
  # whole snapshot and log before it serves; the other chunks are checked below).
  local last=$(($(fp_chunks "$FP_RESTART") - 1))
  ws=$(wait_serving "$name" --timeout-seconds 900 --check-path "$FP_PATH-$last" \
    --expect-children "$(fp_chunk_size "$FP_RESTART" "$last")") ||
    die "$kind: not serving $FP_RESTART znodes within 900 s of the restart"
  end=$(now_ns)
  local i
  for ((i = 0; i < last; i++)); do
    wait_serving "$name" --timeout-seconds 60 --check-path "$FP_PATH-$i" \
      --expect-children "$(fp_chunk_size "$FP_RESTART" "$i")" >/dev/null ||
      die "$kind: $FP_PATH-$i does not have its children after the restart"
  done
  local ms=$(((end - $(cat "$t0file")) / 1000000))
  fp_put "$kind" restart_ms "$ms"
  fp_put "$kind" restart_wait_serving_ms "$(printf '%s' "$ws" | tr -dc '0-9.')"
  fp_put "$kind" rss_restarted_kib "$(rss_kib "${SRV_PID[$name]}")"
  log "$kind: serving $FP_RESTART znodes $ms ms after exec"
  stop_server "$name"
}

footprint() {
  raise_nofile "$FP_IDLE"
  local kind xms_kind=zookeeper-xms
  # ZooKeeper's memory both ways: heap grown as used, and committed up front.
  [ "$ZK_XMS" = 0 ] || xms_kind=""
  for kind in zookeeper $xms_kind rzk; do fp_memory "$kind"; done
  for kind in zookeeper rzk; do fp_restart "$kind"; done
}
