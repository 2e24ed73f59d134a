#!/usr/bin/env sh
# install-debian-package.sh PACKAGE LOG: installs Debian's PACKAGE (whose program has the same name) for the tests
# that need the real program; install-prometheus.sh and install-chromium.sh call it, and `make test` runs those.
# Idempotent and quick when it is already there. It never fails the build: without root (or passwordless sudo)
# or without apt-get it says why, and writes the reason to LOG for the skipping test to quote.
set -u
PACKAGE="$1"
LOG="$2"

say() { echo "install-$PACKAGE: $*"; { echo "$*" > "$LOG"; } 2>/dev/null || true; }

if command -v "$PACKAGE" >/dev/null 2>&1 || [ -x "/usr/bin/$PACKAGE" ]; then
    rm -f "$LOG"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    say "$PACKAGE is not installed and apt-get is missing (not a Debian-like system); install $PACKAGE by hand"
    exit 0
fi
if [ "$(id -u)" = "0" ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
else
    say "$PACKAGE is not installed and this user is not root and has no passwordless sudo; run: sudo apt-get install -y $PACKAGE"
    exit 0
fi
echo "install-$PACKAGE: installing Debian's $PACKAGE package"
# Without recommends: the tests need the program alone (a service the package would start is not used: tests
# start their own Prometheus; the browser runs headless).
if $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null \
    && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$PACKAGE" >/dev/null; then
    rm -f "$LOG"
    echo "install-$PACKAGE: $("$PACKAGE" --version 2>&1 | head -n 1)"
else
    say "apt-get install $PACKAGE failed (see the output above)"
fi
exit 0
