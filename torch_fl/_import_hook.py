"""Run a callback right after a module is imported, without importing it ahead of time.

Registering flagos with Dynamo and inductor needs their modules, and importing them costs more than a second;
`import torch_fl` must not pay that. So the registration waits for the first import of the module it needs
(torch.compile imports it) and runs then, before anything could ask for flagos.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

_LOCK = threading.RLock()
_PENDING: dict[str, list[Callable[[object], None]]] = {}


class _Loader:
    """Wraps the module's own loader: executes the module, then runs the callbacks waiting for it."""

    def __init__(self, inner, name: str):
        self._inner = inner
        self._name = name

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        with _LOCK:
            callbacks = _PENDING.pop(self._name, [])
        for callback in callbacks:
            callback(module)

    def __getattr__(self, name):  # get_source, get_code, ... as the real loader has them
        return getattr(self._inner, name)


class _Finder:  # a meta path finder (importlib.abc would cost an import here)
    def find_spec(self, fullname, path, target=None):
        if fullname not in _PENDING:
            return None
        # Find the real spec with the other finders; this one stays out of the way while they look.
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, fullname)
                return spec
        return None


_FINDER = _Finder()


def when_imported(name: str, callback: Callable[[object], None]) -> None:
    """Call `callback(module)` once `name` is imported: now if it already is, else right after its import."""
    with _LOCK:
        module = sys.modules.get(name)
        if module is None:
            _PENDING.setdefault(name, []).append(callback)
            if _FINDER not in sys.meta_path:
                sys.meta_path.insert(0, _FINDER)
            return
    callback(module)
