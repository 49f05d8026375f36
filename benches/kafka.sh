#!/usr/bin/env bash
# Against Apache Kafka itself (issue 24): Kafka's own follower, the copy limit (a fetch loop
# appending the record bytes to a file), kcat, ConsumerPerformance and replica-follower copy
# one partition of Apache Kafka 4.4.0, interleaved (see benches/kafka.rs). Installs what it
# needs as tests/run.sh does: kcat and GNU time from Debian, the test venv and Kafka's jars
# (tests/setup-env.sh; Java 17 and Maven must be installed). Needs about 5 GB of memory
# (two 1 GB broker heaps, the page cache) and 3 GB of disk under target/bench/kafka, removed
# at the end. Extra arguments go to the harness: --reps N (3), --mb N (600),
# --record-size N (100).
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/kcat-env.sh
date -u +"run at %Y-%m-%d %H:%M UTC on $(nproc) cores"
cargo bench --quiet --bench kafka -- "$@"
