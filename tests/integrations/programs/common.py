"""What the programs share: a tiny Qwen3 built from a config (nothing downloaded), a seeded token
dataset, the one line of JSON each program prints for its test (`result`), and the end of a launched rank
(`exit_after_everyone`)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

import torch

RESULT_TAG = "PROGRAM_RESULT "

TINY_QWEN3 = dict(
    vocab_size=128,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=64,
    tie_word_embeddings=False,
)


def opt_in() -> None:
    """The documented opt-in, unless the test runs the program without it (--no-opt-in)."""
    if "--no-opt-in" not in sys.argv:
        import torch_fl

        torch_fl.integrations.enable()


def tiny_qwen3(seed: int = 0, **overrides):
    from transformers import AutoModelForCausalLM, Qwen3Config

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(Qwen3Config(**{**TINY_QWEN3, **overrides}))


def token_rows(n: int = 32, length: int = 16, seed: int = 1) -> list[dict]:
    """A causal-LM dataset as a plain list of dicts (the `datasets` package is not needed)."""
    ids = torch.randint(0, TINY_QWEN3["vocab_size"], (n, length), generator=torch.Generator().manual_seed(seed))
    return [{"input_ids": row, "labels": row} for row in ids]


def checksum(module: torch.nn.Module) -> float:
    return float(sum(p.detach().double().sum().cpu() for p in module.parameters()))


def result(payload: dict) -> None:
    print(RESULT_TAG + json.dumps(payload), flush=True)


def exit_after_everyone(wait_for_everyone: Callable[[], None]) -> None:
    """Ends a launched rank once every rank has written its results (`wait_for_everyone`: a barrier), without the
    interpreter's teardown: torch 2.13's gloo sometimes aborts in it ("terminate called without an active
    exception"; plain torch without torch_fl too, even after destroy_process_group), which would fail the launch
    after the work is done."""
    wait_for_everyone()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
