#!/usr/bin/env bash
# Demo: starts a real Kafka-compatible leader (Tansu), produces records with every codec,
# follows them with replica-follower while more arrive, stops it with SIGTERM, restarts it,
# and shows status, verify, dump and offsets on the replica. Leaves everything in target/demo.
set -euo pipefail
cd "$(dirname "$0")/.."

INSTALL_KAFKA=0 INSTALL_S3S_FS=0 source tests/setup-env.sh
echo "== building replica-follower (release)"
cargo build --release --quiet
# cargo puts the binary under CARGO_TARGET_DIR when it is set.
exec "$venv/bin/python" tests/demo.py "${CARGO_TARGET_DIR:-target}/release/replica-follower" target/demo
