#!/usr/bin/env bash
# Make a PostgreSQL + PostGIS server available and write .local/env.sh, which the Makefile sources.
#
# - SURVEILLANCE_DATABASE_URL set: use it. When it does not work (a wrong password, port or database, no
#   PostGIS in it, no right to create tables), stop with one line saying what is wrong and what to do:
#   an explicit setting is never replaced by another server, and nothing is started or written. The same
#   for DAGSTER_PG_DB and SURVEILLANCE_DATA_DIR (commands/probe_warehouse.py), and for a URL an earlier run
#   was given and .local/env.sh keeps.
# - Otherwise, on Debian/Ubuntu as root: install PostgreSQL and Debian's PostGIS if missing (waiting for
#   another package installation to finish, apt_install.sh), and use a cluster of the project's own,
#   `<major>/surveillance`, created on the next free port. A cluster that was there before (Debian's
#   `main`, say) is never reconfigured, restarted or given PostGIS in its template1. In its own cluster
#   the project raises max_connections and puts PostGIS in template1 (the tests' databases get it), and
#   creates role `surveillance` (password generated once per user, kept in
#   ~/.config/surveillance_pipeline/db-password, mode 600) and the `surveillance` database with PostGIS.
# - Either way, Dagster's storage is the warehouse's own: the database `dagster_<warehouse database>` on
#   the same server (DAGSTER_PG_DB names another), created when missing; two warehouses on one server
#   never share run history, sensor cursors or data versions. A role that may not create a database
#   shares the warehouse database instead.
# - Anything else: stop, saying what to install.
# - Either way: the geocoder ledger's HMAC salt (GEOCODER_LEDGER_SALT) is generated once per user, kept in
#   ~/.config/surveillance_pipeline/geocoder-ledger-salt (mode 600), and written into .local/env.sh, unless
#   the environment already sets one. It must not change: the ledger's keys are made with it.
# - Either way: the release masking key (RELEASE_MASKING_KEY), which keys the masked release's draws, is
#   generated once per user the same way (~/.config/surveillance_pipeline/release-masking-key, mode 600).
#   Another key moves every released point elsewhere: every release is made again.
# Idempotent: running it twice, or with the server already up, changes nothing. Once .local/env.sh names a
# server that answers, a run only probes it (well under a second).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
local_dir="$root/.local"
env_file="$local_dir/env.sh"
python="${PYTHON:-$root/.venv/bin/python}"

say() { printf 'provision: %s\n' "$*" >&2; }
# shellcheck source=apt_install.sh
. "$root/scripts/apt_install.sh"
# The project's own cluster: the one cluster on this machine it may create, tune and restart.
own_cluster=surveillance

config_dir="${XDG_CONFIG_HOME:-$HOME/.config}/surveillance_pipeline"

# A secret of the user's: the environment's value if it sets one, else generated once per user into
# $config_dir/<file> (mode 600) and read from there ever after.
user_secret() {  # variable name, file name
  if [ -n "${!1:-}" ]; then
    printf '%s' "${!1}"
    return
  fi
  local file="$config_dir/$2"
  if [ ! -s "$file" ]; then
    mkdir -p "$config_dir" && chmod 700 "$config_dir"
    (umask 077 && "$python" -c "import secrets; print(secrets.token_hex(32))" > "$file")
  fi
  cat "$file"
}

# The salt keys the geocoder ledger's HMACs: a new salt orphans every entry (every locality paid again).
ledger_salt() { user_secret GEOCODER_LEDGER_SALT geocoder-ledger-salt; }
# The masking key keys the masked release's draws: without it no reader can move a point back.
masking_key() { user_secret RELEASE_MASKING_KEY release-masking-key; }

write_env() {  # url, dagster_db, origin ("given", or the cluster "<major>/surveillance")
  mkdir -p "$local_dir"
  chmod 700 "$local_dir"
  GEOCODER_LEDGER_SALT=$(ledger_salt) RELEASE_MASKING_KEY=$(masking_key) \
    "$python" - "$1" "$2" "$3" "$env_file" <<'PY'
import os, shlex, sys
from urllib.parse import unquote, urlsplit
url, dagster_db, origin, env_file = sys.argv[1:]
parts = urlsplit(url)
values = {
    "SURVEILLANCE_DATABASE_URL": url,
    "DAGSTER_PG_USERNAME": unquote(parts.username or ""),
    "DAGSTER_PG_PASSWORD": unquote(parts.password or ""),
    "DAGSTER_PG_HOST": parts.hostname or "127.0.0.1",
    "DAGSTER_PG_PORT": str(parts.port or 5432),
    "DAGSTER_PG_DB": dagster_db,
    "GEOCODER_LEDGER_SALT": os.environ["GEOCODER_LEDGER_SALT"],
    "RELEASE_MASKING_KEY": os.environ["RELEASE_MASKING_KEY"],
    # Where the URL came from: one the user gave is never replaced, the project's own cluster is restarted.
    "SURVEILLANCE_WAREHOUSE_ORIGIN": origin,
}
with open(env_file, "w") as handle:
    handle.write("# Written by scripts/provision_postgis.sh; holds a password and two keys, never commit it.\n")
    for name, value in values.items():
        handle.write(f"export {name}={shlex.quote(value)}\n")
PY
  chmod 600 "$env_file"
}

# Prints the name of the database Dagster should use for the warehouse at $1 (DAGSTER_PG_DB, else
# dagster_<warehouse database>), creating it if allowed; or one line saying what is wrong, and fails.
probe() {
  DAGSTER_PG_DB="${DAGSTER_PG_DB:-}" "$python" -m surveillance_pipeline.commands.probe_warehouse "$1"
}

# A data folder the user named must be writable, whichever server is used.
if [ -n "${SURVEILLANCE_DATA_DIR:-}" ]; then
  "$python" -m surveillance_pipeline.commands.probe_warehouse --data-dir "$SURVEILLANCE_DATA_DIR" || exit 1
fi

# Already provisioned (every make run, make test, ... asks): the server that .local/env.sh names answers
# with PostGIS and the Dagster database it names. One probe, and nothing rewritten: the cluster checks
# below cost a second or more each time.
stored() { (set +u; . "$env_file" && printf '%s' "${!1:-}") 2>/dev/null; }
if [ -z "${SURVEILLANCE_DATABASE_URL:-}" ] && [ -z "${GEOCODER_LEDGER_SALT:-}" ] && [ -s "$env_file" ]; then
  stored_url=$(stored SURVEILLANCE_DATABASE_URL)
  stored_origin=$(stored SURVEILLANCE_WAREHOUSE_ORIGIN)
  if [ -n "$stored_url" ] && [ -n "$(stored GEOCODER_LEDGER_SALT)" ] \
    && stored_db=$(DAGSTER_PG_DB="${DAGSTER_PG_DB:-$(stored DAGSTER_PG_DB)}" probe "$stored_url" 2>/dev/null) \
    && [ "$stored_db" = "$(stored DAGSTER_PG_DB)" ]; then
    if [ -z "$(stored RELEASE_MASKING_KEY)" ]; then
      # Written before the masking key: the same values, and the key.
      GEOCODER_LEDGER_SALT=$(stored GEOCODER_LEDGER_SALT) write_env "$stored_url" "$stored_db" "$stored_origin"
      say "release masking key (RELEASE_MASKING_KEY) added to .local/env.sh"
    fi
    say "PostGIS ready at $(stored DAGSTER_PG_HOST):$(stored DAGSTER_PG_PORT) (.local/env.sh; Dagster storage $stored_db)"
    exit 0
  fi
  # Only the project's own cluster is (re)started below: any other stored server is the user's.
  if [ -n "$stored_url" ] && [ "$stored_origin" != "$(ls /usr/lib/postgresql 2>/dev/null | sort -n | tail -1)/$own_cluster" ]; then
    DAGSTER_PG_DB="${DAGSTER_PG_DB:-$(stored DAGSTER_PG_DB)}" probe "$stored_url" >/dev/null \
      || say "(that URL is the one .local/env.sh keeps from an earlier run: fix that server, or set SURVEILLANCE_DATABASE_URL, or remove .local/env.sh to use a cluster of the project's own)"
    exit 1
  fi
fi

if [ -n "${SURVEILLANCE_DATABASE_URL:-}" ]; then
  dagster_db=$(probe "$SURVEILLANCE_DATABASE_URL") || exit 1
  write_env "$SURVEILLANCE_DATABASE_URL" "$dagster_db" given
  say "using the PostGIS server in SURVEILLANCE_DATABASE_URL (Dagster storage: database $dagster_db)"
  exit 0
fi

if [ ! -f /etc/debian_version ] || [ "$(id -u)" != 0 ]; then
  say "no PostGIS server reachable. Install PostgreSQL 15+ with PostGIS 3 (Debian/Ubuntu as root: this"
  say "script does it), or set SURVEILLANCE_DATABASE_URL=postgresql://user:password@host:port/db to a"
  say "database where 'CREATE EXTENSION postgis' has been run."
  exit 1
fi

if ! command -v pg_lsclusters >/dev/null 2>&1; then
  apt_install postgresql || exit 1
fi
major=$(ls /usr/lib/postgresql | sort -n | tail -1)
if [ ! -f "/usr/share/postgresql/$major/extension/postgis.control" ]; then
  apt_install "postgresql-$major-postgis-3" || exit 1
fi
# The project's own cluster, on the next free port (pg_createcluster's choice): whatever cluster was here
# before keeps its settings, its uptime and its template1.
wanted_connections=200
if ! pg_lsclusters -h | awk -v m="$major" -v c="$own_cluster" '$1 == m && $2 == c' | grep -q .; then
  say "creating PostgreSQL cluster $major/$own_cluster, the project's own (other clusters are left as they are)"
  pg_createcluster "$major" "$own_cluster" >/dev/null
  # Every process that loads the code location holds a few connections to both databases (the UI, the
  # daemon and its code server, each run's process, each Celery worker), and the test suite runs the UI
  # session and the distributed session side by side: PostgreSQL's default of 100 was reached (102 seen).
  pg_conftool "$major" "$own_cluster" set max_connections "$wanted_connections"
fi
if ! pg_lsclusters -h | awk -v m="$major" -v c="$own_cluster" '$1 == m && $2 == c && $4 == "online"' | grep -q .; then
  say "starting PostgreSQL $major/$own_cluster"
  pg_ctlcluster "$major" "$own_cluster" start
fi
port=$(pg_lsclusters -h | awk -v m="$major" -v c="$own_cluster" '$1 == m && $2 == c {print $3}')

# The local cluster serves every clone on this machine, so its password is kept per user, not per clone.
password_file="$config_dir/db-password"
if [ ! -s "$password_file" ]; then
  mkdir -p "$config_dir" && chmod 700 "$config_dir"
  (umask 077 && "$python" -c "import secrets; print(secrets.token_urlsafe(24))" > "$password_file")
fi
password=$(cat "$password_file")

as_postgres() { (cd / && runuser -u postgres -- psql -q -X -v ON_ERROR_STOP=1 -p "$port" "$@"); }

# Our own cluster only: tuned, and restarted for it.
current_connections=$(as_postgres -At -c "SHOW max_connections")
if [ "$current_connections" -lt "$wanted_connections" ]; then
  say "raising max_connections of PostgreSQL $major/$own_cluster from $current_connections to $wanted_connections (restart)"
  pg_conftool "$major" "$own_cluster" set max_connections "$wanted_connections"
  pg_ctlcluster "$major" "$own_cluster" restart
fi
# The password travels as a psql variable (:'password' quotes it), never pasted into SQL text.
as_postgres -v password="$password" <<'SQL'
SELECT format('CREATE ROLE surveillance LOGIN CREATEDB PASSWORD %L', :'password')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'surveillance') \gexec
SELECT format('ALTER ROLE surveillance PASSWORD %L', :'password') \gexec
SELECT 'CREATE DATABASE surveillance OWNER surveillance'
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'surveillance') \gexec
SQL
# PostGIS in template1 too (of our own cluster), so databases the tests create get it without superuser
# rights. Quietly: on every run after the first, PostgreSQL notices that it is there already.
for database in surveillance template1; do
  as_postgres -d "$database" -c "SET client_min_messages = warning" -c "CREATE EXTENSION IF NOT EXISTS postgis"
done

url="postgresql://surveillance:$password@127.0.0.1:$port/surveillance"
dagster_db=$(probe "$url") || exit 1
write_env "$url" "$dagster_db" "$major/$own_cluster"
say "PostgreSQL $major with PostGIS ready on 127.0.0.1:$port (warehouse surveillance, Dagster storage $dagster_db)"
