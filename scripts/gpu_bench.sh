#!/usr/bin/env bash
# The benchmarks on the H200 (device tool), from the repo root, alone on the machine:
#   bash scripts/gpu_bench.sh                      # overhead, route breakdown, alias pool, then e2e
#   STEP=overhead|e2e|demo|compile|trainer|ddp|calibrate bash scripts/gpu_bench.sh   (or a comma list of them)
# Every canonical result at one commit, in three calls of under 10 minutes each, back to back (the machine
# stays warm between them): STEP=overhead,trainer,ddp; STEP=compile;
# STEP=e2e ROUNDS=1 PAIRS=3 STEP_PAIRS=1 E2E_DEADLINE=450. STEP=calibrate (not in all: minutes per model) runs
# calibrate on CAL_MODELS (default every standard model; CAL_KEEP=1 keeps the committed file's other models).
# Carry .whl/ (wheels of triton, flag_gems and expecttest matching the GPU
# machine's torch) for the FlagGems rows. Installs the wheels, builds the core,
# then runs benchmarks/overhead.py, route_breakdown.py and alias_pool.py, and
# benchmarks/e2e.py (ROUNDS child rounds, default 3; E2E_DEADLINE=seconds
# starts no round that would end later; E2E_VARIANTS=native,flagos limits the
# variants; PAIRS in-process native/flagos pairs first, default 6; STEP_PAIRS
# sequences decoded token by token in pairs, default 4; E2E_TRAIN_PAIRS training
# pairs of native and flagos worker processes taking turns, default 16), or the demo (native
# routes, then the FlagGems profile). Each benchmark writes its canonical file
# into $OUT (<benchmark>-<machine>.json: overhead-h200.json on an H200); copy them to benchmarks/results/ and run
# `python -m benchmarks.report` to regenerate docs/benchmarks.md and the README table. The copy's git
# state may be stale: name the commit sent with TORCH_FL_COMMIT=<hash> TORCH_FL_DIRTY=0|1 (the meta block).
# Correctness checks: scripts/gpu_check.sh.
set -uo pipefail
STEP=${STEP:-all}
want() { [[ ,$STEP, == *",$1,"* ]]; }  # is $1 one of STEP's comma list
source scripts/gpu_setup.sh
if want all || want overhead; then
  python3 -m benchmarks.overhead --out "$OUT" 2>&1 | tee "$OUT/overhead.log" | tail -16
  python3 -m benchmarks.route_breakdown --out "$OUT" 2>&1 | tee -a "$OUT/overhead.log"
  python3 -m benchmarks.alias_pool --out "$OUT" 2>&1 | tee -a "$OUT/overhead.log"
fi
if want demo; then
  python3 -m torch_fl demo 2> "$OUT/demo.stderr" | tee "$OUT/demo.txt"
  FLAGOS_USE_FLAGGEMS=1 python3 -m torch_fl demo 2> "$OUT/demo_flaggems.stderr" | tee "$OUT/demo_flaggems.txt"
fi
if want compile; then
  # torch.compile on flagos against native (benchmarks/compile_bench.py: compile-<machine>.json): cold compiles (Qwen3
  # prefill and training step, six small models; each variant) and the pairs, about eight minutes.
  python3 -m benchmarks.compile_bench ${PAIRS:+--pairs "$PAIRS"} ${TRAIN_PAIRS:+--train-pairs "$TRAIN_PAIRS"} \
    --out "$OUT" 2>&1 | tail -12
fi
if want trainer; then
  # A Hugging Face Trainer fine-tune of Qwen3-0.6B in bf16, flagos against native CUDA (benchmarks/trainer_bench.py:
  # trainer-<machine>.json): one worker process per side, 200 steps of batch 8 x 512 each, 16 ABBA pairs of 10-step
  # samples inside those runs; losses, peak memory and steps/s. A few minutes on the H200.
  python3 -m benchmarks.trainer_bench ${PAIRS:+--pairs "$PAIRS"} --out "$OUT" 2>&1 | tail -12
fi
if want ddp; then
  # A DDP training step at world size 1, flagos against native (benchmarks/ddp_step.py: ddp-step-<machine>.json).
  python3 -m benchmarks.ddp_step --rounds "${DDP_ROUNDS:-4}" --out "$OUT" 2>&1 | tail -4
fi
if want calibrate; then
  # calibrate on the standard workloads (benchmarks/calibrate_models.py: calibrate-<machine>.json, and each model's
  # routing file calibrated-<model>-<machine>.conf beside it).
  python3 -m benchmarks.calibrate_models ${CAL_MODELS:+--models "$CAL_MODELS"} ${CAL_KEEP:+--keep} \
    ${CAL_TIMEOUT:+--timeout "$CAL_TIMEOUT"} --out "$OUT/" 2>&1 | tail -8
fi
if want all || want e2e; then
  # Every flagos routing is paired with native in a process of its own: the FlagGems profile, and the
  # committed calibrated file where there is one for this machine (--calibrated).
  calibrated=(); pair_with=flagos,flagos_flaggems
  if [[ -f benchmarks/results/calibrated-h200.conf ]] && nvidia-smi -L | grep -q H200; then
    calibrated=(--calibrated benchmarks/results/calibrated-h200.conf); pair_with+=,flagos_calibrated
  fi
  python3 -m benchmarks.e2e --rounds "${ROUNDS:-3}" ${E2E_DEADLINE:+--deadline "$E2E_DEADLINE"} \
    ${E2E_VARIANTS:+--variants "$E2E_VARIANTS"} --paired "${PAIRS:-6}" --step-pairs "${STEP_PAIRS:-4}" \
    --paired-variants "${PAIRED_VARIANTS:-$pair_with}" --train-pairs "${E2E_TRAIN_PAIRS:-16}" "${calibrated[@]}" \
    --out "$OUT" 2>&1 | tail -30
fi
echo "total: $(( $(date +%s) - start )) s"
