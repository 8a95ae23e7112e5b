#!/usr/bin/env bash
# benches/run log-memory: memory of a standalone rzk whose whole history is log
# (snapCount=1000000000, so no snapshot ever trims it), during a write load and
# at the restart on that log (the bounded in-memory log window).
#
#   benches/run log-memory OPS VALUE_BYTES RZK_BINARY...
#
# For each binary: a fresh data directory, OPS setData of VALUE_BYTES on 32
# sessions x 8 in flight (the tree keeps its size, the log grows), then VmHWM
# and VmRSS of the server from /proc/<pid>/status; kill -9; the same binary
# started again on that directory: time from exec until `rzk-bench
# wait-serving` answers, and VmHWM / VmRSS then. RZK_BENCH_BIN defaults to
# target/release/rzk-bench of this checkout.
set -euo pipefail
# shellcheck source=../scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
BENCH=${RZK_BENCH_BIN:-$REPO_ROOT/target/release/rzk-bench}
[ $# -ge 3 ] || { echo "usage: $0 OPS VALUE_BYTES RZK_BINARY..." >&2; exit 2; }
OPS=$1 VB=$2
shift 2
PID="" W=""
trap 'cleanup_started; [ -z "$W" ] || rm -rf "$W"' EXIT
mib() { echo $(($(awk "/$1/{print \$2}" /proc/"$PID"/status) / 1024)); }
mem() { echo "VmHWM $(mib VmHWM) MiB, VmRSS $(mib VmRSS) MiB"; }
start() { # start BINARY LOG: a fresh port each time (lib.sh's record srv), data in $W/data
  prepare_rzk srv "$W" snapCount=1000000000
  SRV_BIN[srv]=$1 SRV_LOG[srv]=$2
  launch srv "$W/t0"
  PID=${SRV_PID[srv]} P=${SRV_PORT[srv]}
}
stop() { kill_server srv; PID=""; }
echo "uptime: $(uptime)"
for B in "$@"; do
  W=$(mktemp -d /var/tmp/rzk-log-memory.XXXXXX)
  start "$B" "$W/load.log"
  "$BENCH" wait-serving --server "127.0.0.1:$P" >/dev/null
  "$BENCH" run --server "127.0.0.1:$P" --workload set --ops "$OPS" --value-bytes "$VB" \
    --sessions 32 --inflight 8 --json >"$W/run.json"
  echo "$B: after $OPS setData of $VB B: $(mem); log $(du -sh "$W/data/log" | cut -f1)"
  stop
  start "$B" "$W/restart.log"
  "$BENCH" wait-serving --server "127.0.0.1:$P" --timeout-seconds 300 >/dev/null
  # From just before exec (lib.sh's launch writes the time there).
  t1=$(date +%s%N) t0=$(cat "$W/t0")
  echo "$B: restart, serving after $(((t1 - t0) / 1000000)) ms: $(mem)"
  stop
  rm -rf "$W"
  W=""
done
