#!/usr/bin/env bash
# `docker compose` where the Compose plugin is installed, else `docker-compose` (Debian's 1.29 and
# other standalone installs), with the same arguments: the README's compose commands work on both.
#   bash scripts/compose.sh up -d
set -euo pipefail
if docker compose version >/dev/null 2>&1; then
  exec docker compose "$@"
elif command -v docker-compose >/dev/null 2>&1; then
  exec docker-compose "$@"
fi
echo "compose.sh: neither 'docker compose' (the Compose plugin) nor 'docker-compose' is installed;" \
     "install one, e.g. apt-get install docker-compose (Debian) or docker-compose-plugin (Docker's packages)" >&2
exit 127
