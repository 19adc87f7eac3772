"""Device monitoring read from the driver (NVML, as nvidia-smi shows it).

Only a CUDA backing has such counters; on host backing these raise, except
device_memory_used, which is the host's used memory.
"""

from __future__ import annotations

import os

from torch_fl.flagos._device import Device, _host_total_memory, _index, cuda_function, needs_cuda_backing, on_cuda

_HOST_WHY = "host memory has no GPU driver counters (NVML) to read"


def _nvml(name: str, device: Device):
    idx = _index(device)
    if not on_cuda():
        raise needs_cuda_backing(name, _HOST_WHY)
    return cuda_function(name)(idx)


def utilization(device: Device = None) -> int:
    """Percent of the last sample period in which a kernel ran on the device."""
    return _nvml("utilization", device)


def memory_usage(device: Device = None) -> int:
    """Percent of the last sample period in which device memory was read or written."""
    return _nvml("memory_usage", device)


def temperature(device: Device = None) -> int:
    """The GPU's temperature in degrees Celsius."""
    return _nvml("temperature", device)


def power_draw(device: Device = None) -> int:
    """The GPU's power draw in milliwatts."""
    return _nvml("power_draw", device)


def clock_rate(device: Device = None) -> int:
    """The GPU's streaming multiprocessor clock in MHz."""
    return _nvml("clock_rate", device)


def list_gpu_processes(device: Device = None) -> str:
    """The processes using the GPU and their memory, as nvidia-smi lists them."""
    return _nvml("list_gpu_processes", device)


def device_memory_used(device: Device = None) -> int:
    """Bytes of device memory in use by all processes (nvidia-smi's); host backing: the host's used memory."""
    idx = _index(device)
    if on_cuda():
        return cuda_function("device_memory_used")(idx)
    return _host_total_memory() - os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
