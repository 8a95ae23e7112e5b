#!/usr/bin/env bash
# Operations with real components: TLS on the secure client port with kazoo
# (use_ssl=True) and zkCli.sh (Netty client socket, zookeeper.client.secure=true), against
# Apache ZooKeeper 3.8 as the reference and against rzk (interop/ops/); rzk's /metrics
# read by Prometheus's Python parser; the AdminServer's JSON keys against ZooKeeper's;
# rzk's dumps of a data dir ZooKeeper wrote, and its import (through the Rust client, then
# through kazoo from both servers side by side: interop/ops/test_import.py).
# Installs what it needs on a fresh Debian machine; a no-op when it is already there.
# Time: about 1 minute on 2 cores once rzk is built (40-interop builds the release binary).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=../lib.sh
source .ci/lib.sh

need_zookeeper
need_file /usr/share/java/netty-handler.jar libnetty-java
need_file /usr/share/java/servlet-api.jar libservlet-api-java
need_file /usr/share/java/slf4j-simple.jar libslf4j-java
need_cmd openssl openssl
need_python_venv
apt_install 45-ops

# The ops tests' own venv (their pins add Prometheus's parser to the interop clients).
venv=interop/ops/.venv
want="$(sha256sum interop/ops/requirements.txt | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.requirements.sha256" 2>/dev/null || true)" != "$want" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --disable-pip-version-check --quiet -r interop/ops/requirements.txt
  echo "$want" >"$venv/.requirements.sha256"
fi
CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}" cargo build --release -p rzk-server
export RZK_BIN="${CARGO_TARGET_DIR:-$PWD/target}/release/rzk"
export PYTHONDONTWRITEBYTECODE=1
# The AdminServer's JSON keys against Apache ZooKeeper's (a Rust test, ignored in the
# default run because it needs Java and ZooKeeper).
cargo test -p rzk-server --test admin_metrics -- --ignored
# rzk snapshot dump / rzk log dump on a data dir written by Apache ZooKeeper 3.8.
cargo test -p rzk-server --test zk_files -- --ignored
# rzk import-zookeeper of a data dir written by Apache ZooKeeper 3.8, every znode
# compared through a client (about 20 s).
cargo test -p rzk-server --test import_zookeeper -- --ignored
cd interop/ops
exec .venv/bin/python -m pytest -c pytest.ini -q -rfEs
