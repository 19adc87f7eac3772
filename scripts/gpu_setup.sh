# Sourced by scripts/gpu_check.sh and scripts/gpu_bench.sh on the GPU machine:
# installs the carried wheels (.whl/, from ../shared/tools/gpu-wheels.sh), writes
# the versions to $OUT/versions.txt, builds the core against the machine's torch.
# Sourced twice in one command (gpu_bench.sh, then gpu_check.sh), it sets up once.
start=$(date +%s)  # the callers report their total from here
[[ -n ${FLAGOS_GPU_READY:-} ]] && return 0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
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
  date -u +"%Y-%m-%d %H:%M UTC"
} | tee "$OUT/versions.txt"
build_start=$(date +%s)
python3 -m pip install -q --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - build_start )) s"; rm -f "$OUT/build.log"  # $OUT returns 8 files at most
export FLAGOS_GPU_READY=1
