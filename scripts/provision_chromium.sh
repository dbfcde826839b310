#!/usr/bin/env bash
# Headless Chromium for the end-to-end UI test: Debian's package, installed when missing (like PostGIS).
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ ! -f /etc/debian_version ] || [ "$(id -u)" != 0 ]; then
  echo "provision: the UI test needs Chromium; install Debian/Ubuntu's 'chromium' package" >&2
  exit 1
fi
echo "provision: installing chromium" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
