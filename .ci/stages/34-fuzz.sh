#!/usr/bin/env bash
# Runs every cargo-fuzz target of the repository (today: rzk-wire's server_decoder and
# client_decoder, the two decoders that read bytes from outside) for a bounded time
# each, starting from the checked-in corpus (wire/fuzz/corpus/<target>).
#   - A crash, a leak, an out-of-memory or a hang (an input taking over 10 s) fails the
#     stage; the input is printed in hex and left in wire/fuzz/artifacts/<target>/.
#   - Inputs that reach new coverage are merged into wire/fuzz/corpus/<target> (only
#     those that add coverage, libFuzzer's -merge=1), and the stage lists them: run it
#     in a work tree and commit them, so the corpus grows in the repository. (A CI run
#     is a throwaway clone, so there it only reports them.)
# cargo-fuzz comes from crates.io (installed here if missing, pinned); it runs on the
# machine's stable toolchain with RUSTC_BOOTSTRAP=1 (the sanitizer flags it passes are
# unstable options; no nightly toolchain is needed).
# Time: RZK_FUZZ_SECONDS per target (default 30), plus the sanitizer build (about a
# minute on 2 cores) and, on a fresh machine, installing cargo-fuzz (about a minute).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
stage_start=$(date +%s)
seconds="${RZK_FUZZ_SECONDS:-30}"
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
# The fuzz crate is its own workspace with its own target/ (its sanitizer flags must not
# touch the main workspace's build).
unset CARGO_TARGET_DIR
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz 0.13.2 from crates.io"
  cargo install cargo-fuzz --version 0.13.2 --locked
fi
cargo fuzz --version

status=0
for dir in wire/fuzz; do
  cd "$root/$dir"
  targets=$(cargo fuzz list)
  [ -n "$targets" ] || { echo "34-fuzz: $dir lists no fuzz target"; exit 1; }
  for t in $targets; do
    corpus="corpus/$t"
    [ -d "$corpus" ] && [ -n "$(ls -A "$corpus")" ] || {
      echo "34-fuzz: $dir/$corpus is missing or empty"
      exit 1
    }
    before=$(ls "$corpus" | sort)
    found=$(mktemp -d)
    log=$(mktemp)
    echo "--- $dir: $t for ${seconds} s from $(echo "$before" | wc -l) corpus inputs"
    t0=$(date +%s)
    # -a: debug assertions and overflow checks on, as in the tests. New inputs go to
    # $found (the first corpus directory); the checked-in corpus is only read here.
    if ! cargo fuzz run -a "$t" "$found" "$corpus" -- \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      >"$log" 2>&1; then
      echo "34-fuzz: $t FAILED after $(( $(date +%s) - t0 )) s"
      tail -60 "$log"
      for a in artifacts/"$t"/*; do
        [ -f "$a" ] || continue
        echo "input $dir/$a:"
        od -A d -t x1 "$a" | head -40
      done
      status=1
      rm -rf "$found" "$log"
      continue
    fi
    grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb|^Done [0-9]+ runs' "$log" || true
    # Keep, of what was found, only what adds coverage to the checked-in corpus.
    if [ -n "$(ls -A "$found")" ]; then
      cargo fuzz run -a "$t" "$corpus" "$found" -- -merge=1 >"$log" 2>&1 || {
        echo "34-fuzz: merging the new inputs of $t failed"
        tail -30 "$log"
        status=1
      }
    fi
    added=$(comm -13 <(echo "$before") <(ls "$corpus" | sort) | grep -c . || true)
    note=""
    [ "$added" -gt 0 ] && note=" (commit them from a work tree)"
    echo "$t: ran $(( $(date +%s) - t0 )) s, no crash; $added new inputs with new coverage in $dir/$corpus$note"
    rm -rf "$found" "$log"
  done
done
echo "34-fuzz: $(( $(date +%s) - stage_start )) s"
exit "$status"
