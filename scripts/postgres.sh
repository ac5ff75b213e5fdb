#!/usr/bin/env bash
# Starts (or reuses) a throwaway PostgreSQL cluster for the tests and prints its URL.
# Debian's `postgresql` package provides the server; as root the cluster runs as `postgres`.
set -euo pipefail
DIR=${TRELLIS_PG_DIR:-/tmp/trellis-pg}
# Below Linux's ephemeral range (32768-60999 by default): a port inside it can be held, at the
# moment the cluster starts, by any outbound connection of the suite that ran just before.
PORT=${TRELLIS_PG_PORT:-15432}
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$PGBIN" ]; then
  "$(dirname "${BASH_SOURCE[0]}")/install-deps.sh" postgres
  PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
fi
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
if [ -f "$DIR/data/postmaster.pid" ] && as_pg "$PGBIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; then
  # This directory's cluster already runs, on the port it found free (line 4 of its pid file).
  PORT=$(sed -n 4p "$DIR/data/postmaster.pid")
elif ! "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PORT"; then
  rm -rf "$DIR"
  mkdir -p "$DIR"
  [ "$(id -u)" = 0 ] && chown postgres "$DIR"
  as_pg "$PGBIN/initdb" -D "$DIR/data" -U trellis --auth=trust -E UTF8 >/dev/null
  # Something other than PostgreSQL may hold the port: then the next ones are tried.
  for attempt in 1 2 3 4 5; do
    if as_pg "$PGBIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w start \
      -o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=400" >/dev/null; then
      break
    fi
    if [ "$attempt" = 5 ] || ! grep -q 'Address already in use' "$DIR/server.log"; then
      echo "postgres.sh: PostgreSQL did not start; its log follows" >&2
      cat "$DIR/server.log" >&2
      exit 1
    fi
    echo "postgres.sh: port $PORT is taken, trying $((PORT + 1))" >&2
    PORT=$((PORT + 1))
    : >"$DIR/server.log"
  done
fi
echo "postgres://trellis@127.0.0.1:$PORT/postgres"
