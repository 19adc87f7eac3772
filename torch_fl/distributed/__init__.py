"""torch.distributed on flagos: the "flagos" process-group backend (docs/distributed.md).

`import torch_fl` registers it; then `torch.distributed.init_process_group()` picks it for flagos
tensors, and DDP, FSDP2, DeviceMesh, DTensor and torch.distributed.checkpoint run on flagos over
NCCL (CUDA backing) or gloo (host memory).

- `tensors.py`: flagos tensors as their native aliases
- `inner.py`: the gloo / NCCL engines of a group
- `process_group.py`: FlagosProcessGroup, every collective mapped onto an inner ProcessGroup
- `registration.py`: Backend.register_backend
- `checkpoint_staging.py`: DCP's writer stages flagos tensors to the host (also over CUDA)
"""

from torch_fl.distributed.process_group import BACKEND_NAME, FlagosProcessGroup
from torch_fl.distributed.registration import register

__all__ = ["BACKEND_NAME", "FlagosProcessGroup", "register"]
