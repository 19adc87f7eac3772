#!/usr/bin/env bash
# What the lead runs on the H200 (device tool), from the repo root:
#   bash scripts/gpu_check.sh [pytest selection...]
# Builds the core against the machine's torch, runs the cuda/anyplatform
# tests and the overhead benchmark; logs and JSON go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)' | tee -a "$OUT/gpu.txt"
start=$(date +%s)
python3 -m pip install -q --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
sel=${*:-tests}
python3 -m pytest -q -p no:cacheprovider -rs -m "(anyplatform or cuda or flaggems or flaggems_python) and not slow" $sel 2>&1 | tee "$OUT/pytest.log" | tail -25
python3 benchmarks/overhead.py --out "$OUT/overhead_cuda.json" 2>&1 | tail -14
