#!/usr/bin/env bash
# Run the election scenarios against Apache Curator 5.4's LeaderLatch on a throwaway
# Apache ZooKeeper 3.8, and print what Curator does (it is allowed to fail).
# Usage: interop/curator/run.sh [scenario...]   (default: seed suspend local-lost contenders)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap '"$here/zk.sh" stop "$work"; rm -rf "$work"' EXIT
cp="/usr/share/java/curator-recipes.jar:/usr/share/java/curator-framework.jar:/usr/share/java/curator-client.jar:/usr/share/java/zookeeper.jar"
javac -d "$work/classes" -cp "$cp" "$here/CuratorScenarios.java"
zk=$("$here/zk.sh" start "$work")
echo "Apache ZooKeeper at $zk"
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(seed suspend local-lost "contenders 2 7" "contenders 5 11")
for s in "${scenarios[@]}"; do
  echo "--- curator: $s"
  # shellcheck disable=SC2086
  timeout 120 java -cp "$work/classes:$cp" CuratorScenarios "$zk" $s 2>/dev/null || echo "RESULT curator $s: exited with status $?"
done
