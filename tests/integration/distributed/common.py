"""What the distributed workers and the tests' single-process references share: the model, the data
of each rank and step, the training loops' constants."""

from __future__ import annotations

import torch

STEPS = 3
LR = 0.1
FEATURES, HIDDEN, CLASSES = 4, 8, 3


class Net(torch.nn.Module):
    """A small MLP with a branch that only some ranks use (for find_unused_parameters)."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(FEATURES, HIDDEN)
        self.fc2 = torch.nn.Linear(HIDDEN, CLASSES)
        self.branch = torch.nn.Linear(FEATURES, CLASSES)

    def forward(self, x, use_branch: bool = False):
        y = self.fc2(torch.relu(self.fc1(x)))
        return y + self.branch(x) if use_branch else y


def make_net(seed: int = 0) -> Net:
    torch.manual_seed(seed)
    return Net()


def batch(rank: int, step: int, micro: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + 100 * micro + rank)
    return torch.randn(5, FEATURES, generator=g), torch.randint(0, CLASSES, (5,), generator=g)


def uses_branch(variant: str, rank: int, step: int) -> bool:
    """With find_unused_parameters rank 0 uses the branch on even steps only and the others never;
    without, every rank uses it at every step (DDP requires that)."""
    if variant.startswith("find_unused"):
        return rank == 0 and step % 2 == 0
    return True


def loss_of(out, target):
    return torch.nn.functional.cross_entropy(out, target)


def rank_tensor(rank: int, k: int = 0, n: int = 6) -> torch.Tensor:
    return torch.arange(n, dtype=torch.float32) + 10 * rank + k
