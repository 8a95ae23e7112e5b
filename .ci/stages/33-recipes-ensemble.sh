#!/usr/bin/env bash
# The recipe tests of election-client/tests/recipes_zk.rs (TreeCache, PersistentNode,
# ReadWriteLock, Semaphore, SharedCounter, Barrier/DoubleBarrier, each through a
# suspension, a session loss and a restart) on 3-member ensembles, where the restart
# kills the leader: first Apache ZooKeeper 3.8, then rzk built from this tree. The
# standalone runs are in stage 30.
# Installs what it needs on a fresh Debian machine.
# Duration (2 cores, warm build): about 1 minute per server; see the closing line.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../lib.sh
source .ci/lib.sh

need_pkgs zookeeper zookeeper-bin
apt_install 33-recipes-ensemble

export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
stage_start=$(date +%s)
cargo build --release -p rzk-server
rzk_bin="${CARGO_TARGET_DIR:-$(pwd)/target}/release/rzk"

run() {
  local name=$1; shift
  echo "--- recipes on a 3-member $name ensemble (the restart kills the leader)"
  local log status=0
  log=$(mktemp)
  env -u RZK_TEST_ZK -u RZK_TEST_RZK_BIN "$@" RZK_TEST_ENSEMBLE=3 cargo test -p rzk-election-client --test recipes_zk -- \
    --ignored --test-threads=2 --nocapture >"$log" 2>&1 || status=$?
  grep -E '^(test |RESULT|server:|killed the leader)|test result|panicked' "$log" || true
  if [ "$status" -ne 0 ]; then
    tail -80 "$log"
    rm -f "$log"
    echo "33-recipes-ensemble: the $name run failed"
    exit "$status"
  fi
  rm -f "$log"
}
run "Apache ZooKeeper 3.8"
run rzk RZK_TEST_RZK_BIN="$rzk_bin"
echo "33-recipes-ensemble: $(( $(date +%s) - stage_start )) s"
