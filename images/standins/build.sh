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
# Usage: bash images/standins/build.sh   (skips an image that exists and is whole; FORCE=1 rebuilds)
# RAI_STANDIN_REPO names the images' repository (rai-standin).
# The tools are checked before anything is made, and an image is imported only from a root
# filesystem that mmdebstrap finished: a missing tool or a failed download fails loudly and leaves
# no image behind (an empty one had been imported, and later runs skipped it as existing); an
# existing image that is empty (under 10 MB) is made again.
set -euo pipefail
cd "$(dirname "$0")"
MIRROR=${RAI_DEBIAN_MIRROR:-http://deb.debian.org/debian}
REPO=${RAI_STANDIN_REPO:-rai-standin}
MIN_BYTES=$((10 * 1024 * 1024))
fail() { echo "standins: $*" >&2; exit 1; }
whole() {  # the image exists and holds a root filesystem
  local size
  size=$(docker image inspect -f '{{.Size}}' "$1" 2>/dev/null) || return 1
  [ "$size" -ge "$MIN_BYTES" ] && return 0
  echo "standins: $1 exists but is empty or broken ($size bytes); making it again" >&2
  docker image rm -f "$1" >/dev/null 2>&1 || true
  return 1
}
made() { [ -z "${FORCE:-}" ] && whole "$1"; }
needed=()
for image in python:3.11 redis:7 postgres:15; do made "$REPO/$image" || needed+=("$REPO/$image"); done
if [ ${#needed[@]} -gt 0 ]; then
  command -v docker >/dev/null 2>&1 || fail "docker is not installed"
  docker info >/dev/null 2>&1 || fail "the Docker engine does not answer (docker info failed)"
  command -v mmdebstrap >/dev/null 2>&1 ||
    fail "mmdebstrap is not installed, and ${needed[*]} must be made with it: apt-get install mmdebstrap (nothing was made)"
fi
rootfs() {  # image, packages, docker-import changes...
  local image=$REPO/$1 packages=$2; shift 2
  made "$image" && { echo "standins: $image exists"; return; }
  local t0=$SECONDS tar
  tar=$(mktemp --tmpdir rai-standin.XXXXXX.tar)
  trap 'rm -f "$tar"' RETURN
  mmdebstrap --quiet --variant=minbase --include="$packages" \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/usr/share/doc "$1"/usr/share/man' \
    --customize-hook='if [ -e "$1"/usr/bin/python3 ]; then ln -sf python3 "$1"/usr/bin/python; fi' \
    --customize-hook='if [ -e "$1"/usr/sbin/update-ca-certificates ] && [ -d /usr/local/share/ca-certificates ]; then cp -r /usr/local/share/ca-certificates/. "$1"/usr/local/share/ca-certificates/; chroot "$1" update-ca-certificates >/dev/null 2>&1; fi' \
    --customize-hook='if [ -e "$1"/usr/lib/postgresql ]; then cp postgres-entrypoint.sh "$1"/usr/local/bin/docker-entrypoint.sh; chmod 755 "$1"/usr/local/bin/docker-entrypoint.sh; fi' \
    bookworm "$tar" "$MIRROR" || fail "mmdebstrap could not make $image's root filesystem (see above); nothing was imported"
  [ "$(stat -c %s "$tar")" -ge "$MIN_BYTES" ] || fail "mmdebstrap made an empty root filesystem for $image; nothing was imported"
  docker import "$@" "$tar" "$image" >/dev/null || fail "docker import of $image failed"
  echo "standins: $image made in $((SECONDS - t0)) s"
}
rootfs python:3.11 python3,python3-pip,python3-venv,ca-certificates \
  -c 'ENV PIP_BREAK_SYSTEM_PACKAGES=1' -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  -c 'CMD ["python3"]'
rootfs redis:7 redis-server -c 'CMD ["redis-server"]'
rootfs postgres:15 postgresql-15 \
  -c 'ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  -c 'ENV PGDATA=/var/lib/postgresql/data' -c 'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]' -c 'CMD ["postgres"]'
