#!/usr/bin/env sh
# Installs a real Prometheus server (Debian's `prometheus` package) for the tests that scrape a running job
# (tests/test_deploy_prometheus.py), through install-debian-package.sh; `make test` runs it.
exec sh "$(dirname "$0")/install-debian-package.sh" prometheus \
    "${PROMETHEUS_INSTALL_LOG:-${TMPDIR:-/tmp}/levelray-install-prometheus.log}"
