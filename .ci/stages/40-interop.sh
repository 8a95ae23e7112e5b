#!/usr/bin/env bash
# Interop suite with real clients: kazoo (PyPI, in interop/.venv), zkCli.sh (Debian's
# zookeeper package) and Curator 5.4 (Debian's libcurator-*-java), run against Apache
# ZooKeeper 3.8 and then against rzk built from this tree (interop/runner.py builds it).
# See interop/README.md.
# Installs what it needs on a fresh Debian machine; a no-op when it is already there.
set -euo pipefail
cd "$(dirname "$0")/../.."

# shellcheck source=../lib.sh
source .ci/lib.sh

need_zookeeper
# tests/test_curator.py: Curator 5.4's jars, compiled against with javac.
need_cmd javac default-jdk-headless
need_pkgs libcurator-framework-java libcurator-recipes-java
need_python_venv
apt_install 40-interop

exec interop/run
