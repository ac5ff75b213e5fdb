#!/usr/bin/env bash
# Starts (or reuses) a throwaway PostgreSQL cluster for the tests and prints its URL.
# Debian's `postgresql` package provides the server; as root the cluster runs as `postgres`.
set -euo pipefail
DIR=${TRELLIS_PG_DIR:-/tmp/trellis-pg}
PORT=${TRELLIS_PG_PORT:-55432}
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$PGBIN" ]; then
  "$(dirname "${BASH_SOURCE[0]}")/install-deps.sh" postgres
  PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
fi
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
if ! "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PORT"; then
  rm -rf "$DIR"
  mkdir -p "$DIR"
  [ "$(id -u)" = 0 ] && chown postgres "$DIR"
  as_pg "$PGBIN/initdb" -D "$DIR/data" -U trellis --auth=trust -E UTF8 >/dev/null
  as_pg "$PGBIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w start \
    -o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=400" >/dev/null
fi
echo "postgres://trellis@127.0.0.1:$PORT/postgres"
