#!/usr/bin/env sh
# Installs a real Prometheus server (Debian's `prometheus` package) for the tests that scrape a running
# job (tests/test_deploy_prometheus.py). Idempotent and quick when it is already there; `make test` runs it.
# It never fails the build: without root (or passwordless sudo) or without apt-get it says why, and the
# Prometheus test skips with that reason (written to $LOG for the test to quote).
set -u
LOG="${PROMETHEUS_INSTALL_LOG:-${TMPDIR:-/tmp}/levelray-install-prometheus.log}"

say() { echo "install-prometheus: $*"; { echo "$*" > "$LOG"; } 2>/dev/null || true; }

if command -v prometheus >/dev/null 2>&1 || [ -x /usr/bin/prometheus ]; then
    rm -f "$LOG"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    say "prometheus is not installed and apt-get is missing (not a Debian-like system); install prometheus by hand"
    exit 0
fi
if [ "$(id -u)" = "0" ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
else
    say "prometheus is not installed and this user is not root and has no passwordless sudo; run: sudo apt-get install -y prometheus"
    exit 0
fi
echo "install-prometheus: installing Debian's prometheus package"
# The package's post-install starts a service where systemd runs; tests start their own server.
if $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null \
    && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; then
    rm -f "$LOG"
    echo "install-prometheus: $(prometheus --version 2>&1 | head -n 1)"
else
    say "apt-get install prometheus failed (see the output above)"
fi
exit 0
