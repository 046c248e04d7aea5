#!/usr/bin/env bash
# The service on a real GPU host with no Docker (the device machine): Redis, the server, a worker
# with the process executor, then `raiclient submit examples/ece408-conv`, ten repeated
# submissions, and direct timings of the baseline, optimized and cuDNN convolutions.
#
# Needs: python3 with the packages of client/, server/, worker/ (PYTHONPATH ok), redis-server
# (REDIS_SERVER), Fashion-MNIST's t10k files (FASHION_MNIST_DIR), nvcc, a GPU; OUT for results.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/rai-gpu-out}
mkdir -p "$OUT"
W=$(mktemp -d)
export PYTHONPATH=$ROOT/client:$ROOT/server:$ROOT/worker${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
REDIS_SERVER=${REDIS_SERVER:-redis-server}
PORT=18000 RPORT=16379
export RAI_DATA_DIR=$W/data RAI_REDIS_URL=redis://127.0.0.1:$RPORT/0 RAI_WORKER_TOKEN=gpu-verify-token
export RAI_SERVER_URL=http://127.0.0.1:$PORT RAI_EXECUTOR=process RAI_GPUS=auto RAI_WORK_DIR=$W/worker
export RAI_WORKER_NAME=gpu-node-1 RAI_QUEUES=gpu RAI_JOB_ENV=FASHION_MNIST_DIR=$FASHION_MNIST_DIR
export RAI_TIMING_REPEATS=3 RAI_MAX_ACTIVE_JOBS=20 RAI_SUBMISSIONS_PER_MINUTE=100

step() { echo; echo "=== $* ($(date +%T))"; }

step "GPU"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
nvcc --version | tail -2

step "start redis, server, worker"
$REDIS_SERVER --port $RPORT --bind 127.0.0.1 --save "" --appendonly no --dir "$W" --daemonize yes --logfile "$W/redis.log"
python3 -m raiserver.ops.cli add-user alice --role student --server-url $RAI_SERVER_URL --profile "$W/alice.profile" >/dev/null
python3 -m uvicorn raiserver.asgi:app --host 127.0.0.1 --port $PORT >"$W/server.log" 2>&1 &
for _ in $(seq 1 100); do curl -sf $RAI_SERVER_URL/healthz >/dev/null && break; sleep 0.2; done
python3 -m raiworker.cli >"$W/worker.log" 2>&1 &
sleep 4
export RAI_PROFILE=$W/alice.profile

step "raiclient submit examples/ece408-conv"
python3 -m raiclient submit -p examples/ece408-conv 2>&1 | tee "$OUT/submit.txt"
echo "client exit status: ${PIPESTATUS[0]}"

step "10 submissions of the same project"
for i in $(seq 1 10); do
  python3 -m raiclient submit -p examples/ece408-conv >"$W/run$i.txt" 2>&1
  echo "run $i: exit $? $(grep -E '^Op Time' "$W/run$i.txt" | head -2 | tr '\n' ' ')"
done | tee "$OUT/repeats.txt"

step "a 'final' submission: the timing run repeated 3 times on an idle host, then the leaderboard"
F=$W/final; cp -r examples/ece408-conv "$F"; rm -rf "$F/instructor"; printf '%%PDF-1.4 report\n' > "$F/report.pdf"
python3 -m raiclient submit -p "$F" --kind final 2>&1 | tee "$OUT/final.txt" | grep -E 'Repeat|Op Time|Timing runs|Correctness|Job '
python3 -m raiclient.cli ranking | tee "$OUT/ranking.txt"

if [ -z "${SKIP_DIRECT:-}" ]; then
step "direct timings: baseline (m2), optimized (opt), CPU (m1)"
B=$W/direct; cp -r examples/ece408-conv "$B"; cp -r examples/ece408-conv/instructor "$B/" 2>/dev/null
(cd "$B" && make -s m1 m2 opt) 2>&1 | tail -3
for prog in m2 opt; do for n in 100 1000 10000; do
  for rep in 1 2 3; do echo "$prog $n $rep $( (cd "$B" && ./$prog $n) | grep -E 'Op Time|Correctness' | tr '\n' ' ')"; done
done; done | tee "$OUT/direct.txt"
(cd "$B" && /usr/bin/time ./m1 10000) 2>&1 | grep -E 'Op Time|Correctness|elapsed' | tee -a "$OUT/direct.txt"

step "cuDNN through PyTorch"
python3 bench/cudnn_compare.py | tee "$OUT/cudnn.json"
fi

step "server and worker logs (tail)"
tail -5 "$W/server.log"; tail -15 "$W/worker.log"
kill %1 %2 2>/dev/null
