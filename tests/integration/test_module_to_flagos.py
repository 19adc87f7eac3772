"""Module.to("flagos") keeps Parameter objects, so shared (tied) weights stay shared."""

import pytest
import torch

import torch_fl  # noqa: F401

pytestmark = pytest.mark.anyplatform


def test_module_to_keeps_parameter_identity():
    lin = torch.nn.Linear(3, 3)
    weight = lin.weight
    lin.to("flagos")
    assert lin.weight is weight
    assert lin.weight.device.type == "flagos"
    lin.to("cpu")
    assert lin.weight is weight and lin.weight.device.type == "cpu"


def test_tied_weights_stay_tied_and_get_both_gradients():
    emb = torch.nn.Embedding(10, 4)
    head = torch.nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    model = torch.nn.Sequential(emb, head)
    ids = torch.tensor([[1, 2, 3, 1]])
    ref = [p.detach().clone() for p in model.parameters()]

    model.to("flagos")
    assert head.weight is emb.weight
    assert len(list(model.parameters())) == 1
    model(ids.to("flagos")).square().sum().backward()
    grad = emb.weight.grad.cpu()

    cpu = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
    cpu[1].weight = cpu[0].weight
    with torch.no_grad():
        cpu[0].weight.copy_(ref[0])
    cpu(ids).square().sum().backward()
    torch.testing.assert_close(grad, cpu[0].weight.grad)


def test_param_data_assignment_across_devices():
    p = torch.nn.Parameter(torch.ones(2, 2))
    assert torch._has_compatible_shallow_copy_type(p, torch.zeros(2, device="flagos"))
    p.data = torch.full((2, 2), 3.0, device="flagos")
    assert p.device.type == "flagos" and p.cpu().eq(3).all()
