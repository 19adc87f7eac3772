"""Is a FlagGems mismatch FlagGems' own or the route's? Same call three ways on the H200.

    python3 scripts/gpu_flaggems_diag.py    (carry .whl; see scripts/gpu_check.sh)

1. flag_gems' function on native CUDA tensors, 2. the same function through
torch_fl's flaggems route on flagos tensors, 3. native CUDA; for the cases the
per-op tests found wrong (mul broadcast / non-contiguous).
"""

import torch

import torch_fl  # noqa: F401
from torch_fl import routing
from torch_fl.backends import flaggems

flaggems.LOADER.load()
table = flaggems.LOADER.table
torch.manual_seed(0)
cases = {
    "broadcast": (torch.randn(4, 1, device="cuda"), torch.randn(1, 5, device="cuda")),
    "noncontig": (torch.randn(3, 8, device="cuda")[:, ::2], torch.randn(3, 8, device="cuda")[:, ::2]),
    "same": (torch.randn(4, 5, device="cuda"), torch.randn(4, 5, device="cuda")),
}
for op, native in (("mul.Tensor", torch.mul), ("add.Tensor", torch.add)):
    fn = table[op]
    print(op, "->", getattr(fn, "__module__", "?"), getattr(fn, "__qualname__", fn))
    for name, (a, b) in cases.items():
        ref = native(a, b)
        direct = fn(a, b)
        with routing.route({op: "flaggems"}):
            routed = native(a.to("flagos"), b.to("flagos")).cpu()
        print(
            f"  {name:10} native {tuple(ref.shape)} | flag_gems direct {tuple(direct.shape)} "
            f"equal={direct.shape == ref.shape and torch.allclose(direct, ref)} | routed {tuple(routed.shape)} "
            f"equal={routed.shape == ref.shape and torch.allclose(routed, ref.cpu())}"
        )
