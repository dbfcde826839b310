# apt_install PACKAGE...: install Debian packages as provisioning needs them. Another package installation
# holding apt's or dpkg's lock (an unattended upgrade, a user's apt) is waited for, up to APT_LOCK_WAIT_S
# (default 600 s), saying once what is waited for; a failed installation names the packages and the command
# to run by hand. Sourced by the provision_*.sh scripts, which define say().

apt_lock_wait_s=${APT_LOCK_WAIT_S:-600}

apt_run() {  # apt-get's arguments; its output only when it fails
  local deadline=$((SECONDS + apt_lock_wait_s)) waited="" out status holder
  while :; do
    # DPkg::Lock::Timeout: apt waits for dpkg's lock itself, a minute at a time (apt 1.9.11 and later).
    if out=$(DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=60 "$@" 2>&1 >/dev/null); then
      return 0
    else
      status=$?
    fi
    if grep -qE "Could not get lock|Unable to acquire the dpkg|Unable to lock" <<<"$out" \
      && [ "$SECONDS" -lt "$deadline" ]; then
      if [ -z "$waited" ]; then
        holder=$(grep -oE "held by process [0-9]+( \([^)]*\))?" <<<"$out" | head -1 || true)
        say "waiting for another package installation to finish (apt's lock is ${holder:-held}); up to ${apt_lock_wait_s} s"
        waited=1
      fi
      sleep "${APT_LOCK_POLL_S:-5}"
      continue
    fi
    printf '%s\n' "$out" >&2
    return "$status"
  done
}

apt_install() {
  say "installing $*"
  if ! apt_run update -qq || ! apt_run install -y -qq "$@"; then
    say "could not install $*: run \`apt-get update && apt-get install $*\` as root, and see its message above"
    return 1
  fi
}
