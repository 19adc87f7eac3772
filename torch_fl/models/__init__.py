"""Models for the tests, the demo and the benchmarks, built without a hub.

    from torch_fl.models import qwen3, workloads
    model = qwen3.build("tiny", seed=0).to("flagos")

`qwen3` and `workloads` import only torch and transformers (not torch_fl), so
native reference processes can load them by path; `native_reference` runs
them in such a child process.
"""

from torch_fl.models import qwen3, workloads

__all__ = ["qwen3", "workloads"]
