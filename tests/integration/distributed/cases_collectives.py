"""Collective cases run in each worker; results are CPU copies the tests compare with references."""

from __future__ import annotations

import torch
import torch.distributed as dist

from tests.integration.distributed.common import rank_tensor


def collectives(dev: torch.device) -> dict:
    r, w = dist.get_rank(), dist.get_world_size()
    R = {}

    def t(k=0, n=6):
        return rank_tensor(r, k, n).to(dev)

    for name, op in (("sum", dist.ReduceOp.SUM), ("max", dist.ReduceOp.MAX), ("avg", dist.ReduceOp.AVG)):
        x = t()
        dist.all_reduce(x, op=op)
        R[f"all_reduce_{name}"] = x
    x = t()
    work = dist.all_reduce(x, async_op=True)
    work.wait()
    value = work.get_future().wait()
    R["async_all_reduce"] = x
    R["async_completed"] = work.is_completed()
    R["async_future_device"] = str(value[0].device.type)
    R["async_future_is_caller_tensor"] = value[0] is x or value[0].data_ptr() == x.data_ptr()
    x = t()
    dist.broadcast(x, src=w - 1)
    R["broadcast"] = x
    x = t()
    dist.reduce(x, dst=0)
    if r == 0:
        R["reduce"] = x
    outs = [torch.empty(6, device=dev) for _ in range(w)]
    dist.all_gather(outs, t())
    R["all_gather"] = torch.stack(outs)
    out = torch.empty(6 * w, device=dev)
    dist.all_gather_into_tensor(out, t())
    R["all_gather_into_tensor"] = out
    out = torch.empty(6, device=dev)
    dist.reduce_scatter(out, [t(k) for k in range(w)])
    R["reduce_scatter"] = out
    out = torch.empty(6, device=dev)
    dist.reduce_scatter_tensor(out, torch.cat([t(k) for k in range(w)]))
    R["reduce_scatter_tensor"] = out
    if dist.get_backend() != "gloo":
        R.update(nccl_forms(dev, t, r, w))
    out = torch.empty(2 * w, device=dev)
    dist.all_to_all_single(out, t(n=2 * w))
    R["all_to_all_single"] = out
    # uneven: rank r sends j + 1 elements to rank j and receives r + 1 from each rank
    inp = (100 * r + torch.arange(sum(j + 1 for j in range(w)), dtype=torch.float32)).to(dev)
    out = torch.empty(w * (r + 1), device=dev)
    dist.all_to_all_single(out, inp, [r + 1] * w, [j + 1 for j in range(w)])
    R["all_to_all_single_uneven"] = out
    outs = [torch.empty(2, device=dev) for _ in range(w)]
    dist.all_to_all(outs, [torch.full((2,), 10.0 * r + j, device=dev) for j in range(w)])
    R["all_to_all"] = torch.stack(outs)
    gathered = [torch.empty(6, device=dev) for _ in range(w)] if r == 0 else None
    dist.gather(t(), gathered, dst=0)
    if r == 0:
        R["gather"] = torch.stack(gathered)
    out = torch.empty(6, device=dev)
    dist.scatter(out, [rank_tensor(0, k).to(dev) for k in range(w)] if r == 0 else None, src=0)
    R["scatter"] = out
    if w > 1:  # a ring; at world size 1 it would be a rank sending to itself
        got = torch.empty(6, device=dev)
        reqs = [dist.isend(t(), (r + 1) % w), dist.irecv(got, (r - 1) % w)]
        for req in reqs:
            req.wait()
        R["send_recv"] = got
        got = torch.empty(6, device=dev)
        ops = [dist.P2POp(dist.isend, t(1), (r + 1) % w), dist.P2POp(dist.irecv, got, (r - 1) % w)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        R["batch_isend_irecv"] = got
    # coalesced forms
    a, b = t(), t(1)
    with dist._coalescing_manager(async_ops=True) as cm:
        dist.all_reduce(a)
        dist.all_reduce(b)
    cm.wait()
    R["coalesced_all_reduce"] = torch.stack([a, b])
    outs = [torch.empty(6 * w, device=dev) for _ in range(2)]
    with dist._coalescing_manager():
        for k, o in enumerate(outs):
            dist.all_gather_into_tensor(o, t(k))
    R["coalesced_all_gather_into_tensor"] = torch.stack(outs)
    outs = [torch.empty(6, device=dev) for _ in range(2)]
    with dist._coalescing_manager():
        for k, o in enumerate(outs):
            dist.reduce_scatter_tensor(o, torch.cat([t(k + j) for j in range(w)]))
    R["coalesced_reduce_scatter_tensor"] = torch.stack(outs)
    dist.barrier()
    # object collectives
    objs = [None] * w
    dist.all_gather_object(objs, {"rank": r})
    R["all_gather_object"] = objs
    lst = [{"from": r}, r * 2]
    dist.broadcast_object_list(lst, src=w - 1)
    R["broadcast_object_list"] = lst
    gathered = [None] * w if r == 0 else None
    dist.gather_object(("g", r), gathered, dst=0)
    if r == 0:
        R["gather_object"] = gathered
    got = [None]
    dist.scatter_object_list(got, [f"item{j}" for j in range(w)] if r == 0 else None, src=0)
    R["scatter_object_list"] = got[0]
    # a subgroup of ranks 0 and 1
    sub_ranks = list(range(min(2, w)))
    sub = dist.new_group(sub_ranks)
    if r in sub_ranks:
        x = t()
        dist.all_reduce(x, group=sub)
        R["new_group_all_reduce"] = x
    return R


def nccl_forms(dev: torch.device, t, r: int, w: int) -> dict:
    """NCCL's forms, which libraries use with any backend not named "gloo" (accelerate's gather, Lightning's
    metric sync): a gathered (scattered) tensor of another shape than the parts stacked, and an integer
    average (C's division, toward zero). A group named "gloo" keeps gloo's stricter rules."""
    R = {}
    out = torch.empty(6 * w, device=dev)
    dist.all_gather_into_tensor(out, t().view(2, 3))
    R["all_gather_into_tensor_flat"] = out
    out = torch.empty(2, 3, device=dev)
    dist.reduce_scatter_tensor(out, torch.cat([t(k) for k in range(w)]))
    R["reduce_scatter_tensor_flat"] = out
    x = torch.tensor([r + 1, -(r + 1), 7 * r], device=dev)
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    R["all_reduce_avg_int"] = x
    x = torch.tensor([r + 1, 2 * r], device=dev)
    dist.reduce(x, dst=0, op=dist.ReduceOp.AVG)
    R["reduce_avg_int"] = x
    out = torch.empty(2, dtype=torch.int64, device=dev)
    dist.reduce_scatter_tensor(out, torch.arange(2 * w, device=dev) * (r + 1), op=dist.ReduceOp.AVG)
    R["reduce_scatter_tensor_avg_int"] = out
    return R
