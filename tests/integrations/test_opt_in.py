"""The opt-in itself: enable() names, the FLAGOS_INTEGRATIONS environment variable, the notice (once, only
for a library imported after torch_fl without the opt-in; accelerate's only in a launched run of several
processes, the calls its adapter covers), and that an adapter changes nothing for other devices."""

from __future__ import annotations

import pytest

import torch_fl
from tests.helpers import run_python

pytestmark = pytest.mark.anyplatform


def test_unknown_adapter_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="known: .*'accelerate'.*'transformers'"):
        torch_fl.integrations.enable("tranformers")


@pytest.mark.parametrize(
    "raw, chosen",
    [
        ("", None),  # unset: no adapter, the notices stay
        *((v, ()) for v in ("0", "false", "No", " off ")),  # off: no adapter, no notice
        *((v, ("accelerate", "safetensors", "transformers")) for v in ("1", "true", "YES", "on", "All")),
        ("Transformers, accelerate,", ("transformers", "accelerate")),
    ],
)
def test_the_environment_variable_reads_as_launchers_and_shells_write_it(raw, chosen):
    got = torch_fl.integrations._environment_choice(raw)
    assert got == chosen if chosen is None or chosen == () else sorted(got) == sorted(chosen)


def test_an_unknown_adapter_in_the_environment_is_an_error_naming_the_variable():
    done = run_python("import torch_fl", env={"FLAGOS_INTEGRATIONS": "transformer"}, timeout=120)
    assert done.returncode != 0
    assert "FLAGOS_INTEGRATIONS='transformer': unknown adapter(s) ['transformer']" in done.stderr, done.stderr[-2000:]


NOTICE = """
import warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as seen:
    {before}
    import torch_fl
    {enable}
    import transformers.pipelines.base, transformers.training_args, accelerate.state
print("NOTICES", sorted(str(w.message).split(" does not")[0] for w in seen
                        if w.category.__name__ == "IntegrationWarning"))
print("ENABLED", torch_fl.integrations.enabled())
"""


@pytest.mark.parametrize(
    "before, enable, env, notices, enabled",
    [
        ("pass", "pass", {}, ["torch_fl: transformers"], []),
        ("pass", "pass", {"WORLD_SIZE": "2"}, ["torch_fl: accelerate", "torch_fl: transformers"], []),
        ("pass", "torch_fl.integrations.enable()", {}, [], ["accelerate", "safetensors", "transformers"]),
        ("pass", "pass", {"FLAGOS_INTEGRATIONS": "1"}, [], ["accelerate", "safetensors", "transformers"]),
        ("pass", "pass", {"FLAGOS_INTEGRATIONS": "accelerate"}, ["torch_fl: transformers"], ["accelerate"]),
        ("pass", "pass", {"FLAGOS_INTEGRATIONS": "0"}, [], []),
        (
            "import transformers.training_args",
            "torch_fl.integrations.enable()",
            {},
            [],
            ["accelerate", "safetensors", "transformers"],
        ),
    ],
    ids=["none", "launched", "enable", "env-all", "env-some", "env-off", "imported-before"],
)
def test_opt_in_and_notice(before, enable, env, notices, enabled):
    # transformers' notice comes once, though its pipelines and its training arguments both need the adapter
    pytest.importorskip("accelerate")
    done = run_python(NOTICE.format(before=before, enable=enable), env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"NOTICES {notices}" in done.stdout, done.stdout + done.stderr[-2000:]
    assert f"ENABLED {enabled}" in done.stdout, done.stdout


def test_adapters_leave_other_devices_alone():
    """With every adapter on, a CPU Trainer stays on the CPU and safetensors loads CPU tensors as before."""
    pytest.importorskip("accelerate")
    done = run_python(
        """
        import os, tempfile, torch, torch_fl
        torch_fl.integrations.enable()
        import safetensors.torch as st
        from transformers import TrainingArguments
        args = TrainingArguments(output_dir=tempfile.mkdtemp(), use_cpu=True, report_to=[])
        path = os.path.join(tempfile.mkdtemp(), "t.safetensors")
        st.save_file({"a": torch.arange(3.0)}, path)
        print("RESULT", args.device, st.load_file(path)["a"].device, st.load_file(path, device="cpu")["a"].device)
        """,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RESULT cpu cpu cpu" in done.stdout, done.stdout


def test_the_notice_points_at_the_line_that_imported_the_library():
    # not at torch_fl's import hook or transformers' lazy-import machinery: the user's own line
    done = run_python(
        """
        import warnings
        warnings.simplefilter("always")
        import torch_fl
        with warnings.catch_warnings(record=True) as seen:
            from transformers import TrainingArguments
        print("AT", [(w.filename, w.lineno) for w in seen if w.category.__name__ == "IntegrationWarning"])
        """,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "AT [('<string>', 6)]" in done.stdout, done.stdout


def test_a_model_alone_brings_the_notice():
    # from_pretrained(device_map="flagos") without the opt-in fails in the kernels package, with an error that
    # names neither the opt-in nor use_kernels=False: the notice comes with transformers' models, once
    pytest.importorskip("transformers")
    done = run_python(
        """
        import warnings
        import torch_fl
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            from transformers import AutoConfig, AutoModelForCausalLM
            cfg = AutoConfig.for_model("llama", hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                       intermediate_size=32, vocab_size=32)
            AutoModelForCausalLM.from_config(cfg)
            from transformers import pipeline, TrainingArguments
        notes = [w for w in seen if w.category.__name__ == "IntegrationWarning"]
        print("NOTES", len(notes), notes[0].filename, "from_pretrained(device_map" in str(notes[0].message))
        """,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "NOTES 1 <string> True" in done.stdout, done.stdout
