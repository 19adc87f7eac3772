"""Single-process references for the distributed cases: what each rank must hold afterwards."""

from __future__ import annotations

import torch

from tests.integration.distributed.common import LR, STEPS, batch, loss_of, make_net, rank_tensor, uses_branch


def _average(parts: list[torch.Tensor]) -> torch.Tensor:
    return torch.div(sum(parts), len(parts), rounding_mode="trunc")


def collectives(w: int, r: int, gloo_group: bool = False) -> dict:
    """`gloo_group`: the group is named "gloo", which keeps gloo's rules (no NCCL forms are run)."""
    ts = [rank_tensor(q) for q in range(w)]
    total = sum(ts)
    uneven_in = [100 * q + torch.arange(sum(j + 1 for j in range(w)), dtype=torch.float32) for q in range(w)]
    offsets = [sum(j + 1 for j in range(k)) for k in range(w)]
    ref = {
        "all_reduce_sum": total,
        "all_reduce_max": torch.stack(ts).max(0).values,
        "all_reduce_avg": total / w,
        "async_all_reduce": total,
        "async_completed": True,
        "async_future_device": "flagos",
        "async_future_is_caller_tensor": True,
        "broadcast": ts[w - 1],
        "all_gather": torch.stack(ts),
        "all_gather_into_tensor": torch.cat(ts),
        "reduce_scatter": sum(rank_tensor(q, r) for q in range(w)),
        "reduce_scatter_tensor": sum(rank_tensor(q, r) for q in range(w)),
        "all_to_all_single": torch.cat([rank_tensor(q, n=2 * w)[2 * r : 2 * r + 2] for q in range(w)]),
        "all_to_all_single_uneven": torch.cat([uneven_in[q][offsets[r] : offsets[r] + r + 1] for q in range(w)]),
        "all_to_all": torch.stack([torch.full((2,), 10.0 * q + r) for q in range(w)]),
        "scatter": rank_tensor(0, r),
        "coalesced_all_reduce": torch.stack([total, sum(rank_tensor(q, 1) for q in range(w))]),
        "coalesced_all_gather_into_tensor": torch.stack(
            [torch.cat([rank_tensor(q, k) for q in range(w)]) for k in (0, 1)]
        ),
        "coalesced_reduce_scatter_tensor": torch.stack([sum(rank_tensor(q, k + r) for q in range(w)) for k in (0, 1)]),
        "all_gather_object": [{"rank": q} for q in range(w)],
        "broadcast_object_list": [{"from": w - 1}, (w - 1) * 2],
        "scatter_object_list": f"item{r}",
    }
    if not gloo_group:  # NCCL's forms (cases_collectives.nccl_forms); integer averages round toward zero
        ref["all_gather_into_tensor_flat"] = torch.cat(ts)
        ref["reduce_scatter_tensor_flat"] = sum(rank_tensor(q, r) for q in range(w)).view(2, 3)
        ref["all_reduce_avg_int"] = _average([torch.tensor([q + 1, -(q + 1), 7 * q]) for q in range(w)])
        ref["reduce_scatter_tensor_avg_int"] = _average(
            [torch.arange(2 * w)[2 * r : 2 * r + 2] * (q + 1) for q in range(w)]
        )
        if r == 0:
            ref["reduce_avg_int"] = _average([torch.tensor([q + 1, 2 * q]) for q in range(w)])
    if r == 0:
        ref["reduce"] = total
        ref["gather"] = torch.stack(ts)
        ref["gather_object"] = [("g", q) for q in range(w)]
    if w > 1:
        ref["send_recv"] = rank_tensor((r - 1) % w)
        ref["batch_isend_irecv"] = rank_tensor((r - 1) % w, 1)
    if r < 2:
        ref["new_group_all_reduce"] = sum(rank_tensor(q) for q in range(min(2, w)))
    return ref


def ddp(variant: str, w: int) -> dict:
    """DDP's contract: every rank steps with the average of all ranks' gradients."""
    net = make_net()
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    for step in range(STEPS):
        grads = [torch.zeros_like(p) for p in net.parameters()]
        for r in range(w):
            net.zero_grad()
            micro = [(batch(r, step, micro=1), True)] if variant == "no_sync" else []
            for (x, y), branch in [*micro, (batch(r, step), uses_branch(variant, r, step))]:
                loss_of(net(x, branch), y).backward()
            for g, p in zip(grads, net.parameters(), strict=True):
                if p.grad is not None:
                    g += p.grad / w
        for g, p in zip(grads, net.parameters(), strict=True):
            p.grad = g  # a parameter no rank used gets zeros here, no gradient in DDP: SGD leaves both alone
        opt.step()
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def fsdp2(w: int, bf16: bool) -> dict:
    """FSDP2 averages the gradients over ranks as DDP does; the branch is never used."""
    net = make_net()
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    for step in range(STEPS):
        total = [torch.zeros_like(p) for p in net.parameters()]
        for r in range(w):
            net.zero_grad()
            x, y = batch(r, step)
            if bf16:
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss_of(net(x).float(), y).backward()
            else:
                loss_of(net(x), y).backward()
            for g, p in zip(total, net.parameters(), strict=True):
                if p.grad is not None:
                    g += p.grad / w
        for g, p in zip(total, net.parameters(), strict=True):
            p.grad = g if p is not net.branch.weight and p is not net.branch.bias else None
        opt.step()
    return {k: v.detach().clone() for k, v in net.state_dict().items()}
