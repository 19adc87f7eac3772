"""Timed workers: long-lived child processes that the parent asks for one timed sample at a time.

Native CUDA backward cannot run in a process that imported torch_fl (PyTorch issue 161129), so a training
step on flagos and one on native cannot alternate in one process as inference does. Two workers can: each
builds (and compiles) its model once, then waits; the parent asks each in turn (ABBA) for a sample, so a
pair's two samples are seconds apart under the same load, where one child per variant and round swung with
the host by a quarter. Only one worker runs at a time: the other waits on its stdin.

Protocol: the worker prints RESULT_TAG + JSON once it is ready ({"compile_s": ...} or {}), then for each
line on its stdin times `steps` calls of its step and prints RESULT_TAG + {"step_s": [seconds, ...]}; it
exits when stdin closes. Other output is ignored; stderr goes to a log file whose tail an error quotes.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from _timing import alternating, ratio_stats

RESULT_TAG = "WORKER_RESULT "


def reply(payload: dict) -> None:
    print(RESULT_TAG + json.dumps(payload), flush=True)


def serve(step: Callable[[], object], sync: Callable[[], None], steps: int, ready: dict | None = None) -> None:
    """The worker's side, once warm: say so, then time `steps` steps (each to `sync()`) per line on stdin."""
    reply(ready or {})
    for _ in sys.stdin:
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            step()
            sync()
            times.append(time.perf_counter() - t)
        reply({"step_s": times})


class Worker:
    """The parent's end: the constructor starts the worker and returns once it is ready (its first reply,
    in `ready`); sample() asks for one timed sample. Killed after `timeout` seconds of life."""

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


def take_turns(native: Worker, flagos: Worker, pairs: int) -> dict:
    """`pairs` ABBA pairs of one sample from each worker: each side's median step seconds per sample, and
    the statistics of the per-pair ratios native / flagos (above 1: flagos faster)."""
    secs = alternating(pairs, {"native": native.sample, "flagos": flagos.sample})
    ratios = [n / f for n, f in zip(secs["native"], secs["flagos"], strict=True)]
    return {"native_s": secs["native"], "flagos_s": secs["flagos"], "ratios": [round(r, 4) for r in ratios]} | (
        ratio_stats(ratios)
    )


def pair_each(start: Callable[[str], Worker], reference: str, others: list[str], pairs: int) -> dict:
    """{other: take_turns(reference's worker, other's worker)} for each of `others` in turn, the reference's
    worker started once (`start(name)` starts a ready worker). A worker that fails (to start, or while it
    samples) gives {"error": ...} for the pairs it was in; the others still run."""
    try:
        ref = start(reference)
    except RuntimeError as e:
        return {name: {"error": str(e)[-1500:]} for name in others}
    out: dict = {}
    try:
        for name in others:
            try:
                other = start(name)
            except RuntimeError as e:
                out[name] = {"error": str(e)[-1500:]}
                continue
            try:
                out[name] = take_turns(ref, other, pairs)
            except RuntimeError as e:
                out[name] = {"error": str(e)[-1500:]}
                if ref.proc.poll() is not None:  # the reference died: nothing left to pair with
                    out.update({n: {"error": str(e)[-1500:]} for n in others if n not in out})
                    break
            finally:
                other.close()
    finally:
        ref.close()
    return out
