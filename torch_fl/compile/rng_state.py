"""torch.flagos's RNG-state functions run eagerly under torch.compile, as torch.cuda's do.

Dynamo breaks the graph at torch.cuda's RNG getters and setters and calls them outside it (its trace rules
name them): they read or change generator state, which no traced operator carries. torch.flagos's are Python
functions of a third-party package, which Dynamo traces into, reaching `Generator.set_state` with a fake
tensor (torch.testing's freeze_rng_state, which OpInfos of random operators use, calls them around compiled
code). Once Dynamo is imported, torch.flagos's are replaced by `torch._dynamo.disable`d versions of
themselves: Dynamo breaks the graph there and runs them eagerly. Before that nothing can trace them, and
eager programs that never compile pay nothing.
"""

from __future__ import annotations

NAMES = (
    "get_rng_state",
    "set_rng_state",
    "get_rng_state_all",
    "set_rng_state_all",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "initial_seed",
)


def install(dynamo) -> None:
    """Replace torch.flagos's RNG-state functions by versions Dynamo runs eagerly (idempotent)."""
    from torch_fl import flagos

    for name in NAMES:
        fn = getattr(flagos, name)
        if not getattr(fn, "_flagos_eager", False):
            eager = dynamo.disable(fn, recursive=True)
            eager._flagos_eager = True
            setattr(flagos, name, eager)
