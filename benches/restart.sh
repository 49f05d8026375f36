#!/usr/bin/env bash
# Restart time after a clean shutdown and after kill -9, on logs of 100 MB and 2 GB with
# segment_bytes 1 GiB and 64 MiB, and the peak RSS of verify, dump and the daemon on the
# 2 GB log (see benches/restart.rs). Needs GNU time (installed from Debian if missing) and
# about 3 GB of disk under target/bench/restart, removed at the end. Extra arguments go to
# the harness: --sizes-mb 100,2000 --segments-mib 1024,64 --reps 3 --write-mb-s 20
# --kill-after-ms 2500.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x /usr/bin/time ]; then
    echo "== installing time"
    apt-get update -qq && apt-get install -y -qq time >/dev/null
fi
date -u +"run at %Y-%m-%d %H:%M UTC on $(nproc) cores"
cargo bench --quiet --bench restart -- "$@"
