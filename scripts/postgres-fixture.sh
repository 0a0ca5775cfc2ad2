#!/usr/bin/env bash
# A throwaway PostgreSQL server for the history tests (tests/history.rs):
# Debian's packaged server (installed when missing), initdb into a temporary
# directory, listening on 127.0.0.1 only, on a free port, with a password
# (the tests check it is never printed).
#
#   scripts/postgres-fixture.sh start   prints TOKENSCOPE_TEST_POSTGRES=postgres://… and
#                                       TOKENSCOPE_TEST_POSTGRES_DIR=… on stdout
#   scripts/postgres-fixture.sh stop DIR
#
# Progress goes to stderr. As root, the server runs as the `postgres` user
# (the package creates it): PostgreSQL refuses to run as root.
set -euo pipefail

log() { echo "[postgres-fixture] $*" >&2; }

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }

as_owner() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

start() {
  local bin
  bin="$(pg_bin)"
  if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    log "installing postgresql (Debian package)"
    local sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get install -y --no-install-recommends postgresql >&2 ||
      { $sudo_cmd apt-get update >&2 && $sudo_cmd apt-get install -y --no-install-recommends postgresql >&2; }
    bin="$(pg_bin)"
  fi
  local dir port password
  dir="$(mktemp -d /tmp/tokenscope-pg.XXXXXX)"
  chmod 755 "$dir"
  password="ts-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
  printf '%s\n' "$password" > "$dir/pwfile"
  [ "$(id -u)" -eq 0 ] && chown -R postgres "$dir"
  as_owner "$bin/initdb" -D "$dir/data" -U tokenscope --pwfile="$dir/pwfile" \
    --auth-local=trust --auth-host=scram-sha-256 --no-sync >"$dir/initdb.log" 2>&1 ||
    { cat "$dir/initdb.log" >&2; exit 1; }
  rm -f "$dir/pwfile"
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start >&2 ||
    { cat "$dir/server.log" >&2; exit 1; }
  log "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port ($dir)"
  echo "TOKENSCOPE_TEST_POSTGRES=postgres://tokenscope:$password@127.0.0.1:$port/postgres"
  echo "TOKENSCOPE_TEST_POSTGRES_DIR=$dir"
}

stop() {
  local dir="$1" bin
  bin="$(pg_bin)"
  [ -d "$dir/data" ] && as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >&2 || true
  rm -rf "$dir"
}

case "${1:-}" in
  start) start ;;
  stop) stop "${2:?stop needs the directory start printed}" ;;
  *) echo "usage: $0 start | stop DIR" >&2; exit 2 ;;
esac
