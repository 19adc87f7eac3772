"""FlagosWork: the inner gloo / NCCL Work, with the caller's flagos tensors as its future's value.

Waiting, completion and errors are the inner Work's. Only the future differs: gloo's and NCCL's
future holds the tensors they were handed, the native aliases, and DDP's reducer takes its
gradients from that value (a gradient it creates there would land on cpu / cuda instead of flagos).
So the future here completes with the caller's own tensors when the inner one completes, or with its
error, chained in C++ (csrc/python/work_future.cpp: no GIL on the engine's thread). On a CUDA backing
the future is one of the flagos devices: its completion is recorded on the current flagos (= CUDA)
stream of the inner future's callback, which waited on NCCL's events, so a consumer waiting on it
sees NCCL's results, as with NCCL's own future.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from torch_fl._core import _C, DEVICE_NAME


def flagos_work(work, result: list):
    """The inner Work as a FlagosWork; None where the engine returned none.

    NCCL returns no Work for some calls it completes on the stream (PyTorch 2.11's scatter in a
    group of one); PyTorch's callers check for None, so the absence is handed on as it is.
    """
    return None if work is None else FlagosWork(work, result)


class FlagosWork(dist.Work):
    def __init__(self, work, result: list):
        super().__init__()
        self._work = work
        self._result = result
        self._future = None

    def wait(self, timeout=None):
        return self._work.wait() if timeout is None else self._work.wait(timeout)

    def is_completed(self):
        return self._work.is_completed()

    def is_success(self):
        return self._work.is_success()

    def exception(self):
        return self._work.exception()

    def source_rank(self):
        return self._work.source_rank()

    def _source_rank(self):
        return self._work._source_rank()

    def synchronize(self):
        return self._work.synchronize()

    def block_current_stream(self):
        return self._work.block_current_stream()

    def result(self):
        return self._result

    def get_future(self):
        if self._future is None:
            self._future = _mapped(self._work.get_future(), self._result)
        return self._future

    def get_future_result(self):
        return self._work.get_future_result()

    def _get_op_type(self):
        return self._work._get_op_type()

    def _get_duration(self):
        return self._work._get_duration()


def _mapped(inner: torch.futures.Future, value: list) -> torch.futures.Future:
    """A future that completes with `value` (the caller's tensors) when `inner` completes, or with its error:
    chained in C++ (csrc/python/work_future.cpp), so the completion takes no GIL on the engine's thread."""
    devices = sorted({t.device for t in value if t.device.type == DEVICE_NAME}, key=lambda d: d.index or 0)
    return _C._future_completed_with(inner, value, devices)
