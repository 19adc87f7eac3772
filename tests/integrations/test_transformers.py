"""Hugging Face stacks on flagos, each against the same program on the CPU: Trainer (fp32, bf16, gradient
accumulation, clipping, checkpointing, evaluation, save and exact resume), loading (from_pretrained with
each device_map, pipeline, safetensors), PEFT, diffusers and TRL. Tiny models built from configs."""

from __future__ import annotations

import pytest

import torch_fl

pytest.importorskip("transformers")
pytestmark = pytest.mark.anyplatform

# Host backing runs the CPU's kernels: equal. A GPU's kernels reduce in other orders.
EXACT = torch_fl.backing() == "cpu"


def close(got: dict, want: dict, rel: float) -> bool:
    return got.keys() == want.keys() and all(abs(got[k] - want[k]) <= rel * abs(want[k]) for k in want)


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory):
    from tests.integrations.conftest import run_program

    return {
        flags: run_program("trainer.py", str(tmp_path_factory.mktemp("cpu")), "--cpu", *flags).result()
        for flags in [(), ("--bf16",)]
    }


@pytest.mark.parametrize("flags", [(), ("--bf16",), ("--gc",)], ids=["fp32", "bf16", "grad-checkpointing"])
def test_trainer_trains_on_flagos_like_the_cpu(program, cpu_runs, tmp_path, flags):
    got = program("trainer.py", str(tmp_path), *flags).result()
    want = cpu_runs[tuple(f for f in flags if f == "--bf16")]
    assert got["trained_on"].startswith("flagos"), got
    assert got["args_device"].startswith("flagos"), got
    rel = 0.0 if EXACT and "--bf16" not in flags else (2e-2 if "--bf16" in flags else 1e-4)
    assert close(got["loss"], want["loss"], rel), (got["loss"], want["loss"])
    assert close(got["eval_loss"], want["eval_loss"], rel), (got["eval_loss"], want["eval_loss"])
    # The resumed run (optimizer, scheduler, data order from checkpoint-4) continues exactly.
    assert got["resumed_loss"] == got["loss"]
    assert got["resumed_checksum"] == got["checksum"]


def test_resume_and_reentrant_checkpointing_are_exact_with_dropout(program, tmp_path):
    # The checkpoint keeps flagos's generators (the Trainer saves a fixed list of devices'): the resumed run
    # draws the same dropout masks. Reentrant checkpointing runs each layer's forward without a gradient and
    # recomputes it with one: both draw attention's masks from flagos's generator, which it restores between.
    plain = program("trainer.py", str(tmp_path / "plain"), "--dropout").result()
    assert plain["resumed_loss"] == plain["loss"] and plain["resumed_checksum"] == plain["checksum"]
    checkpointed = program("trainer.py", str(tmp_path / "gc"), "--dropout", "--gc").result()
    assert close(checkpointed["loss"], plain["loss"], 1e-5), (checkpointed["loss"], plain["loss"])
    assert checkpointed["resumed_loss"] == checkpointed["loss"]


def test_without_the_opt_in_the_import_names_it(program, tmp_path):
    finished = program("trainer.py", str(tmp_path), "--no-opt-in")
    assert "IntegrationWarning" in finished.output and "torch_fl.integrations.enable()" in finished.output


def test_loading_onto_flagos(program, tmp_path):
    got = program("loading.py", str(tmp_path)).result()
    for name in ("flagos", "flagos:0"):
        assert got[name]["devices"] == ["flagos:0"] and got[name]["train_ok"], got[name]
    assert all(d.startswith("flagos") for d in got["auto"]["devices"]), got["auto"]
    # Over the flagos devices, then offloaded to the CPU, as accelerate does over CUDA devices.
    placed = set(got["max_memory"]["map"].values())
    assert "cpu" in placed and placed - {"cpu"}, got["max_memory"]
    for name in ("flagos", "flagos:0", "auto", "max_memory"):
        assert got[name]["tokens"] == got["cpu_tokens"], name
    last = f"flagos:{torch_fl.flagos.device_count() - 1}"
    assert got["pipeline_device"] == "flagos:0"
    assert (got["pipeline_index"], got["pipeline_default"]) == (last, "flagos:0")
    assert got["pipeline_mapped"] == ["flagos:0", "flagos:0"]
    for name in ("integrations.load_file", "safetensors.load_file"):
        assert got[name] == {"devices": ["flagos:0"], "equal": True}, name
    assert got["safe_open"] == {"devices": [last], "equal": True}
    assert got["dispatched"]["devices"] == sorted({"flagos:0", last}), got["dispatched"]
    assert got["dispatched_one"]["devices"] == [last], got["dispatched_one"]
    for name in ("dispatched", "dispatched_one"):
        assert got[name]["tokens"] == got["cpu_tokens"], name


def test_generate_compiles_a_static_cache_on_flagos_over_a_gpu(program):
    # On host backing --as-gpu lets the adapter take flagos for a GPU: it then compiles on the host.
    got = program("compiled_generate.py", *(() if torch_fl.backing() == "cuda" else ("--as-gpu",))).result()
    want = got["reference"]["tokens"]
    assert got["static"]["tokens"] == want and got["dynamic"]["tokens"] == want
    assert got["static"]["graphs"] >= 1, got  # the compiled forward ran
    assert got["dynamic"]["graphs"] == 0, got  # a dynamic cache is not compiled, as on CUDA
    assert got["warnings"] == []
    if torch_fl.backing() == "cuda":
        assert got["reference"]["graphs"] >= 1, got


@pytest.mark.skipif(torch_fl.backing() == "cuda", reason="flagos is over a GPU here")
def test_flagos_over_host_memory_generates_eagerly_as_the_cpu(program):
    got = program("compiled_generate.py").result()
    assert got["static"]["tokens"] == got["reference"]["tokens"]
    assert got["static"]["graphs"] == got["reference"]["graphs"] == 0


def _numbers(run: dict) -> dict:
    """A run's numbers, lists flattened, its device left out."""
    flat = {}
    for key, value in run.items():
        if key != "device":
            for i, x in enumerate(value if isinstance(value, list) else [value]):
                flat[f"{key}{i}"] = x
    return flat


@pytest.mark.parametrize(
    "part, library",
    [("lora", "peft"), ("unet", "diffusers"), ("sft", "trl")],
    ids=["peft-lora", "diffusers-unet", "trl-sft"],
)
def test_library_on_flagos_like_the_cpu(program, part, library):
    pytest.importorskip(library)
    got = program("adapters_and_pipelines.py", part).result()[part]
    assert close(_numbers(got["flagos"]), _numbers(got["cpu"]), 0.0 if EXACT else 1e-3), got
    if "device" in got["flagos"]:
        assert got["flagos"]["device"].startswith("flagos"), got


def test_diffusers_pipeline(program):
    pytest.importorskip("diffusers")
    got = program("adapters_and_pipelines.py", "pipeline").result()
    want = got["pipeline"]["cpu"]["image_sum"]
    for run in (got["pipeline"]["flagos"], got["pipeline_offload"]):
        assert run["execution_device"].startswith("flagos"), run
        assert abs(run["image_sum"] - want) <= (0 if EXACT else 1e-3) * abs(want), (run, want)


def test_diffusers_pipeline_loads_with_a_device_map(program):
    # its text encoder loads through transformers' from_pretrained, which takes flagos with the adapter
    pytest.importorskip("diffusers")
    got = program("adapters_and_pipelines.py", "mapped_pipeline").result()["mapped_pipeline"]
    assert got["flagos"]["devices"] == ["flagos:0"], got
    want = got["cpu"]["image_sum"]
    assert abs(got["flagos"]["image_sum"] - want) <= (0 if EXACT else 1e-3) * abs(want), got
