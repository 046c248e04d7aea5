#!/usr/bin/env bash
# The test suite, with real Redis, PostgreSQL, Docker and Chromium; installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh docker.io busybox-static redis-server postgresql dataset-fashion-mnist chromium gcc libc6-dev \
  slurmctld slurmd slurm-client munge openssl docker-compose mmdebstrap

# PostgreSQL: use the one running on 127.0.0.1:5432, else start the installed cluster with trust
# auth on loopback (a throwaway test machine only).
if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  ver=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -1)
  if [ -n "$ver" ]; then
    hba=/etc/postgresql/$ver/main/pg_hba.conf
    grep -q "rai-test" "$hba" || sed -i '1i host all all 127.0.0.1/32 trust # rai-test\nlocal all all trust # rai-test' "$hba"
    pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
    for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.5; done
  fi
fi

.venv/bin/ruff check protocol client server worker tests bench  # rules and McCabe 15: ruff.toml
.venv/bin/ruff format --check protocol client server worker tests bench
.venv/bin/mypy protocol/raiprotocol client/raiclient server/raiserver worker/raiworker  # config: mypy.ini
.venv/bin/lint-imports  # the layers and no import cycles, lazy imports included: .importlinter
bash scripts/check_packages.sh  # each distribution alone: its declared dependencies suffice (~1 min)
export RAI_REQUIRE_DOCKER=1 RAI_REQUIRE_POSTGRES=1 RAI_REQUIRE_BROWSER=1 RAI_REQUIRE_SLURM=1
# RAI_TESTS_AT_ONCE=1: one pytest, in order. Else the suite runs in shares (tests/conftest.py), three
# at once: the Docker engine's tests (one such session at a time), those on the engine through
# workers of their own (the fault campaign and soak) and those that need no engine, whose outputs
# follow the first's; then the load benches marked alone, on a machine quiet again. Each share has
# its own basetemp.
if [ "${RAI_TESTS_AT_ONCE:-3}" = 1 ]; then
  exec .venv/bin/python -m pytest "$@"
fi
shares=$(mktemp -d /tmp/rai-test-shares.XXXXXX)
share() {  # pytest's status for one share; 5 (this share holds none of the tests asked for) is no failure
  local rc=0
  .venv/bin/python -m pytest --share "$1" --basetemp "$shares/$1" "${@:2}" || rc=$?
  [ "$rc" = 5 ] && rc=0
  return "$rc"
}
engine_rc=0 beside_rc=0 rest_rc=0 alone_rc=0
share beside -p no:cacheprovider "$@" >"$shares/beside.log" 2>&1 &
beside_pid=$!
share rest -p no:cacheprovider "$@" >"$shares/rest.log" 2>&1 &
rest_pid=$!
echo "== the tests on the Docker engine (two more shares run beside them; their output follows) =="
share engine "$@" || engine_rc=$?
wait "$beside_pid" || beside_rc=$?
wait "$rest_pid" || rest_rc=$?
echo "== the tests on the Docker engine through workers of their own, run beside those above =="
cat "$shares/beside.log"
echo "== the tests that need no Docker engine, run beside those above =="
cat "$shares/rest.log"
echo "== the load benches, on a machine quiet again =="
share alone -p no:cacheprovider "$@" || alone_rc=$?
echo "shares: engine $engine_rc, beside $beside_rc, rest $rest_rc, alone $alone_rc (pytest's exit statuses; 0 is a pass)"
rm -rf "$shares"
[ "$engine_rc" = 0 ] && [ "$beside_rc" = 0 ] && [ "$rest_rc" = 0 ] && [ "$alone_rc" = 0 ]
