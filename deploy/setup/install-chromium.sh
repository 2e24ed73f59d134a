#!/usr/bin/env sh
# Installs a real headless browser (Debian's `chromium` package) for the test that opens the report page
# (tests/test_report_page.py). Idempotent and quick when it is already there; `make test` runs it.
# It never fails the build: without root (or passwordless sudo) or without apt-get it says why, and the
# report-page test skips with that reason (written to $LOG for the test to quote).
set -u
LOG="${CHROMIUM_INSTALL_LOG:-${TMPDIR:-/tmp}/levelray-install-chromium.log}"

say() { echo "install-chromium: $*"; { echo "$*" > "$LOG"; } 2>/dev/null || true; }

if command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; then
    rm -f "$LOG"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    say "chromium is not installed and apt-get is missing (not a Debian-like system); install chromium by hand"
    exit 0
fi
if [ "$(id -u)" = "0" ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
else
    say "chromium is not installed and this user is not root and has no passwordless sudo; run: sudo apt-get install -y chromium"
    exit 0
fi
echo "install-chromium: installing Debian's chromium package"
# Without recommends: the tests run it headless (no fonts beyond the defaults, no desktop integration needed).
if $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null \
    && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; then
    rm -f "$LOG"
    echo "install-chromium: $(chromium --version 2>&1 | head -n 1)"
else
    say "apt-get install chromium failed (see the output above)"
fi
exit 0
