#!/usr/bin/env bash
# A throwaway PostgreSQL server for the history tests (tests/history.rs):
# Debian's packaged server (installed when missing), initdb into a temporary
# directory, listening on 127.0.0.1 only, on a free port, with a password
# (the tests check it is never printed). TLS is on, with a certificate for
# 127.0.0.1 and localhost signed by a CA generated here (openssl), and the
# database `tlsonly` refuses connections without it.
#
#   scripts/postgres-fixture.sh start   prints TOKENSCOPE_TEST_POSTGRES=postgres://…,
#                                       TOKENSCOPE_TEST_POSTGRES_DIR=…, TOKENSCOPE_TEST_POSTGRES_CA=…
#                                       (the CA's PEM) and TOKENSCOPE_TEST_POSTGRES_OTHER_CA=…
#                                       (a CA that signed nothing) on stdout
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
  if ! command -v openssl >/dev/null; then
    log "installing openssl (Debian package): the TLS certificates"
    local sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get install -y --no-install-recommends openssl >&2 ||
      { $sudo_cmd apt-get update >&2 && $sudo_cmd apt-get install -y --no-install-recommends openssl >&2; }
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
  certificates "$dir"
  # Plain connections to `tlsonly` are refused; the rest take either.
  { echo "hostnossl tlsonly all 127.0.0.1/32 reject"; cat "$dir/data/pg_hba.conf"; } > "$dir/hba"
  mv "$dir/hba" "$dir/data/pg_hba.conf"
  [ "$(id -u)" -eq 0 ] && chown -R postgres "$dir"
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200 -c ssl=on -c ssl_cert_file=$dir/server.crt -c ssl_key_file=$dir/server.key" start >&2 ||
    { cat "$dir/server.log" >&2; exit 1; }
  as_owner "$bin/createdb" -h "$dir" -p "$port" -U tokenscope tlsonly >&2
  log "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port ($dir)"
  echo "TOKENSCOPE_TEST_POSTGRES=postgres://tokenscope:$password@127.0.0.1:$port/postgres"
  echo "TOKENSCOPE_TEST_POSTGRES_DIR=$dir"
  echo "TOKENSCOPE_TEST_POSTGRES_CA=$dir/ca.crt"
  echo "TOKENSCOPE_TEST_POSTGRES_OTHER_CA=$dir/other-ca.crt"
}

# A CA, the server's certificate for 127.0.0.1 and localhost signed by it,
# and another CA that signed nothing (what verify-full must refuse).
certificates() {
  local dir="$1"
  ca() { # name
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=tokenscope test $1" \
      -keyout "$dir/$1.key" -out "$dir/$1.crt" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  }
  ca ca
  ca other-ca
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
  printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost" "basicConstraints=CA:FALSE" \
    "keyUsage=digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" > "$dir/server.ext"
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
    -days 2 -extfile "$dir/server.ext" -out "$dir/server.crt" 2>/dev/null
  chmod 600 "$dir/server.key"
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
