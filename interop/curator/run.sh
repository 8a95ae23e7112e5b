#!/usr/bin/env bash
# Run the election scenarios against Apache Curator 5.4's LeaderLatch on a throwaway
# Apache ZooKeeper 3.8, and check each outcome against what README.md documents for
# Curator (PASS, or XFAIL for a documented Curator defect; see CuratorScenarios.java).
# Usage: interop/curator/run.sh [scenario...]   (default: seed suspend local-lost
#                                                 "contenders 2 7" "contenders 5 11")
# Exit status: 0 every outcome as documented; 1 an outcome differs (FAIL or XPASS), or
# a scenario crashed or timed out; 2 the run could not start (javac, ZooKeeper).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap '"$here/zk.sh" stop "$work"; rm -rf "$work"' EXIT
cp="/usr/share/java/curator-recipes.jar:/usr/share/java/curator-framework.jar:/usr/share/java/curator-client.jar:/usr/share/java/zookeeper.jar"
for jar in ${cp//:/ }; do
  [ -f "$jar" ] || { echo "curator interop: $jar is missing (Debian packages libcurator-*-java, zookeeper)" >&2; exit 2; }
done
javac -d "$work/classes" -cp "$cp" "$here/CuratorScenarios.java" || { echo "curator interop: javac failed" >&2; exit 2; }
zk=$("$here/zk.sh" start "$work") || { echo "curator interop: Apache ZooKeeper did not start" >&2; exit 2; }
echo "Apache ZooKeeper at $zk"
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(seed suspend local-lost "contenders 2 7" "contenders 5 11")
failed=()
for s in "${scenarios[@]}"; do
  echo "--- curator: $s"
  status=0
  # shellcheck disable=SC2086
  timeout 120 java -cp "$work/classes:$cp" CuratorScenarios "$zk" $s 2>"$work/stderr" || status=$?
  if [ "$status" -ne 0 ]; then
    echo "RESULT curator $s: exited with status $status$([ "$status" -eq 124 ] && echo ' (timed out after 120 s)')"
    [ "$status" -eq 1 ] || tail -20 "$work/stderr"
    failed+=("$s")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "curator interop: outcomes differ from the documented ones in: ${failed[*]}"
  exit 1
fi
echo "curator interop: every outcome as documented in interop/curator/README.md"
