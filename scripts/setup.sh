#!/usr/bin/env bash
# Installs what rai needs on a Debian machine (as root) and starts the Docker engine when absent.
# Sourced by scripts/demo.sh and scripts/test.sh; safe to run again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export DEBIAN_FRONTEND=noninteractive

need=()
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for pkg in "$@"; do have "$pkg" || need+=("$pkg"); done
command -v python3 >/dev/null || need+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  log=$(mktemp)
  # quiet unless it fails (debconf's notes about apt-utils and the like are not for the user)
  if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}"; } >"$log" 2>&1; then
    cat "$log" >&2; rm -f "$log"; echo "setup: installing ${need[*]} failed" >&2; exit 1
  fi
  rm -f "$log"
fi

# The Docker engine: no default bridge and no iptables (job containers use no network at all).
if command -v dockerd >/dev/null && ! docker info >/dev/null 2>&1; then
  echo "setup: starting dockerd"
  mkdir -p /var/log
  (setsid dockerd --bridge=none --iptables=false --ip6tables=false >/var/log/rai-dockerd.log 2>&1 &)
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 || { echo "setup: dockerd did not start; see /var/log/rai-dockerd.log" >&2; tail -20 /var/log/rai-dockerd.log >&2; }
fi

# The virtual environment with the three distributions, editable.
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.rai-installed
if [ ! -f "$stamp" ] || [ -n "$(find protocol/pyproject.toml client/pyproject.toml server/pyproject.toml worker/pyproject.toml requirements-dev.txt -newer "$stamp" 2>/dev/null)" ]; then
  echo "setup: installing Python packages into .venv"
  log=.venv/pip-install.log  # pip's and setuptools' warnings go here; shown only if the install fails
  if ! { .venv/bin/pip install -q --upgrade pip &&
         .venv/bin/pip install -q -e ./protocol -e ./client -e ./server -e ./worker -r requirements-dev.txt; } >"$log" 2>&1; then
    cat "$log" >&2; echo "setup: installing the Python packages failed (log: $log)" >&2; exit 1
  fi
  touch "$stamp"
fi
