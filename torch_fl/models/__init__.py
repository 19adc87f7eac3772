"""Models for the tests, the demo and the benchmarks, built without a hub.

    from torch_fl.models import qwen3, workloads
    model = qwen3.build("tiny", seed=0).to("flagos")

`qwen3`, `standard` (GPT-2 small, BERT-base, ViT-B/16 from their
configurations: calibrate's other workloads), `workloads` and `graph_decode`
(greedy decoding with CUDA graphs) import only torch and transformers (not torch_fl), so native reference
processes can load them by path; `native_reference` runs them in such a
child process.
"""

from torch_fl.models import graph_decode, qwen3, standard, workloads

__all__ = ["graph_decode", "qwen3", "standard", "workloads"]
