#!/usr/bin/env bash
# rzk-chaos (chaos/README.md): the checker's self-tests, then a run of the whole
# instrument against a real 3-member ensemble with kill, pause and partition.
# Any anomaly or acknowledged write lost fails the stage and prints the seed
# (replay: rzk-chaos run --config ... --seed N ...).
#
# Target: Apache ZooKeeper 3.8 (Debian's `zookeeper`), 60 s of faults, until
# the rzk ensemble (issue 11) lands; then a 3-member rzk ensemble for 2 minutes
# (chaos/configs/rzk.toml). Time: about 3 minutes on 2 cores after the build
# (the debug binary reuses the test build's dependencies). Installs what it
# needs; every member it starts is stopped by PID when the run ends.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
start=$(date +%s)

need=()
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
if [ "${#need[@]}" -gt 0 ]; then
  echo "60-chaos: installing ${need[*]}"
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}"
fi

echo "60-chaos: checker self-tests"
cargo test -p rzk-chaos --lib

cargo build -p rzk-chaos --bin rzk-chaos
bin="${CARGO_TARGET_DIR:-target}/debug/rzk-chaos"
seed="${CHAOS_SEED:-$(( $(date +%s) % 100000 ))}"
faults="kill,kill-leader,pause,pause-leader,partition,partition-leader"

config=chaos/configs/zookeeper.toml
duration=60
echo "60-chaos: $config, seed $seed, ${duration}s of $faults"
set +e
"$bin" run --config "$config" --seed "$seed" --duration "$duration" --schedule "$faults" \
  --fail-on-undecided
rc=$?
set -e
echo "60-chaos: took $(($(date +%s) - start)) s"
if [ "$rc" -ne 0 ]; then
  echo "60-chaos: FAILED (exit $rc); replay with CHAOS_SEED=$seed bash .ci/stages/60-chaos.sh"
  exit "$rc"
fi
