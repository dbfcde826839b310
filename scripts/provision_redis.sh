#!/usr/bin/env bash
# Redis for the distributed profile (Celery's broker and result backend), the way PostGIS is provisioned.
#
# - REDIS_URL set: the user's own broker; nothing is installed or started here. When it does not answer,
#   stop with one line naming it (a broker the user named is never replaced by a local one).
# - Otherwise, on Debian/Ubuntu as root: install Debian's redis-server if missing and, unless one already
#   answers on 127.0.0.1:6379, start it there (loopback only, data under .local/redis).
# - `--install-only`: install the package and stop (the test suite starts a private Redis of its own).
# Idempotent: running it twice, or with Redis already up, changes nothing.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
say() { printf 'provision: %s\n' "$*" >&2; }
# shellcheck source=apt_install.sh
. "$root/scripts/apt_install.sh"
python="${PYTHON:-$root/.venv/bin/python}"

if [ -n "${REDIS_URL:-}" ] && [ "${1:-}" != "--install-only" ]; then
  # The URL (it may hold a password) is read from the environment, never printed.
  if ! failure=$("$python" - <<'PY' 2>&1
import os, redis
from urllib.parse import urlsplit
url = os.environ["REDIS_URL"]
where = f"{urlsplit(url).hostname}:{urlsplit(url).port or 6379}"
try:
    redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5).ping()
except redis.AuthenticationError:
    raise SystemExit(f"authentication failed on {where}: check the password in REDIS_URL")
except redis.ConnectionError as error:
    raise SystemExit(f"nothing answers on {where} ({error.__class__.__name__}): start it, or fix REDIS_URL")
except redis.RedisError as error:
    raise SystemExit(f"{where} answered with an error: {error}")
PY
  ); then
    say "REDIS_URL: ${failure##*$'\n'}"
    exit 1
  fi
  say "using REDIS_URL (your own Redis)"
  exit 0
fi
if ! command -v redis-server >/dev/null 2>&1; then
  if [ ! -f /etc/debian_version ] || [ "$(id -u)" != 0 ]; then
    say "the distributed profile needs Redis: install Debian/Ubuntu's 'redis-server' or set REDIS_URL"
    exit 1
  fi
  apt_install redis-server || exit 1
fi
[ "${1:-}" = "--install-only" ] && exit 0
if redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  exit 0
fi
mkdir -p "$root/.local/redis"
chmod 700 "$root/.local/redis"
redis-server --bind 127.0.0.1 --port 6379 --daemonize yes --dir "$root/.local/redis" \
  --logfile "$root/.local/redis/redis.log" --pidfile "$root/.local/redis/redis.pid" --save "" --appendonly yes
for _ in $(seq 50); do
  redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && { say "redis on 127.0.0.1:6379"; exit 0; }
  sleep 0.1
done
say "redis-server did not answer on 127.0.0.1:6379: see .local/redis/redis.log"
exit 1
