"""Calibrating in a worker process, so that a candidate kernel that faults the device costs one operator, not
the run.

A kernel's illegal memory access leaves the CUDA context unusable: nothing after it in that process runs on
the GPU, and no exception handler can tell which of the queued kernels was at fault. So on a GPU
`python -m torch_fl calibrate` runs the calibration in a worker process (the same command with
`--worker-state DIR`) and supervises it:

- the worker keeps a journal (DIR/journal.jsonl): when each (operator, dtype)'s checking and timing begin,
  and when they end, written only after the device has finished their kernels;
- a worker that dies inside a phase blames that (operator, dtype): the supervisor adds it to the excluded
  ones (DIR/state.json) with what ended the process, and starts a new worker, which records the workload
  again and times that operator on native only (rejected, the reason in its rule's comment);
- a worker that dies outside a phase (recording the workload, writing the file), or blames an operator
  already excluded, ends the run with its exit code: that is not the candidate's fault.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Callable

STATE, JOURNAL = "state.json", "journal.jsonl"


def exception_line(e: BaseException) -> str:
    """`Type: first line of the message`."""
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


class Journal:
    """The worker's side: phases of each (operator, dtype), appended to DIR/journal.jsonl (no-op without DIR)."""

    def __init__(self, directory: str | None):
        self.path = os.path.join(directory, JOURNAL) if directory else None

    def _write(self, entry: dict) -> None:
        # Opened per entry: what a process wrote before it died is in the file, whatever killed it.
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")

    @contextlib.contextmanager
    def phase(self, key: str, what: str):
        if self.path is None:
            yield
            return
        self._write({"begin": key, "phase": what})
        try:
            yield
        except BaseException as e:
            self._write({"error": key, "phase": what, "exception": exception_line(e)})
            raise
        self._write({"end": key, "phase": what})


def open_phase(directory: str) -> tuple[str, str, str | None] | None:
    """(key, phase, exception or None) of the phase the worker was in when it ended, or None."""
    path = os.path.join(directory, JOURNAL)
    if not os.path.exists(path):
        return None
    current, error = None, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line cut short by the process's end
            if "begin" in entry:
                current, error = (entry["begin"], entry["phase"]), None
            elif "end" in entry:
                current = None
            elif "error" in entry:
                error = entry["exception"]
    return None if current is None else (*current, error)


def write_state(directory: str, command: str, excluded: dict[str, str]) -> None:
    with open(os.path.join(directory, STATE), "w", encoding="utf-8") as f:
        json.dump({"command": command, "excluded": excluded}, f)


def read_state(directory: str) -> tuple[str, dict[str, str]]:
    """The worker's side: (the user's command, {route key: why the candidate must not run it})."""
    with open(os.path.join(directory, STATE), encoding="utf-8") as f:
        state = json.load(f)
    return state["command"], dict(state["excluded"])


def _ended(rc: int) -> str:
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit code {rc}"


def supervise(
    worker: Callable[[str], list[str]],
    candidate: str,
    command: str,
    say: Callable[[str], None],
    max_excluded: int = 16,
) -> int:
    """Run the worker (`worker(DIR)`: its command line, given the state directory) until it succeeds,
    excluding each (operator, dtype) whose checking or timing ended it; its exit code (0 on success)."""
    excluded: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="torch_fl-calibrate-") as state:
        while True:
            write_state(state, command, excluded)
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(state, JOURNAL))
            rc = subprocess.call(worker(state))
            if rc == 0:
                return 0
            blamed = open_phase(state)
            if blamed is None:
                return rc if rc > 0 else 1
            key, phase, error = blamed
            if key in excluded or len(excluded) >= max_excluded:
                again = "again" if key in excluded else f"after {max_excluded} operators excluded"
                say(f"[calibrate] the worker ended ({_ended(rc)}) {phase} {key} {again}; giving up")
                return rc if rc > 0 else 1
            excluded[key] = f"{phase} it on {candidate} ended the calibrating process ({error or _ended(rc)})"
            say(f"[calibrate] {key}: {excluded[key]}; calibrating again with {key} timed on native only")
