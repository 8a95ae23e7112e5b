#!/usr/bin/env bash
# Run the recipe scenarios of election-client/tests/recipes_zk.rs against Apache Curator
# 5.4 (CuratorCache, PersistentNode, InterProcessReadWriteLock, InterProcessSemaphoreV2)
# and print what Curator does as RESULT lines. Each scenario starts its own Apache
# ZooKeeper 3.8 (as a child process, like the Rust harness) so it can restart it.
# Exits non-zero if a scenario cannot run at all (Curator or ZooKeeper missing, a
# scenario that crashes or times out); what Curator does inside a scenario is reported,
# not judged (.ci/stages/32-recipes-curator.sh checks it against RECIPES.md).
# Usage: interop/curator/recipes.sh [scenario...]   (default: cache node rwlock semaphore)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp="/usr/share/java/curator-recipes.jar:/usr/share/java/curator-framework.jar:/usr/share/java/curator-client.jar:/usr/share/java/zookeeper.jar"
for jar in ${cp//:/ }; do
  [ -f "$jar" ] || { echo "missing $jar (Debian: libcurator-recipes-java zookeeper)" >&2; exit 1; }
done
javac -d "$work/classes" -cp "$cp" "$here/RecipeScenarios.java"
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(cache node rwlock semaphore)
status=0
for s in "${scenarios[@]}"; do
  echo "--- curator: $s"
  out="$work/$s.out"
  if ! timeout 240 java -cp "$work/classes:$cp" RecipeScenarios "$s" >"$out" 2>&1; then
    echo "scenario $s failed to run:"
    tail -30 "$out"
    status=1
  fi
  grep '^RESULT' "$out" || { echo "scenario $s printed no RESULT"; status=1; }
done
exit "$status"
