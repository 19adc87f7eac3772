"""RNG. flagos:i has a default generator of its own (on flagos:i). On a CUDA
backing it draws from cuda:i's default generator, so a seeded model built on
flagos equals one built on cuda:i; on host backing each virtual device has an
independent CPU-algorithm generator, so one built on flagos:i equals one built
on the CPU with the same seed (torch.manual_seed seeds them all)."""

from __future__ import annotations

import torch

from torch_fl._core import _C
from torch_fl.flagos._device import _index, device_count, on_cuda


def default_generators() -> tuple[torch.Generator, ...]:
    if on_cuda():
        torch.cuda.init()  # cuda:i's default generator exists after CUDA's lazy init
    return tuple(_C._default_generator(i) for i in range(device_count()))


def _generator(device=None) -> torch.Generator:
    return default_generators()[_index(device)]


def manual_seed(seed: int) -> None:
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for g in default_generators():
        g.manual_seed(int(seed))


def seed() -> None:
    _generator().seed()


def seed_all() -> None:
    s = _generator().seed()
    for g in default_generators():
        g.manual_seed(s)


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device="flagos") -> torch.Tensor:
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device="flagos") -> None:
    _generator(device).set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [g.get_state() for g in default_generators()]


def set_rng_state_all(new_states) -> None:
    for g, s in zip(default_generators(), new_states, strict=True):
        g.set_state(s)
