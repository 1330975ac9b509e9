#!/usr/bin/env bash
# Run a throwaway PostgreSQL server (Debian packages) for tests and CI.
#
#   scripts/testpg.sh start DIR   # prints postgresql+psycopg://USER@127.0.0.1:PORT/gctl_test
#   scripts/testpg.sh stop DIR    # silent and successful if nothing is running
#
# Only the URL goes to stdout; progress goes to stderr, the server log to
# RUN/postgres.log. RUN is DIR/pg, or a short /tmp/gctl-testpg.* directory when
# the server user cannot reach DIR (e.g. pytest's 0700 tmp dirs as root) or the
# unix socket path would be too long; DIR/testpg.env records where it is.
# As root the server runs as the system user gctltest (created if missing).
set -Eeuo pipefail

SERVER_USER=gctltest
DBNAME=gctl_test
LOCK=/run/lock/gctl-testpg.lock

log() { printf 'testpg: %s\n' "$*" >&2; }
die() {
  printf 'testpg: error: %s\n' "$*" >&2
  exit 1
}
# Report the failing command once (from the top-level shell, not subshells).
on_err() {
  local rc=$1
  [ "$BASH_SUBSHELL" -gt 0 ] || printf 'testpg: error: command failed (exit %s, line %s): %s\n' \
    "$rc" "$2" "$3" >&2
  exit "$rc"
}
trap 'on_err $? $LINENO "$BASH_COMMAND"' ERR

# libpq environment must not redirect our client calls elsewhere.
unset PGHOST PGHOSTADDR PGPORT PGUSER PGDATABASE PGSERVICE PGPASSWORD PGOPTIONS

usage() { die "usage: $0 start|stop DIR"; }

# Newest installed server bin dir, or nothing.
find_pgbin() {
  local d
  d=$(find /usr/lib/postgresql -mindepth 3 -maxdepth 3 -path '*/bin/initdb' \
    -printf '%h\n' 2>/dev/null | sort -V | tail -n 1) || true
  printf '%s' "$d"
}

# Install Debian's postgresql without starting the default cluster.
install_postgresql() {
  [ "$(id -u)" -eq 0 ] || die "PostgreSQL is not installed and we are not root to apt-get it"
  log "installing Debian's postgresql package"
  local made_policy=0 apt=(apt-get install -y --no-install-recommends postgresql)
  # policy-rc.d exit 101 tells invoke-rc.d not to start services.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    made_policy=1
  fi
  local rc=0
  if ! DEBIAN_FRONTEND=noninteractive "${apt[@]}" >&2; then
    log "install failed; running apt-get update and retrying"
    { DEBIAN_FRONTEND=noninteractive apt-get update >&2 &&
      DEBIAN_FRONTEND=noninteractive "${apt[@]}" >&2; } || rc=1
  fi
  [ "$made_policy" -eq 0 ] || rm -f /usr/sbin/policy-rc.d
  [ "$rc" -eq 0 ] || die "apt-get install postgresql failed"
  # If the default cluster got started anyway, stop it: we never use it.
  if command -v pg_lsclusters >/dev/null; then
    pg_lsclusters -h 2>/dev/null | while read -r ver name _port status _rest; do
      if [ "$status" = online ]; then
        log "stopping default cluster $ver/$name started by the install"
        pg_ctlcluster "$ver" "$name" stop >&2 || true
      fi
    done || true
  fi
}

# Create the unprivileged server user (root only).
ensure_user() {
  getent passwd "$SERVER_USER" >/dev/null && return 0
  log "creating system user $SERVER_USER"
  useradd --system --user-group --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin "$SERVER_USER" >&2
}

# Run a command as the server user.
as_server() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u "$SERVER_USER" -- "$@"
  else
    "$@"
  fi
}

free_port() {
  local py=/usr/bin/python3
  [ -x "$py" ] || py=python3
  "$py" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}

# Load DIR/testpg.env (written by start); returns 1 if absent.
load_state() {
  [ -f "$DIR/testpg.env" ] || return 1
  # shellcheck source=/dev/null
  . "$DIR/testpg.env"
}

cmd_stop() {
  load_state || return 0
  [ -d "$RUN" ] || return 0
  cd "$RUN"
  local st=0
  as_server "$PGBIN/pg_ctl" status -D "$RUN/data" >/dev/null 2>&1 || st=$?
  if [ "$st" -eq 0 ]; then
    as_server "$PGBIN/pg_ctl" stop -D "$RUN/data" -m immediate -w >&2 ||
      die "pg_ctl stop failed (log: $RUN/postgres.log)"
  fi
  cd /
  # A /tmp fallback dir is ours alone: remove it.
  if [ "$RUN" != "$DIR/pg" ]; then
    rm -rf -- "$RUN"
    rm -f -- "$DIR/testpg.env"
  fi
}

cmd_start() {
  local is_root=0 dbuser
  [ "$(id -u)" -ne 0 ] || is_root=1

  # Install and user creation are serialised across concurrent starts.
  PGBIN=$(find_pgbin)
  if [ -z "$PGBIN" ] || { [ "$is_root" -eq 1 ] && ! getent passwd "$SERVER_USER" >/dev/null; }; then
    [ "$is_root" -eq 1 ] || die "no /usr/lib/postgresql/*/bin/initdb; apt-get install postgresql (as root)"
    exec 9>"$LOCK"
    flock 9
    [ -n "$(find_pgbin)" ] || install_postgresql
    ensure_user
    flock -u 9
    exec 9>&-
    PGBIN=$(find_pgbin)
    [ -n "$PGBIN" ] || die "initdb still missing after installing postgresql"
  fi
  if [ "$is_root" -eq 1 ]; then dbuser=$SERVER_USER; else dbuser=$(id -un); fi

  # Refuse to clobber a live server; clear anything stale.
  if load_state && [ -d "$RUN/data" ] &&
    (cd "$RUN" && as_server "$PGBIN/pg_ctl" status -D "$RUN/data" >/dev/null 2>&1); then
    die "a server is already running for $DIR (run: $0 stop $DIR)"
  fi
  cmd_stop
  rm -rf -- "$DIR/pg" "$DIR/testpg.env"

  # Pick RUN: DIR/pg if the server user can use it and the socket path fits.
  # As root, hand DIR itself to the server user (its parents must be searchable too).
  [ "$is_root" -eq 0 ] || chown "$SERVER_USER:" "$DIR"
  RUN=$DIR/pg
  mkdir -p "$RUN"
  [ "$is_root" -eq 0 ] || chown "$SERVER_USER:" "$RUN"
  # Socket path "$RUN/sock/.s.PGSQL.NNNNN" must fit in sun_path (107 bytes).
  if ! as_server test -w "$RUN" -a -x "$RUN" 2>/dev/null || [ "${#RUN}" -gt 80 ]; then
    rmdir "$RUN"
    RUN=$(mktemp -d /tmp/gctl-testpg.XXXXXX)
    [ "$is_root" -eq 0 ] || chown "$SERVER_USER:" "$RUN"
    log "using $RUN (DIR not usable by the server user or path too long)"
  fi
  printf 'RUN=%q\nPGBIN=%q\nDBUSER=%q\n' "$RUN" "$PGBIN" "$dbuser" >"$DIR/testpg.env"
  cd "$RUN"

  # Fresh cluster: trust auth for the local socket and 127.0.0.1 only.
  as_server mkdir -m 755 "$RUN/sock"
  as_server "$PGBIN/initdb" -D "$RUN/data" -U "$dbuser" -E UTF8 --no-locale \
    --auth=trust --no-sync >"$RUN/initdb.log" 2>&1 ||
    { cat "$RUN/initdb.log" >&2; die "initdb failed (see $RUN/initdb.log)"; }
  as_server tee "$RUN/data/pg_hba.conf" >/dev/null <<'EOF'
local all all              trust
host  all all 127.0.0.1/32 trust
EOF
  as_server tee -a "$RUN/data/postgresql.conf" >/dev/null <<EOF

# testpg.sh: throwaway test server, durability off for speed.
listen_addresses = '127.0.0.1'
unix_socket_directories = '$RUN/sock'
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 32MB
EOF

  # Start on a free port; retry with another port if we lose a race for it.
  local port="" attempt
  for attempt in 1 2 3 4 5; do
    port=$(free_port)
    if as_server "$PGBIN/pg_ctl" start -D "$RUN/data" -l "$RUN/postgres.log" \
      -o "-p $port" -w -t 60 >&2; then
      break
    fi
    [ "$attempt" -lt 5 ] || { tail -n 20 "$RUN/postgres.log" >&2 || true; die "pg_ctl start failed (log: $RUN/postgres.log)"; }
    log "start on port $port failed; retrying"
  done
  printf 'PORT=%q\n' "$port" >>"$DIR/testpg.env"

  # Wait for TCP connections, then create the test database.
  local i
  for i in $(seq 1 100); do
    "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$port" -d postgres -t 1 && break
    [ "$i" -lt 100 ] || die "server on port $port not ready after 10s (log: $RUN/postgres.log)"
    sleep 0.1
  done
  "$PGBIN/createdb" -h 127.0.0.1 -p "$port" -U "$dbuser" "$DBNAME" >&2 ||
    die "createdb $DBNAME failed"

  printf 'postgresql+psycopg://%s@127.0.0.1:%s/%s\n' "$dbuser" "$port" "$DBNAME"
}

[ $# -eq 2 ] || usage
[ -n "$2" ] || usage
case $1 in
  start)
    mkdir -p -- "$2"
    DIR=$(cd -- "$2" && pwd -P)
    cmd_start
    ;;
  stop)
    [ -d "$2" ] || exit 0
    DIR=$(cd -- "$2" && pwd -P)
    cmd_stop
    ;;
  *) usage ;;
esac
