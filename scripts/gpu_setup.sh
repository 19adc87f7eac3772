# Sourced by scripts/gpu_check.sh and scripts/gpu_bench.sh on the GPU machine:
# installs the carried wheels (.whl/: triton, flag_gems, expecttest for the machine's torch), writes
# the versions to $OUT/versions.txt, builds the core against the machine's torch.
# Sourced twice in one command (gpu_bench.sh, then gpu_check.sh), it sets up once.
start=$(date +%s)  # the callers report their total from here
# A second caller may name another $OUT (gpu_check.sh with OUT=$OUT/check): make it before returning.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[[ -n ${FLAGOS_GPU_READY:-} ]] && return 0
export PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch, triton, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda,
    "triton", triton.__version__, "transformers", transformers.__version__)'
  python3 -c 'import flag_gems; print("flag_gems", flag_gems.__version__)' 2>&1 | tail -1
  # The OpInfo conformance tests import torch.testing._internal.common_utils, which needs expecttest.
  python3 -c 'import expecttest' 2>/dev/null || echo "expecttest missing: the conformance tests will fail;" \
    "run 'python3 -m pip download --no-deps -d .whl expecttest' on the dev machine and carry .whl"
  date -u +"%Y-%m-%d %H:%M UTC"
} | tee "$OUT/versions.txt"
build_start=$(date +%s)
# A warm machine keeps the ignored build outputs between calls, but pip rebuilds the whole core each time (over a
# minute of device time): the core built from the same sources against the same torch is used again.
source_hash=$( (cat setup.py pyproject.toml; find torch_fl/csrc -type f | sort | xargs cat;
  python3 -c 'import torch; print(torch.__version__)') | sha256sum | cut -d' ' -f1)
if [[ -f build/core-source.sha256 && $(cat build/core-source.sha256) == "$source_hash" ]] && ls torch_fl/_C*.so \
  >/dev/null 2>&1 && python3 -c 'import torch_fl' 2>/dev/null; then
  echo "build: the core of the previous call (same sources and torch)"
else
  python3 -m pip install -q --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
  mkdir -p build && echo "$source_hash" > build/core-source.sha256
  echo "build: $(( $(date +%s) - build_start )) s"; rm -f "$OUT/build.log"  # $OUT returns 8 files at most
fi
export FLAGOS_GPU_READY=1
