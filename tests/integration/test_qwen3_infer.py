"""Qwen3 inference on flagos: shape, non-trivial generation, seeding, and
agreement with native PyTorch on the backing device.

Host backing (CI): the tiny Qwen3 against native CPU. CUDA backing: the tiny
model against native CUDA, and the Qwen3-0.6B architecture (random weights,
bf16) against native CUDA (marked `cuda`).

Tolerance for last-position logits (float32 logits compared): the demo's,
`workloads.LOGITS_TOLERANCE` (float32 model: rtol 1e-4, atol 1e-4; bfloat16
model: rtol 1.6e-2, atol 5e-2). With native routes flagos runs the backing's
own kernels, so in practice the logits are bit-identical.
"""

from __future__ import annotations

import copy

import pytest
import torch

import torch_fl
from torch_fl.models import qwen3, workloads

pytest.importorskip("transformers")

ON_CUDA = torch_fl.backing() == "cuda"
NATIVE = "cuda" if ON_CUDA else "cpu"
TOL = workloads.LOGITS_TOLERANCE

CASES = [
    pytest.param("tiny", torch.float32, id="tiny-fp32", marks=pytest.mark.anyplatform),
    pytest.param("tiny", torch.bfloat16, id="tiny-bf16", marks=pytest.mark.anyplatform),
    pytest.param(
        "0.6b",
        torch.bfloat16,
        id="0.6b-bf16",
        marks=[pytest.mark.cuda, pytest.mark.skipif(not ON_CUDA, reason="Qwen3-0.6B runs on a CUDA backing")],
    ),
]
PROMPT_LEN, NEW_TOKENS, BATCH = 16, 16, 2


@pytest.fixture(scope="module")
def cpu_models():
    cache = {}

    def get(variant, dtype):
        if (variant, dtype) not in cache:
            cache.clear()  # keep one large model in memory at a time
            cache[(variant, dtype)] = qwen3.build(variant, seed=0, dtype=dtype)
        return cache[(variant, dtype)]

    return get


def _prompt(model, seed=1):
    return qwen3.tokens(model.config.vocab_size, BATCH, PROMPT_LEN, seed)


@pytest.mark.parametrize("variant,dtype", CASES)
def test_output_shape_and_device(cpu_models, variant, dtype):
    model = copy.deepcopy(cpu_models(variant, dtype)).to("flagos")
    ids = _prompt(model).to("flagos")
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert logits.shape == (BATCH, PROMPT_LEN, model.config.vocab_size)
    assert logits.device.type == "flagos" and logits.dtype == dtype
    assert torch.isfinite(logits.float()).all()
    out = workloads.greedy(model, ids, NEW_TOKENS)
    assert out.shape == (BATCH, PROMPT_LEN + NEW_TOKENS) and out.device.type == "flagos"
    assert torch.equal(out[:, :PROMPT_LEN].cpu(), ids.cpu())


@pytest.mark.parametrize("variant,dtype", CASES)
def test_generation_is_not_trivial(cpu_models, variant, dtype):
    model = copy.deepcopy(cpu_models(variant, dtype)).to("flagos")
    ids = _prompt(model).to("flagos")
    new = workloads.greedy(model, ids, NEW_TOKENS)[:, PROMPT_LEN:].cpu()
    assert new.unique().numel() > 1, f"every generated token is {new[0, 0].item()}"
    assert not torch.equal(new[0], new[1]), "different prompts gave the same continuation"
    # the first generated token is the argmax of the forward pass at the last position
    first = workloads.last_logits(model, ids).argmax(-1)
    assert torch.equal(new[:, 0], first)


@pytest.mark.parametrize("variant,dtype", CASES)
def test_same_seed_same_output(cpu_models, variant, dtype):
    base = cpu_models(variant, dtype)
    if variant == "tiny":  # rebuilding the 0.6B model twice costs more than it tells
        again = qwen3.build(variant, seed=0, dtype=dtype)
        other = qwen3.build(variant, seed=1, dtype=dtype)
        assert all(
            torch.equal(a, b) for a, b in zip(base.state_dict().values(), again.state_dict().values(), strict=True)
        )
        assert not torch.equal(base.lm_head.weight, other.lm_head.weight)
    model = copy.deepcopy(base).to("flagos")
    ids = _prompt(model).to("flagos")
    assert torch.equal(workloads.greedy(model, ids, NEW_TOKENS), workloads.greedy(model, ids, NEW_TOKENS))
    # sampling draws from the flagos generator: same seed, same tokens; another seed, others
    draws = []
    for seed in (7, 7, 8):
        torch.flagos.manual_seed(seed)
        draws.append(workloads.sample(model, ids, NEW_TOKENS).cpu())
    assert torch.equal(draws[0], draws[1])
    assert not torch.equal(draws[0], draws[2])


@pytest.mark.parametrize("variant,dtype", CASES)
def test_matches_native(cpu_models, variant, dtype):
    base = cpu_models(variant, dtype)
    native = copy.deepcopy(base).to(NATIVE)
    flagos = copy.deepcopy(base).to("flagos")
    ids = _prompt(base)

    ref_tokens = workloads.greedy(native, ids.to(NATIVE), NEW_TOKENS).cpu()
    fl_tokens = workloads.greedy(flagos, ids.to("flagos"), NEW_TOKENS).cpu()
    assert torch.equal(fl_tokens, ref_tokens)

    ref_logits = workloads.last_logits(native, ids.to(NATIVE))
    fl_logits = workloads.last_logits(flagos, ids.to("flagos"))
    torch.testing.assert_close(fl_logits, ref_logits, **TOL[dtype])


@pytest.mark.anyplatform
def test_token_by_token_decode_matches_generate(cpu_models):
    # benchmarks/e2e.py --step-pairs alternates two models token by token with
    # greedy_steps(); it must decode exactly what generate() does.
    model = copy.deepcopy(cpu_models("tiny", torch.float32)).to("flagos")
    ids = _prompt(model).to("flagos")
    steps = workloads.greedy_steps(model, ids, NEW_TOKENS)
    for _ in range(NEW_TOKENS):
        next(steps)  # exactly one yield per generated token
    tokens = workloads.run_steps(steps)
    assert tokens.device.type == "flagos"
    assert torch.equal(tokens.cpu(), workloads.greedy(model, ids, NEW_TOKENS).cpu())


@pytest.mark.anyplatform
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_generation_in_inference_mode_matches_native(cpu_models, dtype):
    # Under torch.inference_mode() every result is an inference tensor (no autograd
    # keys), retagged as flagos in place like any other and then fed to the next
    # operator, the KV cache's cat included: generation must still match native.
    base = cpu_models("tiny", dtype)
    native = copy.deepcopy(base).to(NATIVE)
    flagos = copy.deepcopy(base).to("flagos")
    ids = _prompt(base)
    with torch.inference_mode():
        ref_tokens = workloads.greedy(native, ids.to(NATIVE), NEW_TOKENS)
        fl_tokens = workloads.greedy(flagos, ids.to("flagos"), NEW_TOKENS)
        ref_logits = workloads.last_logits(native, ids.to(NATIVE))
        fl_logits = workloads.last_logits(flagos, ids.to("flagos"))
    assert fl_tokens.is_inference() and fl_tokens.device.type == "flagos"
    assert torch.equal(fl_tokens.cpu(), ref_tokens.cpu())
    torch.testing.assert_close(fl_logits.cpu(), ref_logits.cpu(), **TOL[dtype])


@pytest.mark.anyplatform
def test_build_takes_configuration_overrides_for_builtin_variants_only(tmp_path):
    model = qwen3.build("tiny", seed=0, num_hidden_layers=1, vocab_size=512)
    assert model.config.num_hidden_layers == 1 and len(model.model.layers) == 1
    assert model.get_input_embeddings().weight.shape[0] == 512
    with pytest.raises(ValueError, match="not to a checkpoint"):
        qwen3.build(str(tmp_path), num_hidden_layers=1)
