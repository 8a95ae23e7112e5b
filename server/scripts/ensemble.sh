#!/usr/bin/env bash
# A 3-member rzk ensemble on one machine, configured the ZooKeeper way: one
# zoo.cfg per member with the same server.N lines, and myid in each dataDir.
# A thin wrapper over the repository's ensemble launcher, rzk-ensemble
# (testkit/README.md), with the ports fixed:
#
#   server/scripts/ensemble.sh start [DIR]   # writes DIR/m{1,2,3}/zoo.cfg and myid, starts 3 rzk, waits for a leader
#   server/scripts/ensemble.sh status [DIR]  # pid and Mode of each member
#   server/scripts/ensemble.sh stop [DIR]    # SIGTERM to the PIDs it started
#
# Ports: member N serves clients on 2180+N (2181..2183), its quorum port (gRPC:
# election, sync, broadcast, forwarded requests) is 2887+N, its election port
# 3887+N is listed as ZooKeeper requires but rzk does not use it, its AdminServer
# is on 127.0.0.1:8079+N; BASE=... moves them all by BASE-2180. The binaries are
# target/release/rzk and target/release/rzk-ensemble unless RZK_BIN and
# RZK_ENSEMBLE are set.
set -euo pipefail
cmd=${1:-start}
dir=${2:-${TMPDIR:-/tmp}/rzk-ensemble}
base=${BASE:-2180}
shift_by=$((base - 2180)) # every port moves with BASE
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${RZK_BIN:-$here/target/release/rzk}
cli=${RZK_ENSEMBLE:-$here/target/release/rzk-ensemble}
[ -x "$cli" ] || {
  echo "no $cli: cargo build --release -p rzk-server -p rzk-testkit (or set RZK_ENSEMBLE)" >&2
  exit 2
}

case "$cmd" in
  start)
    [ -x "$bin" ] || { echo "no $bin: cargo build --release -p rzk-server (or set RZK_BIN)" >&2; exit 2; }
    connect=$("$cli" start --dir "$dir" --rzk "$bin" --voters 3 \
      --client-port $((base + 1)) --quorum-port $((2888 + shift_by)) \
      --election-port $((3888 + shift_by)) --admin --admin-port $((8080 + shift_by)))
    echo "connect string: $connect"
    ;;
  status) exec "$cli" status --dir "$dir" ;;
  stop) exec "$cli" stop --dir "$dir" ;;
  *)
    echo "usage: $0 start|status|stop [DIR]" >&2
    exit 2
    ;;
esac
