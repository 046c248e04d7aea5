#!/bin/sh
# The official postgres image's interface, as far as docker-compose.yml uses it: a first start
# initialises $PGDATA with POSTGRES_USER (superuser), POSTGRES_PASSWORD and POSTGRES_DB; the server
# then listens on all addresses at PGPORT (5432), password authentication from the network.
set -eu
: "${PGDATA:=/var/lib/postgresql/data}" "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}" "${PGPORT:=5432}"
if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" /run/postgresql && chown -R postgres:postgres "$PGDATA" /run/postgresql && chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pw=$(mktemp); printf '%s' "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}" > "$pw"
  initdb --username="$POSTGRES_USER" --pwfile="$pw" --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 -D "$PGDATA" >/dev/null
  rm -f "$pw"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p $PGPORT" -w start >/dev/null
  if [ "$POSTGRES_DB" != postgres ]; then
    psql -p "$PGPORT" -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" -d postgres -c "CREATE DATABASE \"$POSTGRES_DB\"" >/dev/null
  fi
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  echo "postgres stand-in: initialised $PGDATA for $POSTGRES_USER/$POSTGRES_DB"
fi
if [ "${1:-}" = postgres ]; then shift; exec postgres -c "listen_addresses=${POSTGRES_LISTEN:-*}" -p "$PGPORT" "$@"; fi
exec "$@"
