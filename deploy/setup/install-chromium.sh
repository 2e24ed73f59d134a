#!/usr/bin/env sh
# Installs a real headless browser (Debian's `chromium` package) for the test that opens the report page
# (tests/test_report_page.py), through install-debian-package.sh; `make test` runs it.
exec sh "$(dirname "$0")/install-debian-package.sh" chromium \
    "${CHROMIUM_INSTALL_LOG:-${TMPDIR:-/tmp}/levelray-install-chromium.log}"
