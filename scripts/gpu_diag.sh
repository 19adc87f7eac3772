#!/usr/bin/env bash
# Backtrace of a crashing snippet on the GPU machine: bash scripts/gpu_diag.sh 'python code'
cuda-gdb -q -batch -ex run -ex bt --args python3 -c "$1" 2>&1 | grep -E "^#|signal|Error|error" | head -40
