#!/usr/bin/env bash
# The benchmarks on the H200 (device tool), from the repo root, alone on the machine:
#   bash scripts/gpu_bench.sh                      # overhead (+ route_breakdown.py), then e2e: about 9 minutes
#   STEP=overhead|e2e|profile|profile+overhead|demo bash scripts/gpu_bench.sh
# Carry .whl (../shared/tools/gpu-wheels.sh) for the FlagGems rows. Installs the
# wheels, builds the core, then runs benchmarks/overhead.py, benchmarks/e2e.py
# (ROUNDS rounds, default 3; E2E_DEADLINE=seconds starts no round that would end
# later; E2E_VARIANTS=native,flagos limits the variants; PAIRS in-process
# native/flagos pairs first, default 6; CONCURRENT=1 on two GPUs runs native
# and flagos at once in each round, one per GPU), benchmarks/profile_decode.py for prefill and decode, or the demo
# (native routes, then the FlagGems profile); JSON, PNG and logs go to $OUT.
# Correctness checks: scripts/gpu_check.sh.
set -uo pipefail
STEP=${STEP:-all}
source scripts/gpu_setup.sh
if [[ $STEP == all || $STEP == overhead || $STEP == profile+overhead ]]; then
  python3 benchmarks/overhead.py --out "$OUT/overhead_cuda.json" 2>&1 | tee "$OUT/overhead.log" | tail -16
  python3 benchmarks/route_breakdown.py --json "$OUT/route_breakdown.json" 2>&1 | tee -a "$OUT/overhead.log"
fi
if [[ $STEP == profile || $STEP == profile+overhead ]]; then  # where the e2e time goes (docs/verification.md section 8)
  python3 benchmarks/profile_decode.py --task prefill --trace-dir "$OUT" > "$OUT/profile_prefill.txt" 2>&1; tail -30 "$OUT/profile_prefill.txt"
  # e2e.py runs prefill after decode in one process: flagos prefill was slower there than alone
  python3 benchmarks/profile_decode.py --task prefill --after-decode 64 > "$OUT/profile_prefill_after_decode.txt" 2>&1
  grep "===" "$OUT/profile_prefill_after_decode.txt"
  # ... and after freeing and rebuilding the models, as each e2e task does
  python3 benchmarks/profile_decode.py --task prefill --after-decode 64 --reload > "$OUT/profile_prefill_reload.txt" 2>&1
  grep "===" "$OUT/profile_prefill_reload.txt"
  python3 benchmarks/profile_decode.py --task decode > "$OUT/profile_decode.txt" 2>&1; tail -30 "$OUT/profile_decode.txt"
fi
if [[ $STEP == demo ]]; then
  python3 -m torch_fl demo 2> "$OUT/demo.stderr" | tee "$OUT/demo.txt"
  FLAGOS_USE_FLAGGEMS=1 python3 -m torch_fl demo 2> "$OUT/demo_flaggems.stderr" | tee "$OUT/demo_flaggems.txt"
fi
if [[ $STEP == all || $STEP == e2e ]]; then
  # CONCURRENT=1 on two GPUs: each round runs native and flagos at once, one
  # per GPU (--concurrent). Off by default: on 2026-11-30 it was no steadier
  # than rounds one after the other (docs/verification.md section 8).
  concurrent=()
  (( $(nvidia-smi -L | wc -l) > 1 )) && [[ ${CONCURRENT:-0} == 1 ]] && concurrent=(--concurrent)
  python3 benchmarks/e2e.py --rounds "${ROUNDS:-3}" ${E2E_DEADLINE:+--deadline "$E2E_DEADLINE"} \
    ${E2E_VARIANTS:+--variants "$E2E_VARIANTS"} --paired "${PAIRS:-6}" "${concurrent[@]}" \
    --out "$OUT" --name e2e-h200-qwen3-0.6b 2>&1 | tail -30
fi
echo "total: $(( $(date +%s) - start )) s"
