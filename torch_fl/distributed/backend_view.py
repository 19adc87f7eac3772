"""What `FlagosProcessGroup._get_backend(device)` hands PyTorch's Python code: the engine for that
device (gloo or NCCL), seen through a view that keeps flagos devices away from it.

PyTorch's Python side asks a group's backend for a device in a few places: `init_process_group(
device_id=...)` connects it eagerly, `split_group` splits a parent through it, and `new_group`
asks the default group's bound backend to "no-color split" on ranks outside a new group. A flagos
group makes subgroups as new groups of its own (`FlagosProcessGroup.split_group`), never by
splitting a communicator, so there is nothing for an outside rank to join; and eager connection is
the engine's, on the native device. Everything else is the engine's own attribute.
"""

from __future__ import annotations

from torch_fl.distributed.tensors import native_device


class BackendView:
    def __init__(self, group, engine):
        self._group = group
        self._engine = engine

    @property
    def supports_splitting(self) -> bool:
        return True  # FlagosProcessGroup.split_group makes the subgroup

    @property
    def options(self):
        """None: split_group deep-copies a parent's options for the child, which gloo's cannot be;
        FlagosProcessGroup.split_group gives the child its parent's options itself."""
        return None

    def perform_nocolor_split(self, device) -> None:
        """Nothing to do: subgroups are new groups, not splits of this group's communicators."""

    def eager_connect_single_device(self, device) -> None:
        # init_process_group(device_id=flagos:i) binds the group to that device (PyTorch records the
        # binding on the group object it replaced with ours, so it is recorded here).
        self._group.bound_device_id = device
        self._engine.eager_connect_single_device(native_device(device))

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def __repr__(self) -> str:
        return f"BackendView({self._engine!r})"
