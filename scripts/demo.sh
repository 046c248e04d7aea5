#!/usr/bin/env bash
# The whole service on this machine, then examples/hello submitted to it. Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh docker.io busybox-static redis-server gcc libc6-dev
exec .venv/bin/raid dev --submit examples/hello "$@"
