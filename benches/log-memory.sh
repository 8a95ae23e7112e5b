#!/usr/bin/env bash
# benches/log-memory.sh: memory of a standalone rzk whose whole history is log
# (snapCount=1000000000, so no snapshot ever trims it), during a write load and
# at the restart on that log (issue 11: the bounded in-memory log window).
#
#   benches/log-memory.sh OPS VALUE_BYTES RZK_BINARY...
#
# For each binary: a fresh data directory, OPS setData of VALUE_BYTES on 32
# sessions x 8 in flight (the tree keeps its size, the log grows), then VmHWM
# and VmRSS of the server from /proc/<pid>/status; kill -9; the same binary
# started again on that directory: time from exec until `rzk-bench
# wait-serving` answers, and VmHWM / VmRSS then. RZK_BENCH_BIN defaults to
# target/release/rzk-bench of this checkout.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
BENCH=${RZK_BENCH_BIN:-$here/target/release/rzk-bench}
[ $# -ge 3 ] || { echo "usage: $0 OPS VALUE_BYTES RZK_BINARY..." >&2; exit 2; }
OPS=$1 VB=$2
shift 2
PID="" W=""
cleanup() {
  if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then kill -9 "$PID"; wait "$PID" 2>/dev/null || true; fi
  [ -z "$W" ] || rm -rf "$W"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
mib() { echo $(($(awk "/$1/{print \$2}" /proc/"$PID"/status) / 1024)); }
mem() { echo "VmHWM $(mib VmHWM) MiB, VmRSS $(mib VmRSS) MiB"; }
start() { # start BINARY PORT LOG
  "$1" --client-port "$2" --data-dir "$W/data" --set maxClientCnxns=0 \
    --set snapCount=1000000000 >"$3" 2>&1 &
  PID=$!
}
stop() { kill -9 "$PID"; wait "$PID" 2>/dev/null || true; PID=""; }
echo "uptime: $(uptime)"
for B in "$@"; do
  W=$(mktemp -d /var/tmp/rzk-log-memory.XXXXXX)
  P=$(port)
  start "$B" "$P" "$W/load.log"
  "$BENCH" wait-serving --server "127.0.0.1:$P" >/dev/null
  "$BENCH" run --server "127.0.0.1:$P" --workload set --ops "$OPS" --value-bytes "$VB" \
    --sessions 32 --inflight 8 --json >"$W/run.json"
  echo "$B: after $OPS setData of $VB B: $(mem); log $(du -sh "$W/data/log" | cut -f1)"
  stop
  P=$(port)
  t0=$(date +%s%N)
  start "$B" "$P" "$W/restart.log"
  "$BENCH" wait-serving --server "127.0.0.1:$P" --timeout-seconds 300 >/dev/null
  echo "$B: restart, serving after $((($(date +%s%N) - t0) / 1000000)) ms: $(mem)"
  stop
  rm -rf "$W"
  W=""
done
