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
say() { printf 'provision: %s\n' "$*" >&2; }
# shellcheck source=apt_install.sh
. "$(dirname "$0")/apt_install.sh"
apt_install chromium
