#!/usr/bin/env bash
# The recipe benchmarks of BENCHMARKS.md ("Recipes"): rzk-election-client's TreeCache,
# ReadWriteLock (write lock) and Semaphore beside Curator 5.4's CuratorCache,
# InterProcessReadWriteLock and InterProcessSemaphoreV2, on one server: an Apache
# ZooKeeper 3.8 started here as the tests start it (tickTime 500, its own data dir on a
# free loopback port, default JVM settings), or any server with --server host:port.
# Usage: interop/curator/bench.sh [--server host:port] [--nodes 100000] [--rate 1000] [--seconds 10]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root_dir=$(cd "$here/../.." && pwd)
server="" nodes=100000 rate=1000 seconds=10
while [ $# -gt 0 ]; do
  case "$1" in
    --server) server=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d)
zk_pid=""
cleanup() { [ -n "$zk_pid" ] && kill "$zk_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
if [ -z "$server" ]; then
  port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  mkdir -p "$work/data"
  printf 'tickTime=500\ndataDir=%s/data\nclientPort=%s\nclientPortAddress=127.0.0.1\nmaxClientCnxns=0\n4lw.commands.whitelist=*\nadmin.enableServer=false\n' \
    "$work" "$port" >"$work/zoo.cfg"
  java -Dzookeeper.admin.enableServer=false -cp /usr/share/java/zookeeper.jar \
    org.apache.zookeeper.server.ZooKeeperServerMain "$work/zoo.cfg" >"$work/zk.log" 2>&1 &
  zk_pid=$!
  for _ in $(seq 1 200); do
    [ "$(python3 -c "import socket; s=socket.create_connection(('127.0.0.1',$port),1); s.sendall(b'ruok'); print(s.recv(4).decode())" 2>/dev/null)" = imok ] && break
    kill -0 "$zk_pid" 2>/dev/null || { cat "$work/zk.log"; exit 1; }
    sleep 0.1
  done
  server="127.0.0.1:$port"
  echo "Apache ZooKeeper 3.8 at $server (pid $zk_pid)"
fi
cp="/usr/share/java/curator-recipes.jar:/usr/share/java/curator-framework.jar:/usr/share/java/curator-client.jar:/usr/share/java/zookeeper.jar"
javac -d "$work/classes" -cp "$cp" "$here/RecipeScenarios.java"
java_run() { java -cp "$work/classes:$cp" RecipeScenarios "$@" 2>/dev/null | grep '^BENCH'; }
(cd "$root_dir" && cargo build --release -q -p rzk-election-client --example recipe_bench)
rust_run() { "${CARGO_TARGET_DIR:-$root_dir/target}/release/examples/recipe_bench" "$@"; }

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
# The tree of the issue, and one of half its size: Curator 5.4's CuratorCache cannot
# load more than 65,535 nodes (CURATOR-690), so the smaller one compares load times.
for n in "$nodes" $((nodes / 2)); do
  tree="/bench-cache-$n-$$"
  rust_run populate "$server" "$tree" "$n"
  for round in 1 2; do
    rust_run cache-load "$server" "$tree"
    java_run bench-cache-load "$server" "$tree" "$((n + (n + 999) / 1000 + 1))"
  done
done
rust_run cache-events "$server" "/bench-events-rust-$$" "$rate" "$seconds"
java_run bench-cache-events "$server" "/bench-events-curator-$$" "$rate" "$seconds"
for kind in write semaphore; do
  for n in 1 32; do
    cycles=$(( n == 1 ? 500 : 30 ))
    rust_run lock "$server" "/bench-lock-rust-$kind-$n-$$" "$kind" "$n" "$cycles"
    java_run bench-lock "$server" "/bench-lock-curator-$kind-$n-$$" "$kind" "$n" "$cycles"
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
