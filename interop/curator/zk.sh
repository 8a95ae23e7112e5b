#!/usr/bin/env bash
# Start / stop a throwaway Apache ZooKeeper 3.8 standalone server on a free loopback
# port, with its own data dir. Shared by the Curator interop run and the CI stage.
#   zk.sh start DIR   -> prints host:port; the PID is in DIR/pid
#   zk.sh stop DIR
set -euo pipefail
cmd=$1 dir=$2
case "$cmd" in
start)
  mkdir -p "$dir/data"
  port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  cat > "$dir/zoo.cfg" <<CFG
tickTime=500
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
maxClientCnxns=0
4lw.commands.whitelist=*
admin.enableServer=false
CFG
  # Containers are reaped every 500 ms instead of every minute, so the seed's
  # "empty parent collected" happens within a test.
  java -Dzookeeper.admin.enableServer=false -Dznode.container.checkIntervalMs=500 \
    -cp /usr/share/java/zookeeper.jar org.apache.zookeeper.server.ZooKeeperServerMain \
    "$dir/zoo.cfg" >"$dir/zk.log" 2>&1 &
  echo $! >"$dir/pid"
  # Up to 30 s (a cold JVM on a loaded machine); the address is printed only once
  # ZooKeeper answers ruok.
  for _ in $(seq 1 300); do
    if python3 - "$port" <<'PY' 2>/dev/null; then echo "127.0.0.1:$port"; exit 0; fi
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1)
s.send(b"ruok")
sys.exit(0 if s.recv(4) == b"imok" else 1)
PY
    kill -0 "$(cat "$dir/pid")" 2>/dev/null || break
    sleep 0.1
  done
  echo "zk.sh: Apache ZooKeeper did not answer ruok on port $port; its log:" >&2
  tail -20 "$dir/zk.log" >&2
  exit 1
  ;;
stop)
  if [ -f "$dir/pid" ]; then kill "$(cat "$dir/pid")" 2>/dev/null || true; rm -f "$dir/pid"; fi
  ;;
esac
