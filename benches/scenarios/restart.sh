#!/usr/bin/env bash
# benches/run restart: restart time of rzk with a large tree, repeated on copies
# of one populated data directory.
#
#   benches/run restart [--znodes N] [--rounds K] [--snapshot-rounds K] [--stop kill|term]
#                      [--work-dir D] [--keep] [--set key=value ...]
#
# Populates N znodes (128 B values) under /rzk-populate-0.. (at most 100,000
# children per parent), stops the server (kill -9 by default: the restart then
# loads the newest snapshot and replays the log after it; `term` lets it stop
# gracefully), keeps that data directory, and K times: copies it afresh, starts
# rzk on the copy and times from just before exec until `rzk-bench wait-serving`
# reads the last parent with all its children (the first answered read that
# proves the tree is loaded). The page cache holds the files, as after a crash
# and restart on the same host. Prints one line per round and the median;
# with the offset of each start-up log line of the server after exec.
#
# --set key=value (repeatable) is given to the restarted server only.
# --snapshot-rounds K (default 0): also K times, on a fresh copy started with
# snapCount=2, a few setData (so a snapshot of the whole tree begins at once),
# and the time from the server's "snapshot started" to its "snapshot saved"
# log line: the tree serialised in steps, written, fsynced, cataloged, and
# the older history purged.
#
# Binaries: RZK_BIN and RZK_BENCH_BIN (default target/release/rzk and
# target/release/rzk-bench of this checkout).
set -euo pipefail
# shellcheck source=../scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
RZK_BIN=${RZK_BIN:-$REPO_ROOT/target/release/rzk}
RZK_BENCH_BIN=${RZK_BENCH_BIN:-$REPO_ROOT/target/release/rzk-bench}
RESTART_SETS=()
ZNODES=1000000 ROUNDS=3 SNAP_ROUNDS=0 STOP=kill WORK_DIR="" KEEP=0 CHUNK=100000
while [ $# -gt 0 ]; do
  case $1 in
  --znodes) ZNODES=$2; shift ;;
  --rounds) ROUNDS=$2; shift ;;
  --snapshot-rounds) SNAP_ROUNDS=$2; shift ;;
  --stop) STOP=$2; shift ;;
  --work-dir) WORK_DIR=$2; shift ;;
  --keep) KEEP=1 ;;
  --set) RESTART_SETS+=(--set "$2"); shift ;;
  *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
case $STOP in kill | term) ;; *) echo "--stop is kill or term" >&2; exit 2 ;; esac
work_dir /var/tmp/rzk-restart "$WORK_DIR"
# One server record (lib.sh), started on one port each time, on the data dir given.
prepare_rzk srv "$WORK_DIR"
PORT=${SRV_PORT[srv]}
PID=""
chunks=$(((ZNODES + CHUNK - 1) / CHUNK))
chunk_size() { local left=$((ZNODES - $1 * CHUNK)); [ $left -lt $CHUNK ] && echo $left || echo $CHUNK; }
last=$((chunks - 1))

start() { # start DIR LOG [--set k=v ...]: sets PID
  local dir=$1 logf=$2
  shift 2
  SRV_DATA[srv]=$dir SRV_LOG[srv]=$logf
  : >"$logf"
  launch srv "$WORK_DIR/t0" "$@"
  PID=${SRV_PID[srv]}
}
stop() {
  if [ "$STOP" = kill ]; then kill_server srv; else stop_server srv; fi
  PID=""
}

if [ ! -d "$WORK_DIR/populated" ]; then
  start "$WORK_DIR/populated" "$WORK_DIR/populate.log"
  "$RZK_BENCH_BIN" wait-serving --server "127.0.0.1:$PORT" >/dev/null
  for ((i = 0; i < chunks; i++)); do
    "$RZK_BENCH_BIN" populate --server "127.0.0.1:$PORT" --znodes "$(chunk_size $i)" \
      --path "/rzk-populate-$i" --json >/dev/null
  done
  stop
fi
echo "data: $(du -sh "$WORK_DIR/populated" | cut -f1), $ZNODES znodes, stopped by $STOP; uptime: $(uptime)"
results=()
for ((r = 1; r <= ROUNDS; r++)); do
  rm -rf "$WORK_DIR/run"
  cp -a "$WORK_DIR/populated" "$WORK_DIR/run"
  sync
  start "$WORK_DIR/run" "$WORK_DIR/run-$r.log" "${RESTART_SETS[@]}"
  "$RZK_BENCH_BIN" wait-serving --server "127.0.0.1:$PORT" --timeout-seconds 300 \
    --check-path "/rzk-populate-$last" --expect-children "$(chunk_size $last)" >/dev/null
  # From just before exec (lib.sh's launch writes the time there).
  t1=$(now_ns) t0=$(cat "$WORK_DIR/t0")
  ms=$(((t1 - t0) / 1000000))
  results+=("$ms")
  echo "round $r: exec to first read of all $(chunk_size $last) children of /rzk-populate-$last: $ms ms"
  # Phases: each of the server's start-up log lines, in ms after exec.
  python3 - "$t0" "$WORK_DIR/run-$r.log" <<'PY'
import datetime, re, sys
t0 = int(sys.argv[1]) / 1e9
keys = ("log recovered", "replicator open", "serving clients", "snapshot read, checked and loaded",
        "snapshot loaded", "serving role")
for line in open(sys.argv[2], errors="replace"):
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z", line)
    k = next((k for k in keys if k in line), None)
    if m and k:
        t = datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc).timestamp()
        extra = re.search(r"ms=\d+", line)
        print(f"  {1000 * (t - t0):7.0f} ms  {k}" + (f" ({extra.group(0)})" if extra else ""))
PY
  kill_server srv; PID=""
done
[ "$ROUNDS" -gt 0 ] && printf '%s\n' "${results[@]}" | sort -n | awk '{a[NR]=$1} END {print "median of " NR ": " a[int((NR+1)/2)] " ms"}'

for ((r = 1; r <= SNAP_ROUNDS; r++)); do
  rm -rf "$WORK_DIR/run"
  cp -a "$WORK_DIR/populated" "$WORK_DIR/run"
  sync
  logf="$WORK_DIR/snap-$r.log"
  start "$WORK_DIR/run" "$logf" --set snapCount=2
  "$RZK_BENCH_BIN" wait-serving --server "127.0.0.1:$PORT" --timeout-seconds 300 >/dev/null
  # Snapshots begun while the log was replayed (snapCount=2) end first.
  for ((w = 0; w < 6000; w++)); do
    [ "$(grep -ac "snapshot started" "$logf")" = "$(grep -ac "rzk_server::core: snapshot saved" "$logf")" ] && break
    sleep 0.1
  done
  "$RZK_BENCH_BIN" run --server "127.0.0.1:$PORT" --workload set --ops 1 --sessions 1 --inflight 1 >/dev/null 2>&1
  ms=""
  for ((w = 0; w < 6000; w++)); do
    ms=$(python3 - "$logf" "$ZNODES" <<'PY'
import datetime, re, sys
def ts(line):
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z", line)
    return datetime.datetime.fromisoformat(m.group(1)).timestamp() if m else None
started, serving = None, False
for line in open(sys.argv[1], errors="replace"):
    if "serving role" in line:
        serving = True  # snapshots begun by the replay of the log are not timed
    elif serving and not started and "snapshot started" in line:
        n = re.search(r"nodes=(\d+)", line)
        z = re.search(r"zxid=(\S+)", line)
        if n and int(n.group(1)) >= int(sys.argv[2]):
            started = (ts(line), n.group(1), z.group(1))
    elif started and "rzk_server::core: snapshot saved zxid=" + started[2] in line:
        print("%.0f ms for %s znodes" % (1000 * (ts(line) - started[0]), started[1]))
        break
PY
)
    [ -n "$ms" ] && break
    sleep 0.1
  done
  echo "snapshot round $r: ${ms:-not saved within 600 s} (uptime: $(uptime | sed 's/.*load/load/'))"
  kill_server srv; PID=""
done
echo "uptime after: $(uptime)"
