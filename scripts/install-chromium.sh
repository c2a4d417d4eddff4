#!/usr/bin/env bash
# Installs Debian's chromium package when /usr/bin/chromium is missing, for
# the real-browser test of examples/web. Quiet and idempotent: it does
# nothing when Chromium is already there, and prints apt-get's output only
# when it fails. Needs root (or sudo) and apt-get.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
  exit 0
fi

sudo=
if [ "$(id -u)" -ne 0 ]; then
  sudo=sudo
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { $sudo apt-get update -qq &&
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "install-chromium.sh: apt-get failed" >&2
  exit 1
fi

if [ ! -x /usr/bin/chromium ]; then
  echo "install-chromium.sh: /usr/bin/chromium is still missing after apt-get install" >&2
  exit 1
fi
