"""The flagos backend takes NCCL's arguments on every backing.

Libraries pick code paths by the backend's name: a backend that is not "gloo" gets the paths written for
NCCL (accelerate gathers into one flat tensor, Lightning syncs an integer metric with ReduceOp.AVG). On a
CUDA backing NCCL does the work and takes them as they are. On host memory gloo does, and where its rules
are stricter than NCCL's the call is brought to gloo's form here:

- all_gather_into_tensor / reduce_scatter_tensor: NCCL takes the gathered (scattered) tensor in any shape
  holding world_size times the other tensor's elements; gloo wants it stacked along dim 0. A contiguous one
  of the right size is viewed in gloo's shape (a view: the results land in the caller's tensor).
- ReduceOp.AVG of integer tensors: NCCL sums, then divides with C's integer division (toward zero); gloo
  divides into a float it cannot write to an integer tensor. The sum is taken into copies and, once complete,
  divided toward zero into the caller's tensors (the call completes before it returns).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from torch_fl._core import backing
from torch_fl.distributed.tensors import native


def stacked(gathered: torch.Tensor, part: torch.Tensor, size: int) -> torch.Tensor:
    """`gathered` (the native tensor of world_size x `part`'s elements) in gloo's shape, stacked along dim 0."""
    if backing() != "cpu" or not gathered.is_contiguous() or gathered.numel() != part.numel() * size:
        return gathered  # NCCL's own rules, or not NCCL's form: the engine's error stands
    shape = (size * part.shape[0], *part.shape[1:]) if part.dim() else (size,)
    return gathered if gathered.shape == shape else gathered.view(shape)


def reduction(run, tensors: list[torch.Tensor], opts, size: int, write_back: bool = True):
    """The Work of `run(native tensors)`, a reduction of `tensors` with `opts`: as it is, or, for an AVG of
    integer tensors on host memory, NCCL's average through gloo's sum (averaged()). `write_back=False`: a
    reduce's rank other than the root, whose tensors are inputs left alone."""
    if integer_average(opts, tensors):
        return averaged(run, tensors, size, write_back)
    return run([native(t) for t in tensors])


def integer_average(opts, tensors: list[torch.Tensor]) -> bool:
    """Whether a reduction is an AVG of integer tensors that gloo cannot do (host memory); if so, `opts`
    now asks for their sum."""
    if backing() != "cpu" or opts.reduceOp != dist.ReduceOp.AVG:
        return False
    if all(t.is_floating_point() or t.is_complex() for t in tensors):
        return False
    opts.reduceOp = dist.ReduceOp.SUM
    return True


def averaged(run, tensors: list[torch.Tensor], size: int, write_back: bool = True):
    """NCCL's AVG through gloo's SUM: `run(sums)` sums into native copies of `tensors` and returns its Work;
    once it completes, `tensors` get the sums divided by the group's size (integers toward zero). The copies
    keep gloo's later copies out of the results (its Work writes its outputs again at every wait())."""
    sums = [native(t).clone() for t in tensors]
    work = run(sums)
    work.wait()
    if write_back:
        for t, total in zip(tensors, sums, strict=True):
            exact = t.is_floating_point() or t.is_complex()
            native(t).copy_(total / size if exact else total.div(size, rounding_mode="trunc"))
    return work
