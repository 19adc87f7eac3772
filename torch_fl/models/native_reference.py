"""Native reference runs in a child process that never imports torch_fl.

Once torch_fl is imported, native CUDA *backward* in that process fails
(PyTorch issue 161129: autograd engine assert `opt_ready_stream &&
opt_parent_stream`), so a native CUDA training reference has to run
elsewhere. `train(...)` runs this file as a script (`python native_reference.py
JSON`); the script puts its own folder on sys.path and imports qwen3 and
workloads directly, so the torch_fl package is never loaded. It prints one
JSON line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16", None: None}


def train(
    model: str,
    device: str,
    *,
    seed: int = 0,
    batch: int = 2,
    length: int = 32,
    token_seed: int = 1,
    steps: int = 10,
    lr: float = 1e-3,
    amp_dtype: str | None = None,
    timeout: float = 900,
) -> dict:
    """Train a fresh copy of `model` (seeded) on a native device in a child process.

    Returns workloads.train's dict (losses, grads_finite, unchanged, ...).
    """
    spec = dict(
        task="train",
        model=model,
        device=device,
        seed=seed,
        batch=batch,
        length=length,
        token_seed=token_seed,
        steps=steps,
        lr=lr,
        amp_dtype=_DTYPES[amp_dtype],
    )
    return _run_child(spec, timeout)


def _run_child(spec: dict, timeout: float) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), json.dumps(spec)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"native reference child failed (exit {proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-4000:]}"
        )
    return json.loads(lines[-1])


def _child(spec: dict) -> dict:
    import qwen3  # this folder is sys.path[0]: no torch_fl package import
    import torch
    import workloads

    if spec["task"] != "train":
        raise ValueError(f"unknown task {spec['task']!r}")
    model = qwen3.build(spec["model"], seed=spec["seed"]).to(spec["device"])
    ids = qwen3.tokens(model.config.vocab_size, spec["batch"], spec["length"], spec["token_seed"])
    amp = getattr(torch, spec["amp_dtype"]) if spec["amp_dtype"] else None
    out = workloads.train(model, ids.to(spec["device"]), steps=spec["steps"], lr=spec["lr"], amp_dtype=amp)
    out["torch_fl_imported"] = "torch_fl" in sys.modules
    out["device"] = spec["device"]
    return out


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.argv[1]))), flush=True)
