#!/usr/bin/env bash
# rzk-wal's long runs: the proptest model with 2000 cases of up to 120 steps
# (about 70 s in a debug build on 2 cores). Needs nothing but cargo.
set -euo pipefail
cargo test -p rzk-wal --test model -- --ignored
