#!/usr/bin/env bash
# Offsite copies, side by side in one run: the local disk write rate (16 MiB pieces
# to one file, fsync), the CPU of sealing 16 MiB pieces plain and encrypted, and the upload
# rate with the client's and the server's CPU per GB to s3s-fs and moto on loopback (see
# benches/offsite.rs). Installs what it needs as tests/run.sh does (moto into
# target/test-venv, s3s-fs built into target/s3s-fs; no Kafka). Extra arguments go to the
# harness: --mib N (256), --reps N (3), --servers LIST (s3s-fs,moto).
set -euo pipefail
cd "$(dirname "$0")/.."
INSTALL_KAFKA=0 source tests/setup-env.sh
date -u +"run at %Y-%m-%d %H:%M UTC on $(nproc) cores"
cargo bench --quiet --bench offsite -- "$@"
