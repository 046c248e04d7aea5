#!/usr/bin/env bash
# Stand-ins for the registry images docker-compose.yml names (python:3.12-slim, redis:7,
# postgres:16), for machines that cannot pull from a registry (CI): Debian root filesystems made
# with mmdebstrap from the package archive and `docker import`ed under their own names
# (rai-standin/…), never retagged as the official ones. Same interface where the stack uses it:
#   rai-standin/python   python, pip (system-wide installs allowed), apt-get
#   rai-standin/redis    redis-server on PATH
#   rai-standin/postgres POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB, data in
#                        /var/lib/postgresql/data, port PGPORT (5432), as the official image reads them
# The python stand-in trusts what this machine trusts (its local CAs, e.g. a proxy's), so that
# building the service image on it reaches the package index as the machine itself does.
# Usage: bash images/standins/build.sh   (skips an image that exists; FORCE=1 rebuilds)
set -euo pipefail
cd "$(dirname "$0")"
MIRROR=${RAI_DEBIAN_MIRROR:-http://deb.debian.org/debian}
made() { [ -z "${FORCE:-}" ] && docker image inspect "$1" >/dev/null 2>&1; }
rootfs() {  # image, packages, docker-import changes...
  local image=$1 packages=$2; shift 2
  made "$image" && { echo "standins: $image exists"; return; }
  local t0=$SECONDS
  mmdebstrap --quiet --variant=minbase --include="$packages" \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/usr/share/doc "$1"/usr/share/man' \
    --customize-hook='if [ -e "$1"/usr/bin/python3 ]; then ln -sf python3 "$1"/usr/bin/python; fi' \
    --customize-hook='if [ -e "$1"/usr/sbin/update-ca-certificates ] && [ -d /usr/local/share/ca-certificates ]; then cp -r /usr/local/share/ca-certificates/. "$1"/usr/local/share/ca-certificates/; chroot "$1" update-ca-certificates >/dev/null 2>&1; fi' \
    --customize-hook='if [ -e "$1"/usr/lib/postgresql ]; then cp postgres-entrypoint.sh "$1"/usr/local/bin/docker-entrypoint.sh; chmod 755 "$1"/usr/local/bin/docker-entrypoint.sh; fi' \
    bookworm - "$MIRROR" | docker import "$@" - "$image" >/dev/null
  echo "standins: $image made in $((SECONDS - t0)) s"
}
rootfs rai-standin/python:3.11 python3,python3-pip,python3-venv,ca-certificates \
  -c 'ENV PIP_BREAK_SYSTEM_PACKAGES=1' -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  -c 'CMD ["python3"]'
rootfs rai-standin/redis:7 redis-server -c 'CMD ["redis-server"]'
rootfs rai-standin/postgres:15 postgresql-15 \
  -c 'ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  -c 'ENV PGDATA=/var/lib/postgresql/data' -c 'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]' -c 'CMD ["postgres"]'
