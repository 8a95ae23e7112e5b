#!/usr/bin/env bash
# rzk-sim's long runs: 20000 seeds with the default fault mix (3 and 5 peers)
# and 5000 with a zxid counter limit of 4 (epoch rollover every few writes).
# About 4 minutes on the shared 2-core machine (release build). Needs nothing but cargo.
set -euo pipefail
cargo run -p rzk-sim --release -- --seeds 20000 --start 1000000
cargo run -p rzk-sim --release -- --seeds 5000 --start 2000000 --limit 4
