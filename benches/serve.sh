#!/usr/bin/env bash
# The read-only broker against Tansu (issue 9): raw fetch loops against both, kcat and a
# chained replica-follower against `replica-follower serve`, interleaved (see
# benches/serve.rs). Installs what it needs as benches/run.sh does, and strace. Needs about
# 3 GB of memory and 2.5 GB of disk under target/bench/serve. Extra arguments go to the
# harness: --reps N (5), --mb N (600), --value-bytes N (100).
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/kcat-env.sh
if ! command -v strace >/dev/null; then
    echo "== installing strace"
    apt-get update -qq && apt-get install -y -qq strace >/dev/null
fi
date -u +"run at %Y-%m-%d %H:%M UTC on $(nproc) cores"
cargo bench --quiet --bench serve -- "$@"
