"""A Trainer run started by a launcher (torchrun, accelerate launch): each process writes the device it
trained on, the distributed set-up accelerate chose and a weight checksum to OUTDIR/rank<R>.json.

    torchrun --nproc-per-node 2 launched_trainer.py OUTDIR [--cpu] [--no-opt-in]
"""

from __future__ import annotations

import json
import os
import sys

from common import checksum, exit_after_everyone, opt_in, tiny_qwen3, token_rows

import torch_fl  # noqa: F401

opt_in()

from transformers import Trainer, TrainingArguments  # noqa: E402

outdir = sys.argv[1]
args = TrainingArguments(
    output_dir=os.path.join(outdir, "run"),
    per_device_train_batch_size=4,
    max_steps=4,
    learning_rate=5e-3,
    logging_steps=1,
    report_to=[],
    save_strategy="no",
    seed=3,
    use_cpu="--cpu" in sys.argv,
    disable_tqdm=True,
)
trainer = Trainer(model=tiny_qwen3(), args=args, train_dataset=token_rows())
trainer.train()
state = args.distributed_state
with open(os.path.join(outdir, f"rank{state.process_index}.json"), "w") as f:
    json.dump(
        {
            "device": str(next(trainer.model.parameters()).device),
            "processes": state.num_processes,
            "distributed_type": str(state.distributed_type),
            "backend": state.backend,
            "checksum": checksum(trainer.model),
        },
        f,
    )
exit_after_everyone(state.wait_for_everyone)
