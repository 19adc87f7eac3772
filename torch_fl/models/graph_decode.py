"""Greedy decoding with one CUDA graph per shape: transformers' static KV cache, one decode step captured
and replayed per token, on native cuda (torch.cuda's graphs) or on flagos (torch.flagos's).

A decode step on a static cache has fixed shapes and addresses: the token fed in, its position, the
attention mask (computed inside the step from the position), the cache written in place. So one
capture per (batch, cache length) serves every prompt that fits, and each token costs one replay.
The prefill is captured too, once per prompt length (its shapes are fixed by that length): a prompt
costs one copy into the graph's input and one replay. The same steps also run eagerly (graphs=False):
same kernels, same order, so the greedy tokens are identical.

Imports only torch and transformers (never torch_fl), like workloads.py; on flagos, torch_fl must
already be imported (it provides torch.flagos.CUDAGraph).
"""

from __future__ import annotations

import inspect

import torch


def graph_api(device: torch.device):
    """torch.cuda or torch.flagos: the module whose CUDAGraph and graph capture on `device`."""
    device = torch.device(device)
    module = getattr(torch, device.type, None)
    if device.type not in ("cuda", "flagos") or not hasattr(module, "CUDAGraph"):
        raise RuntimeError(f"CUDA graph decoding needs a cuda or flagos device backed by CUDA, got {device}")
    return module


class GraphDecoder:
    """Greedy decoding of `model` for `batch` sequences of up to `max_len` tokens (prompt + new).

    decode(input_ids, new_tokens) returns prompt + new tokens, as workloads.greedy() does. With
    graphs=True the decode step is captured on the first decode and replayed for every token after,
    and the prefill is captured on the first decode of each prompt length (`prefill_graphs`).
    """

    def __init__(self, model, batch: int, max_len: int, device, graphs: bool = True, warmup: int = 2):
        from transformers import StaticCache

        cfg = model.config
        if any(t != "full_attention" for t in getattr(cfg, "layer_types", None) or ["full_attention"]):
            raise ValueError("GraphDecoder builds full-attention masks only; this model has sliding-window layers")
        self.model, self.batch, self.max_len = model, batch, max_len
        self.device, self.graphs, self.warmup = torch.device(device), graphs, warmup
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"  # renamed in transformers 5.x
        self._pass_cache_position = "cache_position" in params  # earlier 5.x releases index the cache with it
        self.cache = StaticCache(config=cfg, max_cache_len=max_len)
        long = dict(dtype=torch.long, device=self.device)
        self.kv_index = torch.arange(max_len, **long)
        self.ids = torch.zeros(batch, 1, **long)  # the token fed to the next step
        self.position = torch.zeros(batch, 1, **long)  # its position
        self.step_index = torch.zeros(1, **long)  # where the step writes its token in self.tokens
        self.tokens = torch.zeros(batch, max_len, **long)
        self.graph = None
        self.captures = 0  # decode-step graphs captured (one per decoder)
        self.prefill_graphs: dict[int, tuple] = {}  # prompt length -> (its input buffer, its graph)

    def _forward(self, ids, positions, mask):
        kwargs = {self._cache_arg: self.cache}
        if self._pass_cache_position:
            kwargs["cache_position"] = positions[0]
        return self.model(
            input_ids=ids,
            attention_mask={"full_attention": mask},  # a prepared mask: transformers builds none
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **kwargs,
        ).logits

    def _step(self) -> None:
        """One decode step on the static tensors: everything on the device, nothing read back."""
        mask = (self.kv_index[None, :] <= self.position)[:, None, None, :]  # keys 0..position
        logits = self._forward(self.ids, self.position, mask)
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        self.ids.copy_(nxt)
        self.tokens.index_copy_(1, self.step_index, nxt)
        self.position.add_(1)
        self.step_index.add_(1)

    def _prefill(self, input_ids: torch.Tensor) -> None:
        self.cache.reset()
        self._prefill_step(input_ids)

    def _prefill_step(self, input_ids: torch.Tensor) -> None:
        """The prefill on a reset cache: everything on the device, nothing read back (capturable)."""
        prompt = input_ids.shape[1]
        positions = torch.arange(prompt, device=self.device).expand(self.batch, prompt)
        mask = (self.kv_index[None, :] <= torch.arange(prompt, device=self.device)[:, None])[None, None]
        logits = self._forward(input_ids, positions, mask.expand(self.batch, 1, prompt, self.max_len))
        self.ids.copy_(logits[:, -1].argmax(-1, keepdim=True))
        self.tokens.zero_()
        self.tokens[:, :1].copy_(self.ids)
        self.position.fill_(prompt)
        self.step_index.fill_(1)

    def _capture(self, input_ids: torch.Tensor) -> None:
        api = graph_api(self.device)
        side = api.Stream()
        side.wait_stream(api.current_stream())
        with api.stream(side):  # warm-up off the default stream, as torch.cuda's graph docs do
            self._prefill(input_ids)
            for _ in range(self.warmup):
                self._step()
        api.current_stream().wait_stream(side)
        self._prefill(input_ids)  # the capture records kernels only: the cache is left as the prefill made it
        self.graph = api.CUDAGraph()
        with api.graph(self.graph):
            self._step()
        self.captures += 1

    def _prefill_graph(self, input_ids: torch.Tensor):
        """This prompt length's prefill graph and its input buffer, captured on first use."""
        prompt = input_ids.shape[1]
        if prompt not in self.prefill_graphs:
            api = graph_api(self.device)
            ids = input_ids.clone()
            side = api.Stream()
            side.wait_stream(api.current_stream())
            with api.stream(side):  # a first run of this shape off the capture (library handles, workspaces)
                self._prefill(ids)
            api.current_stream().wait_stream(side)
            graph = api.CUDAGraph()
            with api.graph(graph):
                self._prefill_step(ids)
            self.prefill_graphs[prompt] = (ids, graph)
        return self.prefill_graphs[prompt]

    @torch.no_grad()
    def decode(self, input_ids: torch.Tensor, new_tokens: int) -> torch.Tensor:
        batch, prompt = input_ids.shape
        if batch != self.batch or prompt + new_tokens > self.max_len:
            raise ValueError(
                f"this decoder holds {self.batch} sequences of up to {self.max_len} tokens; got {batch} x "
                f"({prompt} + {new_tokens})"
            )
        if self.graphs:
            if self.graph is None:
                self._capture(input_ids)
            ids, prefill = self._prefill_graph(input_ids)
            self.cache.reset()
            ids.copy_(input_ids)
            prefill.replay()
        else:
            self._prefill(input_ids)
        for _ in range(new_tokens - 1):
            if self.graphs:
                self.graph.replay()
            else:
                self._step()
        return torch.cat([input_ids, self.tokens[:, :new_tokens]], -1)
