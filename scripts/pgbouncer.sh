#!/usr/bin/env bash
# PgBouncer in transaction-pooling mode on 127.0.0.1:6432, in front of the PostgreSQL server on
# 127.0.0.1:5432: the usual companion of several server processes on one database (issue 33 §5).
# Installs Debian's `pgbouncer` when it is missing (needs root, as CI runs), keeps its
# configuration, pid file and log in .cache/pgbouncer/ and is idempotent: a second call finds it
# running and returns. Any database name is forwarded to the server (`* =`), so databases the
# tests create are reachable at once; any user name is accepted and logs in as `postgres`.
# Exit status 0 when it listens, 1 otherwise (the message says why).
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${MULTIBANK_PGBOUNCER_PORT:-6432}
PG_HOST=${MULTIBANK_PGBOUNCER_SERVER_HOST:-127.0.0.1}
PG_PORT=${MULTIBANK_PGBOUNCER_SERVER_PORT:-5432}
RUN_AS=${MULTIBANK_PGBOUNCER_USER:-postgres}
DIR=$PWD/.cache/pgbouncer
CONF=$DIR/pgbouncer.ini
PIDFILE=$DIR/pgbouncer.pid
LOG=$DIR/pgbouncer.log

mkdir -p "$DIR"
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; }

if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null && listening; then
  echo "pgbouncer: already running on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"))"
  exit 0
fi

if ! command -v pgbouncer >/dev/null 2>&1 && [ ! -x /usr/sbin/pgbouncer ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "pgbouncer: not installed, and installing it needs root (apt-get install pgbouncer)" >&2
    exit 1
  fi
  echo "pgbouncer: installing Debian's package"
  # The package's own service would take port 6432 with its default configuration: keep the
  # package from starting it (policy-rc.d's 101 = "action forbidden") for this install only.
  made_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    made_policy=1
  fi
  rc=0
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer >"$DIR.install.log" 2>&1 ||
    { apt-get update -q >>"$DIR.install.log" 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer >>"$DIR.install.log" 2>&1; } ||
    rc=$?
  [ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  if [ "$rc" != 0 ]; then
    echo "pgbouncer: apt-get install failed; see $DIR.install.log" >&2
    exit 1
  fi
fi
BIN=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)

if listening; then
  # Another checkout's PgBouncer (its pid file elsewhere) serves as well: every database name is
  # forwarded the same way. Anything else on the port is an error.
  if other=$(pgrep -x pgbouncer | head -1) && [ -n "$other" ]; then
    echo "pgbouncer: already running on 127.0.0.1:$PORT (pid $other, started elsewhere): using it"
    exit 0
  fi
  echo "pgbouncer: port $PORT is taken by another process; stop it or set MULTIBANK_PGBOUNCER_PORT" >&2
  exit 1
fi

cat >"$CONF" <<INI
[databases]
* = host=$PG_HOST port=$PG_PORT user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PORT
unix_socket_dir =
auth_type = any
pool_mode = transaction
max_client_conn = 2000
default_pool_size = 20
max_db_connections = 40
server_reset_query =
; asyncpg and psql may send these at start-up; PgBouncer does not track them.
ignore_startup_parameters = extra_float_digits,options,statement_timeout,idle_in_transaction_session_timeout
logfile = $LOG
pidfile = $PIDFILE
admin_users = postgres
INI
if [ "$(id -u)" = 0 ]; then
  chown -R "$RUN_AS" "$DIR"
  "$BIN" -d -u "$RUN_AS" "$CONF"
else
  "$BIN" -d "$CONF"
fi
for _ in $(seq 50); do
  listening && { echo "pgbouncer: running on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"))"; exit 0; }
  sleep 0.1
done
echo "pgbouncer: did not start; its log ($LOG):" >&2
tail -20 "$LOG" >&2 || true
exit 1
