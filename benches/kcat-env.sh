# Sourced by benches/run.sh and benches/serve.sh: kcat and GNU time from Debian when missing,
# the test venv (tests/setup-env.sh), and RDKAFKA_LIB_DIR pointing at the confluent-kafka
# wheel's librdkafka — Debian's kcat links librdkafka 2.0.2, which cannot talk to Tansu.
need=()
command -v kcat >/dev/null || need+=(kcat)
[ -x /usr/bin/time ] || need+=(time)
if [ ${#need[@]} -gt 0 ]; then
    echo "== installing ${need[*]}"
    apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
fi
source tests/setup-env.sh
lib=$(ls "$venv"/lib/python3*/site-packages/confluent_kafka.libs/librdkafka-*.so.1 | head -n 1)
mkdir -p target/bench/lib
ln -sf "$(realpath "$lib")" target/bench/lib/librdkafka.so.1
export RDKAFKA_LIB_DIR="$PWD/target/bench/lib"
