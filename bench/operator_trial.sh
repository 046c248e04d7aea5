#!/usr/bin/env bash
# The README's operator steps ("Operate it": Settings, Start) as written, for a trial without a
# GPU, in a fresh clone of this checkout: the engine as scripts/setup.sh starts it (--bridge=none
# --iptables=false), the stand-in images, the trial's .env, the service image built from nothing
# as the first `up` builds it on a fresh machine (`build --no-cache`: apt-get and pip on the host's
# network), `up`, users, a student's job, the first lines of "Add a GPU host" (the two files copied
# out, and Redis's TLS port tried with them: PONG; then refused for another CA, for no password,
# and for plain text), `down -v`.
# Writes the transcript to stdout:   bash bench/operator_trial.sh > bench/operator-trial-transcript.txt
# RAI_TRIAL_PORT (8180) and RAI_TRIAL_REDIS_TLS_PORT (16380): the published ports, free ones here.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
DIR=$(mktemp -d /tmp/rai-operator.XXXXXX)
PORT=${RAI_TRIAL_PORT:-8180}
TLS_PORT=${RAI_TRIAL_REDIS_TLS_PORT:-16380}
T0=$SECONDS
step() {  # a README line: shown, run in the clone, its output and status after it
  printf '\n$ %s\n' "$1"
  local t=$SECONDS
  (cd "$DIR/rai" && bash -o pipefail -c "$1") 2>&1 | sed -e 's/\r$//' -e 's/^.*\r//' -e 's/\x1b\[[0-9;]*m//g'
  local rc=${PIPESTATUS[0]}
  printf '[exit %s, %s s]\n' "$rc" "$((SECONDS - t))"
  return "$rc"
}
echo "# rai operator trial: the README's steps as written ($(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores)"
echo "# clone of $(git -C "$SRC" rev-parse --short HEAD) into $DIR/rai"
git clone -q "$SRC" "$DIR/rai" || exit 1
step "bash scripts/setup.sh docker.io docker-compose mmdebstrap" || exit 1
step "ps -o args= -C dockerd; docker-compose version --short; docker network ls --format '{{.Name}} {{.Driver}}'"
step "bash images/standins/build.sh" || exit 1
step "(umask 077; cat > .env) <<'EOF'
RAI_PORT=$PORT
RAI_REDIS_TLS_BIND=127.0.0.1
RAI_REDIS_TLS_PORT=$TLS_PORT
POSTGRES_PASSWORD=trial-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
RAI_PYTHON_IMAGE=rai-standin/python:3.11
RAI_REDIS_IMAGE=rai-standin/redis:7
RAI_POSTGRES_IMAGE=rai-standin/postgres:15
EOF
ls -l .env"
step "bash scripts/compose.sh build --no-cache" || exit 1
ok=0
if step "bash scripts/compose.sh up -d"; then
  step "bash scripts/compose.sh ps"
  step "for i in \$(seq 60); do curl -fsS http://127.0.0.1:$PORT/healthz && break; sleep 1; done; echo"
  step "(umask 077; bash scripts/compose.sh exec -T server raiserver add-user admin --role admin --server-url http://127.0.0.1:$PORT > admin.profile)"
  step "(umask 077; bash scripts/compose.sh exec -T server raiserver add-user alice --role student --server-url http://127.0.0.1:$PORT > alice.profile)"
  step "ls -l admin.profile alice.profile"
  step "RAI_PROFILE=alice.profile .venv/bin/raiclient submit -p examples/hello" && ok=1
  step "bash scripts/compose.sh logs --tail=5 worker"
  step "mkdir -p rai-secrets
(umask 077; bash scripts/compose.sh exec -T server cat /run/rai/secrets.env > rai-secrets/secrets.env)
(umask 077; bash scripts/compose.sh exec -T server cat /run/rai/redis-ca.pem > rai-secrets/redis-ca.pem)
ls -l rai-secrets; openssl x509 -in rai-secrets/redis-ca.pem -noout -subject -enddate"
  step "export REDISCLI_AUTH=\$(sed -n 's/^RAI_REDIS_PASSWORD=//p' rai-secrets/secrets.env)
redis-cli --tls --cacert rai-secrets/redis-ca.pem -p $TLS_PORT ping
redis-cli --tls --cacert /etc/ssl/certs/ca-certificates.crt -p $TLS_PORT ping
REDISCLI_AUTH= redis-cli --tls --cacert rai-secrets/redis-ca.pem -p $TLS_PORT ping
redis-cli -p $TLS_PORT ping; true"
fi
step "bash scripts/compose.sh down -v"
rm -rf "$DIR"
echo
echo "# $([ $ok = 1 ] && echo 'the job succeeded' || echo 'FAILED'); $((SECONDS - T0)) s in all"
[ $ok = 1 ]
