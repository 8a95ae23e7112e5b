#!/usr/bin/env bash
# rzk-chaos (chaos/README.md): the checker's self-tests, then a run of the whole
# instrument against a real 3-member ensemble with kill, pause and partition.
# Against rzk, any anomaly or acknowledged write lost fails the stage and
# prints the seed (replay: CHAOS_SEED=N CHAOS_TARGET=rzk bash .ci/stages/60-chaos.sh).
# Against Apache ZooKeeper 3.8.0 (Debian's) anomalies are printed but do not
# fail the stage: under these faults it loses acknowledged writes (see
# RELIABILITY.md), which is ZooKeeper's bug, not this tree's; there the stage
# proves the instrument end to end and fails only if the run itself fails
# (exit 2). Against rzk a register the search cannot decide fails it too (exit 3).
#
# Target (CHAOS_TARGET): `zookeeper` (the default until the rzk ensemble of
# issue 11 is on main): Apache ZooKeeper 3.8 from Debian's `zookeeper`, 60 s of
# faults; `rzk`: a 3-member rzk ensemble (chaos/configs/rzk.toml, the debug
# `rzk` binary) for 2 minutes. Once the ensemble lands, the default becomes
# rzk. Time: about 1.5 minutes (zookeeper) or 2.5 minutes (rzk) on 2 cores
# after the build (the debug binaries reuse the test build's dependencies).
# Installs what it needs; every member it starts is stopped by PID at the end.
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

target="${CHAOS_TARGET:-zookeeper}"
case "$target" in
zookeeper)
  config=chaos/configs/zookeeper.toml
  duration=60
  ;;
rzk)
  cargo build -p rzk-server --bin rzk
  RZK_BIN="$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/debug/rzk"
  export RZK_BIN
  config=chaos/configs/rzk.toml
  duration=120
  ;;
*)
  echo "60-chaos: CHAOS_TARGET must be zookeeper or rzk, not $target" >&2
  exit 2
  ;;
esac
echo "60-chaos: $config, seed $seed, ${duration}s of $faults"
set +e
strict=()
[ "$target" = rzk ] && strict=(--fail-on-undecided)
"$bin" run --config "$config" --seed "$seed" --duration "$duration" --schedule "$faults" \
  "${strict[@]}"
rc=$?
set -e
echo "60-chaos: took $(($(date +%s) - start)) s"
if [ "$rc" -eq 1 ] && [ "$target" = zookeeper ]; then
  echo "60-chaos: Apache ZooKeeper 3.8.0 showed anomalies with seed $seed (known; RELIABILITY.md); the instrument ran end to end"
  exit 0
fi
if [ "$rc" -ne 0 ]; then
  echo "60-chaos: FAILED (exit $rc); replay with CHAOS_SEED=$seed CHAOS_TARGET=$target bash .ci/stages/60-chaos.sh"
  exit "$rc"
fi
