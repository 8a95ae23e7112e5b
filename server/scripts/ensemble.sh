#!/usr/bin/env bash
# A 3-member rzk ensemble on one machine, configured the ZooKeeper way: one
# zoo.cfg per member with the same server.N lines, and myid in each dataDir.
#
#   server/scripts/ensemble.sh start [DIR]   # writes DIR/m{1,2,3}/zoo.cfg, starts 3 rzk
#   server/scripts/ensemble.sh status [DIR]  # srvr of each member
#   server/scripts/ensemble.sh stop [DIR]    # SIGTERM to the PIDs it started
#
# Ports: member N serves clients on 2180+N (2181..2183), its quorum port (gRPC:
# election, sync, broadcast, forwarded requests) is 2887+N, its election port
# 3887+N is listed as ZooKeeper requires but rzk does not use it, its AdminServer
# is on 8079+N; BASE=... moves them all by BASE-2180. The binary is
# target/release/rzk unless RZK_BIN is set.
set -euo pipefail
cmd=${1:-start}
dir=${2:-${TMPDIR:-/tmp}/rzk-ensemble}
base=${BASE:-2180}
shift_by=$((base - 2180)) # every port moves with BASE
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${RZK_BIN:-$here/target/release/rzk}

servers() {
  local i
  for i in 1 2 3; do
    echo "server.$i=127.0.0.1:$((2887 + shift_by + i)):$((3887 + shift_by + i));127.0.0.1:$((base + i))"
  done
}

srvr() {
  python3 - "$1" <<'EOF'
import socket, sys
try:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)
    s.sendall(b"srvr")
    out = b""
    while True:
        b = s.recv(4096)
        if not b:
            break
        out += b
    print(out.decode().strip())
except OSError as e:
    print(f"not answering: {e}")
EOF
}

case "$cmd" in
  start)
    [ -x "$bin" ] || { echo "no $bin: cargo build --release -p rzk-server (or set RZK_BIN)" >&2; exit 2; }
    for n in 1 2 3; do
      m="$dir/m$n"
      mkdir -p "$m/data"
      echo "$n" > "$m/data/myid"
      {
        echo "tickTime=2000"
        echo "initLimit=10"
        echo "syncLimit=5"
        echo "dataDir=$m/data"
        echo "clientPort=$((base + n))"
        echo "clientPortAddress=127.0.0.1"
        echo "admin.serverPort=$((8079 + shift_by + n))"
        echo "4lw.commands.whitelist=*"
        servers
      } > "$m/zoo.cfg"
      "$bin" "$m/zoo.cfg" > "$m/rzk.log" 2>&1 &
      echo $! > "$m/pid"
      echo "member $n: pid $!, clients on 127.0.0.1:$((base + n)), config $m/zoo.cfg, log $m/rzk.log"
    done
    echo "connect string: 127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2)),127.0.0.1:$((base + 3))"
    ;;
  status)
    for n in 1 2 3; do
      echo "--- member $n"
      srvr $((base + n)) | grep -E "Mode|Zxid|not" || true
    done
    ;;
  stop)
    for n in 1 2 3; do
      f="$dir/m$n/pid"
      [ -f "$f" ] || continue
      pid=$(cat "$f")
      kill -TERM "$pid" 2>/dev/null && echo "member $n (pid $pid) stopping" || true
      rm -f "$f"
    done
    ;;
  *)
    echo "usage: $0 start|status|stop [DIR]" >&2
    exit 2
    ;;
esac
