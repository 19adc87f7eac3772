"""Record and replay (route `flaggems`): a backend's Python function recorded once per input signature,
replayed in C++ afterwards.

The recorder is here (`recorder.py`); the signature, the recorded program, its replay and the cache are
in the C++ core (torch_fl/csrc/replay/, whose README.md specifies the recording format and the slot
order); PyRoute runs them (torch_fl/csrc/python/replay_plan.h). `install()` makes `record` the core's
recorder; `torch_fl._C.PyRoute(op).replay_stats()` counts an operator's replays.
"""

from torch_fl.replay.recorder import input_tensors, install, record

__all__ = ["input_tensors", "install", "record"]
