"""What the benchmarks share: their result files, deadlines, child and worker processes and (from
torch_fl/calibration/stats.py) alternating timing and its statistics.

Each benchmark writes benchmarks/results/<benchmark>-<machine>.json (`h200`, `host` without a GPU, else the GPU's
name), with a "meta" block naming the run; benchmarks/report.py renders them. A timed worker (Worker, serve)
reply()s once ready, then for each line on its stdin times `steps` calls of its step and replies
{"step_s": [...]}, so two workers can take turns in ABBA pairs; it exits when stdin closes.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
MODELS_DIR = REPO / "torch_fl" / "models"


def _load_stats():
    """torch_fl/calibration/stats.py loaded by path: importing torch_fl would break native CUDA backward
    (PyTorch issue 161129)."""
    spec = importlib.util.spec_from_file_location("_torch_fl_stats", REPO / "torch_fl" / "calibration" / "stats.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


stats = _load_stats()
abba, abba_blocks, alternating = stats.abba, stats.abba_blocks, stats.alternating
paired_seconds = stats.paired_seconds
quartiles, median_interval = stats.quartiles, stats.median_interval
ratio_stats, format_ratio = stats.ratio_stats, stats.format_ratio


def child_cmd(script: str, *args: str) -> list[str]:
    """The command that runs benchmarks/<script>.py as a module, from cwd REPO (this checkout's torch_fl)."""
    return [sys.executable, "-m", f"benchmarks.{script}", *args]


def parser(doc: str, benchmark: str) -> argparse.ArgumentParser:
    """A benchmark's command line: its docstring as the help, and --out."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help=f"JSON path or folder (default benchmarks/results/{benchmark}-<machine>.json)")
    return p


def device(side: str):
    """flagos:0 for a flagos side (importing torch_fl), else cuda:0, or the CPU without a GPU."""
    import torch

    if side.startswith("flagos"):
        import torch_fl  # noqa: F401

        return torch.device("flagos", 0)
    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


def models() -> None:
    """torch_fl/models/'s qwen3, workloads and graph_decode importable by those names without importing torch_fl."""
    if str(MODELS_DIR) not in sys.path:
        sys.path.insert(0, str(MODELS_DIR))


def _version(*names: str) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def gpu_name() -> str | None:
    """The first CUDA GPU's name, or None without one."""
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
    """(short commit, whether the measured code differs from it); $TORCH_FL_COMMIT and $TORCH_FL_DIRTY (0 or 1)
    name them instead, for a copy of the tree whose git state may be stale."""
    named = os.environ.get("TORCH_FL_COMMIT")
    if named:
        dirty = os.environ.get("TORCH_FL_DIRTY")
        return named, None if dirty not in ("0", "1") else dirty == "1"
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
        status = ["git", "status", "--porcelain", "--untracked-files=no", "--", *MEASURED]
        if rev.returncode == 0:
            return rev.stdout.strip(), bool(subprocess.run(status, cwd=REPO, capture_output=True, text=True).stdout)
    except OSError:
        pass
    return None, None


def versions(gpu: str | None = None) -> dict:
    torch = sys.modules.get("torch") or (importlib.util.find_spec("torch") and importlib.import_module("torch"))
    return {
        "python": platform.python_version(),
        "torch": torch and torch.__version__,
        "cuda": torch and torch.version.cuda,
        "triton": _version("triton"),
        "flag_gems": _version("flag_gems", "flag-gems"),
        "transformers": _version("transformers"),
        "gpu": gpu,
    }


def command(argv: list[str] | None = None) -> str:
    """The command line as typed from the repository root: `python -m benchmarks.<script> ...`."""
    argv = list(sys.argv if argv is None else argv)
    script = REPO / argv[0] if argv else None  # an absolute argv[0] stays itself
    if script is not None and script.resolve().parent == REPO / "benchmarks":
        argv[0:1] = ["-m", f"benchmarks.{script.stem}"]
    elif script is not None and script.resolve().is_relative_to(REPO):
        argv[0] = str(script.resolve().relative_to(REPO))
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
    """`out` if a file path, the canonical name inside `out` if a folder (existing, or ending in /), else the
    canonical file; a smoke run without `out` goes to the temporary folder."""
    name = canonical_path(benchmark).name
    if not out:
        return Path(tempfile.gettempdir()) / name if smoke else RESULTS / name
    path = Path(out)
    return path / name if path.is_dir() or str(out).endswith("/") else path


def exception_line(text: str) -> str:
    """The line naming the exception that ended a child (`RuntimeError: ...`), else its last line."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b:?", ln):
            return ln
    return lines[-1] if lines else "no output"


def errors_brief(errors: list[str]) -> str:
    """A table cell for a task's errors: the exception of each, on one line, without the table's `|`."""
    return "; ".join(exception_line(e) for e in errors)[:120].replace("|", "/")


class Deadline:
    """Whether the next step of a kind may start: not if, lasting as long as the last step of its kind, it would
    end more than `seconds` after `started` (no deadline: always)."""

    def __init__(self, seconds: float | None, started: float):
        self.stop_at = started + seconds if seconds is not None else float("inf")
        self.last: dict[str, float] = {}

    def allows(self, kind: str) -> bool:
        return time.perf_counter() + self.last.get(kind, 0.0) <= self.stop_at

    def took(self, kind: str, since: float) -> None:
        """Record that a step of `kind`, started at perf_counter() `since`, has ended."""
        self.last[kind] = time.perf_counter() - since


RESULT_TAG = "WORKER_RESULT "


def reply(payload: dict) -> None:
    print(RESULT_TAG + json.dumps(payload), flush=True)


def run_child(cmd: list[str], timeout: float, env: dict | None = None, label: str = "child") -> dict:
    """A child's (cwd REPO) one reply(), or a RuntimeError with its output's tail (timeouts pass through)."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
    lines = [ln[len(RESULT_TAG) :] for ln in proc.stdout.splitlines() if ln.startswith(RESULT_TAG)]
    if lines:
        return json.loads(lines[-1])
    text = proc.stderr or proc.stdout
    raise RuntimeError(f"{label} exited {proc.returncode} without a result: {exception_line(text)}\n{text[-1500:]}")


def timed_calls(fn: Callable[[], object], sync: Callable[[], None], calls: int) -> tuple[list[float], object]:
    """The seconds of each of `calls` calls of fn, each to sync(), and the last call's result."""
    times, out = [], None
    for _ in range(calls):
        t = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - t)
    return times, out


def serve(step: Callable[[], object], sync: Callable[[], None], steps: int, ready: dict | None = None) -> None:
    """The worker's side, once warm: drain the device, say so, then time `steps` steps (each to `sync()`) per line
    on stdin."""
    sync()
    reply(ready or {})
    for _ in sys.stdin:
        reply({"step_s": timed_calls(step, sync, steps)[0]})


class Worker:
    """The parent's end: started and ready (its first reply in `ready`) on return; killed after `timeout` s."""

    def __init__(self, label: str, cmd: list[str], env: dict, cwd, log_path: str, timeout: float):
        self.label = label
        self.log = open(log_path, "w+")  # noqa: SIM115 (closed by close())
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, env=env, cwd=cwd
        )
        self.watchdog = threading.Timer(timeout, self.proc.kill)
        self.watchdog.daemon = True  # a failed run exits without waiting for it
        self.watchdog.start()
        self.ready = self.read()

    def read(self) -> dict:
        """The worker's next answer (after its ready one: what it answers to a request, or on its own)."""
        for line in self.proc.stdout:
            if line.startswith(RESULT_TAG):
                return json.loads(line[len(RESULT_TAG) :])
        code = self.proc.wait()
        self.watchdog.cancel()
        self.log.seek(0)
        tail = self.log.read().strip().splitlines()[-15:]
        raise RuntimeError(f"{self.label} worker exited {code} without a result:\n" + "\n".join(tail))

    def sample(self) -> float:
        """The median seconds of one sample's steps."""
        self.proc.stdin.write("time\n")
        self.proc.stdin.flush()
        return statistics.median(self.read()["step_s"])

    def close(self) -> None:
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.watchdog.cancel()
        self.log.close()


def worker_pairs(cmds: dict, pairs: int, timeout: float, logs: str, final: bool = False) -> dict:
    """Native's and flagos's workers (cmds: side -> (cmd, env)) taking turns, `pairs` ABBA pairs of one sample from
    each: their ms, the ratios native / flagos, each one's ready reply and (final) its last one, answered once its
    stdin is closed. A failed worker raises."""
    workers: dict = {}
    try:
        for side, (cmd, env) in cmds.items():
            workers[side] = Worker(f"{side} worker", cmd, env, REPO, os.path.join(logs, f"{side}.log"), timeout)
        secs = alternating(pairs, {side: w.sample for side, w in workers.items()})
        ratios = [n / f for n, f in zip(secs["native"], secs["flagos"], strict=True)]
        res = {f"{side}_ms": [round(t * 1e3, 3) for t in secs[side]] for side in workers}
        res |= {"ratios": [round(r, 4) for r in ratios], **ratio_stats(ratios)}
        res["ready"] = {side: w.ready for side, w in workers.items()}
        for w in workers.values() if final else ():
            w.proc.stdin.close()  # it steps aside, finishes and answers
        return res | ({"final": {side: w.read() for side, w in workers.items()}} if final else {})
    finally:
        for w in workers.values():
            w.close()
