#!/usr/bin/env bash
# Interop suite with real clients: kazoo (PyPI, in interop/.venv), zkCli.sh (Debian's
# zookeeper package) and Curator 5.4 (Debian's libcurator-*-java), run against Apache ZooKeeper 3.8 and, once server/src/main.rs exists,
# against rzk built from this tree. See interop/README.md.
# Installs what it needs on a fresh Debian machine; a no-op when it is already there.
set -euo pipefail
cd "$(dirname "$0")/../.."

need=()
[ -f /usr/share/java/zookeeper.jar ] && [ -x /usr/share/zookeeper/bin/zkCli.sh ] ||
  need+=(zookeeper zookeeper-bin)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
# tests/test_curator.py: Curator 5.4's jars, compiled against with javac.
command -v javac >/dev/null 2>&1 || need+=(default-jdk-headless)
for p in libcurator-framework-java libcurator-recipes-java; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
command -v python3 >/dev/null 2>&1 || need+=(python3)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
if [ "${#need[@]}" -gt 0 ]; then
  echo "40-interop: installing ${need[*]}"
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}"
fi

exec interop/run
