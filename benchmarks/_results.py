"""Where a benchmark's result goes and what it says about the run: shared by every script in benchmarks/.

Each benchmark writes one canonical file per machine, benchmarks/results/<benchmark>-<machine>.json,
overwritten by every run (``--out`` redirects it). The file's "meta" block names the run:

    {"meta": {"benchmark": "overhead", "machine": "h200", "command": "python benchmarks/overhead.py",
              "date": "2026-12-01T18:32:36Z", "commit": "5c87527", "dirty": false,
              "versions": {"python": ..., "torch": ..., "cuda": ..., "triton": ..., "flag_gems": ...,
                           "transformers": ..., "gpu": ...}},
     ...the benchmark's own fields...}

The machine is `h200` on an NVIDIA H200, `host` without a GPU (host-memory backing), else the GPU's
name in lower case. docs/benchmarks.md is generated from these files (benchmarks/report.py).
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def _version(*names: str) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def gpu_name() -> str | None:
    """The first CUDA GPU's name, or None without one (torch is imported only if it already is or exists)."""
    try:
        import torch
    except ImportError:
        return None
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def machine(gpu: str | None = None) -> str:
    """`h200`, `host` (no GPU) or the GPU's name as a file-name word."""
    gpu = gpu if gpu is not None else gpu_name()
    if not gpu:
        return "host"
    if "H200" in gpu:
        return "h200"
    return re.sub(r"[^a-z0-9]+", "-", gpu.lower().removeprefix("nvidia ")).strip("-")


def canonical_path(benchmark: str, gpu: str | None = None) -> Path:
    """benchmarks/results/<benchmark>-<machine>.json."""
    return RESULTS / f"{benchmark}-{machine(gpu)}.json"


# what a measurement runs: "dirty" says whether these differ from the commit (documents do not count)
MEASURED = ("torch_fl", "benchmarks/*.py", "setup.py", "pyproject.toml")


def git_commit() -> tuple[str | None, bool | None]:
    """(short commit of this checkout, whether the code it measures differs from it). $TORCH_FL_COMMIT, when set,
    names the commit instead: a copy of the tree on a GPU machine may carry a stale git state, so its sender
    names the commit it sent (whether it differs is then unknown, None, unless $TORCH_FL_DIRTY is 0 or 1)."""
    named = os.environ.get("TORCH_FL_COMMIT")
    if named:
        dirty = os.environ.get("TORCH_FL_DIRTY")
        return named, None if dirty not in ("0", "1") else dirty == "1"
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
        if rev.returncode != 0:
            return os.environ.get("TORCH_FL_COMMIT") or None, None
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", *MEASURED],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        return rev.stdout.strip(), bool(status.stdout.strip())
    except OSError:
        return os.environ.get("TORCH_FL_COMMIT") or None, None


def versions(gpu: str | None = None) -> dict:
    torch_version = cuda = None
    try:
        import torch

        torch_version, cuda = torch.__version__, torch.version.cuda
    except ImportError:
        pass
    return {
        "python": platform.python_version(),
        "torch": torch_version,
        "cuda": cuda,
        "triton": _version("triton"),
        "flag_gems": _version("flag_gems", "flag-gems"),
        "transformers": _version("transformers"),
        "gpu": gpu,
    }


def command(argv: list[str] | None = None) -> str:
    """The command line as typed from the repository root: `python benchmarks/<script>.py ...`."""
    argv = list(sys.argv if argv is None else argv)
    script = Path(argv[0]).resolve() if argv else None
    if script is not None and script.is_relative_to(REPO):
        argv[0] = str(script.relative_to(REPO))
    return " ".join(shlex.quote(a) for a in ["python", *argv])


def meta(benchmark: str, argv: list[str] | None = None) -> dict:
    gpu = gpu_name()
    commit, dirty = git_commit()
    return {
        "benchmark": benchmark,
        "machine": machine(gpu),
        "command": command(argv),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit,
        "dirty": dirty,
        "versions": versions(gpu),
    }


def write(
    benchmark: str, payload: dict, out: str | Path | None = None, argv: list[str] | None = None, smoke: bool = False
) -> Path:
    """Writes {"meta": ..., **payload} to out_path(benchmark, out, smoke); returns the path."""
    path = out_path(benchmark, out, smoke)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta(benchmark, argv), **payload}, indent=1) + "\n")
    return path


def out_path(benchmark: str, out: str | Path | None, smoke: bool = False) -> Path:
    """Where a run writes: `out` if a file path, the canonical file's name inside `out` if a folder
    (an existing one, or a path ending in /), the canonical file itself without `out`; a smoke run
    (--quick sizes) without `out` goes to the temporary folder, never over the canonical file."""
    if not out:
        return Path(tempfile.gettempdir()) / canonical_path(benchmark).name if smoke else canonical_path(benchmark)
    path = Path(out)
    if path.is_dir() or str(out).endswith("/"):
        return path / canonical_path(benchmark).name
    return path


def exception_line(text: str) -> str:
    """The line naming the exception that ended a child (`RuntimeError: ...`), else its last line: what an
    error row shows first (a child's stderr starts with warnings and ends with hints)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b:?", ln):
            return ln
    return lines[-1] if lines else "no output"


def errors_brief(errors: list[str]) -> str:
    """A table cell for a task's errors: the exception of each, on one line, without the table's `|`."""
    return "; ".join(exception_line(e) for e in errors)[:120].replace("|", "/")
