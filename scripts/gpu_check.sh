#!/usr/bin/env bash
# Every GPU check except the benchmarks, on the H200 (device tool), from the repo root:
#   bash scripts/gpu_check.sh            # carry .whl/ (the FlagGems wheels, see gpu_bench.sh)
# Builds the core against the machine's torch, then runs in parallel (one GPU,
# 16 cores; none of these is timed):
#   - every test outside tests/integration/ops (core, cuda backing, routing, Qwen3-0.6B infer/train)
#   - tests/integration/ops: anyplatform + cuda + flaggems markers, over pytest-xdist workers
#   - the OpInfo sweep on the CUDA backing, native route, with backward
#   - the OpInfo sweep through FlagGems: each op with its own overloads routed to flaggems
#     (FLAGGEMS_ROUTES=all routes every FlagGems overload for every op: far slower)
# Each job stops by DEADLINE seconds after the command started, the build
# included (sweeps start no new op after it; pytest gets a minute more); logs
# and JSON go to $OUT. SWEEPS=0: the tests alone; CORE=0 / OPS=0 leave out the
# tests outside / inside tests/integration/ops; CORE_TESTS="paths" runs those
# instead of all the tests outside tests/integration/ops, e.g.
#   OPS=0 SWEEPS=0 CORE_TESTS=tests/integration/test_qwen3_train.py bash scripts/gpu_check.sh
# (its failures' messages are in $OUT/pytest_core.log: a bare pytest piped to
# tail shows only their names). The ops suite does not fit one 600 s device
# call (pytest stops at DEADLINE + 60 s, inside that limit): FlagGems' mm
# autotunes for minutes per test. On one GPU run it in two calls:
# OPS_PART=rest (with the core tests) and OPS_PART=autotuned. On two GPUs
# OPS_PART=split runs both halves at once, each on a GPU of its own
# (OPS_WORKERS for `rest`, AUTOTUNE_WORKERS for `autotuned`). Each (operator, dtype) FlagGems
# autotunes heads one worker's share (tests/integration/ops/conftest.py), and
# idle workers steal queued tests.
# Benchmarks run alone: scripts/gpu_bench.sh.
set -uo pipefail
DEADLINE=${DEADLINE:-420}
source scripts/gpu_setup.sh

ngpu=$(nvidia-smi -L | wc -l)
if [[ ${OPS_PART:-all} == split ]] && (( ngpu < 2 )); then
  echo "OPS_PART=split needs two GPUs; this machine has $ngpu: run OPS_PART=rest, then OPS_PART=autotuned"
  exit 2
fi
all_markers="anyplatform or cuda or flaggems or flaggems_python"
# OPS_PART=rest|autotuned|split: `autotuned` is the 51 tests that run a kernel
# FlagGems autotunes (mm, bmm: minutes each on the H200; marker
# flaggems_autotune), `rest` the other 3,163; `split` both, in parallel.
ops_markers() {
  case $1 in
    rest) echo "($all_markers) and not flaggems_autotune" ;;
    autotuned) echo "($all_markers) and flaggems_autotune" ;;
    *) echo "$all_markers" ;;
  esac
}
# DEADLINE counts from the start of the command (the build included). pytest
# has no deadline of its own: it gets SIGINT a minute after the sweeps' last
# op, and only its main process does (--foreground): the workers and the
# subprocesses of dispatch tests are not interrupted mid-test, so what fails
# is a real failure, and pytest still prints its summary of what ran.
left=$(( DEADLINE - ($(date +%s) - start) ))
hard=$(( left + 60 ))
# worksteal (pytest-xdist >= 3.2): an idle worker takes tests queued behind a
# long one (FlagGems' first mm of a dtype autotunes for minutes).
dist=$(python3 -c 'import xdist; v = tuple(int(x) for x in xdist.__version__.split(".")[:2]); print("worksteal" if v >= (3, 2) else "load")')
pytest=(timeout --foreground -s INT "$hard" python3 -m pytest -q -p no:cacheprovider -rfEs --tb=short -p no:benchmark
  --dist "$dist" --durations=15)
if [[ ${CORE:-1} == 1 ]]; then
  # CORE_TESTS: other test paths instead (a subset, with its log kept like the whole suite's)
  read -r -a core_tests <<< "${CORE_TESTS:-tests --ignore=tests/integration/ops}"
  "${pytest[@]}" -n "${CORE_WORKERS:-4}" "${core_tests[@]}" > "$OUT/pytest_core.log" 2>&1 &
fi
# On a machine of several GPUs the ops suite gets the last one to itself, and
# the core tests see them all (their multi-device tests then map flagos:i to
# real cuda:i); OPS_PART=split puts its `autotuned` half on the one before.
ops_suite() {  # part, GPU index (empty: all GPUs), workers, log name
  local gpu_env=()
  [[ -n $2 ]] && gpu_env=(env CUDA_VISIBLE_DEVICES=$2)
  "${gpu_env[@]}" "${pytest[@]}" -n "$3" -m "$(ops_markers "$1")" tests/integration/ops > "$OUT/$4.log" 2>&1 &
}
last_gpu=""
(( ngpu > 1 )) && last_gpu=$(( ngpu - 1 ))
ops_logs=(pytest_ops)
if [[ ${OPS:-1} == 1 ]]; then
  part=${OPS_PART:-all}
  if [[ $part == split ]]; then
    ops_suite autotuned $(( ngpu - 2 )) "${AUTOTUNE_WORKERS:-10}" pytest_ops_autotuned
    part=rest
    ops_logs+=(pytest_ops_autotuned)
  fi
  ops_suite "$part" "$last_gpu" "${OPS_WORKERS:-6}" pytest_ops
fi
if [[ ${SWEEPS:-1} == 1 ]]; then
  sweep=(python3 -m torch_fl.conformance --backward --timeout 120 --deadline "$left" --no-progress)
  "${sweep[@]}" --jobs 4 --json "$OUT/sweep_cuda.json" > "$OUT/sweep_cuda.log" 2>&1 &
  "${sweep[@]}" --jobs 3 --backend flaggems --route-ops "${FLAGGEMS_ROUTES:-own}" \
    --json "$OUT/sweep_flaggems.json" > "$OUT/sweep_flaggems.log" 2>&1 &
fi
wait
for f in pytest_core "${ops_logs[@]}"; do [[ -f $OUT/$f.log ]] && { echo "== $f"; tail -4 "$OUT/$f.log"; }; done
for f in sweep_cuda sweep_flaggems; do [[ -f $OUT/$f.log ]] && { echo "== $f"; grep -E "ops in|deadline" "$OUT/$f.log"; }; done
echo "total: $(( $(date +%s) - start )) s"
