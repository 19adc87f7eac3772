"""A Hugging Face Trainer fine-tune as a user writes it: 8 steps of a tiny Qwen3 with gradient
accumulation, clipping, evaluation and a checkpoint at step 4, then a second Trainer that resumes from
that checkpoint. Prints the losses of both, the device the parameters trained on and a weight checksum.
--dropout gives attention a dropout (its masks drawn from the device's generator, which the checkpoint
keeps); with --gc, reentrant checkpointing recomputes each layer's forward with the same masks.

    python trainer.py OUTDIR [--cpu] [--bf16] [--gc] [--dropout] [--no-opt-in]
"""

from __future__ import annotations

import os
import sys

from common import checksum, opt_in, result, tiny_qwen3, token_rows

import torch_fl  # noqa: F401  (the flagos device; the Trainer picks it as it picks cuda)

opt_in()

from transformers import Trainer, TrainerCallback, TrainingArguments  # noqa: E402

outdir = sys.argv[1]


class DeviceSeen(TrainerCallback):
    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.device = str(next(model.parameters()).device)


def trainer(run: str, seen: DeviceSeen) -> Trainer:
    args = TrainingArguments(
        output_dir=os.path.join(outdir, run),
        per_device_train_batch_size=4,
        per_device_eval_batch_size=8,
        gradient_accumulation_steps=2,
        max_grad_norm=0.5,
        learning_rate=5e-3,
        max_steps=8,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=4,
        save_strategy="steps",
        save_steps=4,
        report_to=[],
        seed=3,
        bf16="--bf16" in sys.argv,
        use_cpu="--cpu" in sys.argv,
        gradient_checkpointing="--gc" in sys.argv,
        gradient_checkpointing_kwargs={"use_reentrant": True} if "--dropout" in sys.argv else None,
        disable_tqdm=True,
    )
    return Trainer(
        model=tiny_qwen3(attention_dropout=0.3 if "--dropout" in sys.argv else 0.0),
        args=args,
        train_dataset=token_rows(),
        eval_dataset=token_rows(16, seed=2),
        callbacks=[seen],
    )


def losses(t: Trainer, key: str) -> dict[int, float]:
    return {h["step"]: h[key] for h in t.state.log_history if key in h}


seen = DeviceSeen()
first = trainer("first", seen)
first.train()
resumed = trainer("resumed", DeviceSeen())
resumed.train(resume_from_checkpoint=os.path.join(outdir, "first", "checkpoint-4"))
result(
    {
        "args_device": str(first.args.device),
        "trained_on": seen.device,
        "loss": losses(first, "loss"),
        "eval_loss": losses(first, "eval_loss"),
        "resumed_loss": losses(resumed, "loss"),
        "checksum": checksum(first.model),
        "resumed_checksum": checksum(resumed.model),
    }
)
