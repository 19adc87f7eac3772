"""DDP, FSDP2, DeviceMesh, DTensor and DCP cases run in each worker."""

from __future__ import annotations

import pathlib

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from tests.integration.distributed.common import LR, STEPS, batch, loss_of, make_net, uses_branch

DDP_VARIANTS = {
    "plain": {},
    "bucket_view": {"gradient_as_bucket_view": True},
    "static_graph": {"static_graph": True},
    "find_unused": {"find_unused_parameters": True},
    "find_unused_bucket_view": {"find_unused_parameters": True, "gradient_as_bucket_view": True},
    "no_sync": {},
    "compiled": {},  # torch.compile(DDP(...)): DDP's C++ reducer calls the group from the compiled forward
}


def _params(model) -> dict:
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def ddp(dev: torch.device) -> dict:
    r = dist.get_rank()
    R = {}
    for name, kwargs in DDP_VARIANTS.items():
        net = make_net().to(dev)
        model = DDP(net, **kwargs)
        model = torch.compile(model, backend="aot_eager") if name == "compiled" else model
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        grad_devices = set()
        for step in range(STEPS):
            opt.zero_grad()
            if name == "no_sync":
                # two micro-batches: the first accumulates locally, the second synchronizes
                with model.no_sync():
                    x, y = batch(r, step, micro=1)
                    loss_of(model(x.to(dev), True), y.to(dev)).backward()
            x, y = batch(r, step)
            branch = uses_branch(name, r, step)
            loss_of(model(x.to(dev), branch), y.to(dev)).backward()
            grad_devices |= {p.grad.device.type for p in model.parameters() if p.grad is not None}
            opt.step()
        R[f"ddp_{name}"] = _params(net)
        R[f"ddp_{name}_grad_devices"] = sorted(grad_devices)
    return R


def _mesh(dev, shape=None, names=None):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("flagos", shape or (dist.get_world_size(),), mesh_dim_names=names)


def fsdp2(dev: torch.device) -> dict:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    r = dist.get_rank()
    R = {}
    mesh = _mesh(dev)
    for name, mp in (("fp32", None), ("bf16", MixedPrecisionPolicy(param_dtype=torch.bfloat16))):
        model = make_net().to(dev)
        kwargs = {"mesh": mesh} if mp is None else {"mesh": mesh, "mp_policy": mp}
        fully_shard(model.fc1, **kwargs)
        fully_shard(model, **kwargs)
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        for step in range(STEPS):
            opt.zero_grad()
            x, y = batch(r, step)
            loss_of(model(x.to(dev)), y.to(dev)).backward()
            opt.step()
        R[f"fsdp2_{name}"] = {k: v.full_tensor().cpu() for k, v in model.state_dict().items()}
        R[f"fsdp2_{name}_local_device"] = model.fc1.weight.to_local().device.type
    return R


def dtensor(dev: torch.device) -> dict:
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    w = dist.get_world_size()
    mesh = _mesh(dev)
    torch.manual_seed(5)
    a, b = torch.randn(2 * w, 3), torch.randn(3, 4)
    da = distribute_tensor(a.to(dev), mesh, [Shard(0)])
    db = distribute_tensor(b.to(dev), mesh, [Replicate()])
    R = {
        "dtensor_local_device": da.to_local().device.type,
        "dtensor_add": (da + 1).full_tensor().cpu(),
        "dtensor_mm": (da @ db).full_tensor().cpu(),
        "dtensor_sum": da.sum().full_tensor().cpu(),
        "dtensor_redistribute": da.redistribute(mesh, [Replicate()]).to_local().cpu(),
        "dtensor_shard1": distribute_tensor(a.to(dev), mesh, [Shard(1)])
        .redistribute(mesh, [Shard(0)])
        .to_local()
        .cpu(),
    }
    if w == 4:
        mesh2 = _mesh(dev, (2, 2), ("dp", "tp"))
        x = torch.full((3,), float(dist.get_rank()), device=dev)
        dist.all_reduce(x, group=mesh2.get_group("tp"))
        R["mesh2d_tp_all_reduce"] = x.cpu()
        d2 = distribute_tensor(a.to(dev), mesh2, [Shard(0), Replicate()])
        R["mesh2d_dtensor"] = (d2 * 2).full_tensor().cpu()
    return R


def dcp(dev: torch.device, out: pathlib.Path) -> dict:
    import torch.distributed.checkpoint as dcp_api
    from torch.distributed.fsdp import fully_shard

    mesh = _mesh(dev)
    model = make_net(seed=3).to(dev)
    fully_shard(model, mesh=mesh)
    saved = {k: v.full_tensor().cpu() for k, v in model.state_dict().items()}
    path = out / "dcp"
    dcp_api.save({"model": model.state_dict(), "extra": torch.arange(4, device=dev)}, checkpoint_id=str(path))
    fresh = make_net(seed=4).to(dev)
    fully_shard(fresh, mesh=mesh)
    state = {"model": fresh.state_dict(), "extra": torch.zeros(4, dtype=torch.int64, device=dev)}
    dcp_api.load(state, checkpoint_id=str(path))
    fresh.load_state_dict(state["model"])
    loaded = {k: v.full_tensor().cpu() for k, v in fresh.state_dict().items()}
    return {
        "dcp_saved": saved,
        "dcp_loaded": loaded,
        "dcp_extra": state["extra"].cpu(),
        "dcp_extra_device": state["extra"].device.type,
    }


def split(dev: torch.device) -> dict:
    r, w = dist.get_rank(), dist.get_world_size()
    halves = [list(range(0, w // 2)), list(range(w // 2, w))] if w > 1 else [[0]]
    group = dist.split_group(split_ranks=halves)
    x = torch.full((2,), float(r + 1), device=dev)
    dist.all_reduce(x, group=group)
    return {"split_group_all_reduce": x.cpu(), "split_group_size": group.size()}
