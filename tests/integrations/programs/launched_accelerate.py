"""An accelerate loop started by `accelerate launch`: FSDP2 from a plugin (plain DDP with --cpu, whose
weights FSDP's must equal), then the collectives accelerate's Trainer helpers run (gather of 2-D tensors,
pad_across_processes, a mean), each rank writing its results to OUTDIR/rank<R>.json.

    accelerate launch --multi_gpu --num_processes 2 launched_accelerate.py OUTDIR [--cpu]
"""

from __future__ import annotations

import json
import os
import sys

import torch
from common import exit_after_everyone, opt_in

import torch_fl  # noqa: F401

opt_in()

from accelerate import Accelerator  # noqa: E402
from accelerate.utils import FullyShardedDataParallelPlugin  # noqa: E402

cpu = "--cpu" in sys.argv
acc = Accelerator(cpu=cpu, fsdp_plugin=None if cpu else FullyShardedDataParallelPlugin(fsdp_version=2))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
model, opt = acc.prepare(model, opt)
data = torch.Generator().manual_seed(1 + acc.process_index)
for _ in range(3):
    loss = model(torch.randn(4, 8, generator=data).to(acc.device)).pow(2).mean()
    acc.backward(loss)
    opt.step()
    opt.zero_grad()
state = acc.get_state_dict(model)
r = acc.process_index
ragged = torch.full((r + 1, 3), r, device=acc.device)  # what Trainer.predict pads, then gathers
out = {
    "distributed_type": str(acc.distributed_type),
    "device": str(acc.device),
    "checksum": sum(v.float().sum().item() for v in state.values()),
    "gather": acc.gather(torch.full((1, 2), r, device=acc.device)).tolist(),
    "pad_gather": acc.gather(acc.pad_across_processes(ragged, dim=0)).tolist(),
    "mean": acc.reduce(torch.tensor([r + 1.0, 7.0 * r], device=acc.device), "mean").tolist(),
}
with open(os.path.join(sys.argv[1], f"rank{r}.json"), "w") as f:
    json.dump(out, f)
exit_after_everyone(acc.wait_for_everyone)
