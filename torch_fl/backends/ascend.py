"""ascend: Ascend ACLNN kernels. Recognised, not implemented in this build.

torch_npu owns the PrivateUse1 slot itself, so an Ascend backing needs its own
runtime over ACL; until then routing to `ascend` gives the
unavailable-backend behaviour: fall back to native with a warning, or an
error under FLAGOS_STRICT=1.
"""

from __future__ import annotations

from torch_fl.backends.base import Backend


class AscendBackend(Backend):
    name = "ascend"
    description = "Ascend ACLNN kernels (planned)"

    def unavailable_reason(self) -> str | None:
        return "the Ascend backend is planned but not part of this build (no ACL runtime); route the op elsewhere"

    def supported_ops(self) -> frozenset[str]:
        return frozenset()
