"""GPUs through NVML: one query function, utilization sampled over a window.

``query_gpus`` (utilization, memory, processes: the snapshot) and ``gpu_inventory``
(models, driver, CUDA driver, compute capability: a bundle's env.json) are the only
places diag calls NVML, and both open it through ``_open_nvml``, so a missing library or
driver reads the same ``Unavailable(reason)`` everywhere. It reads each GPU's name, UUID and
memory once, samples utilization ``samples`` times ``interval_s`` apart (one reading says
little: an NCCL kernel spinning reads 100%, an idle rank 0%), and maps per-process GPU
memory (``nvmlDeviceGetComputeRunningProcesses``) to pids. No NVML library, no driver or
no GPU gives ``Unavailable(reason)`` and the snapshot goes on. ``CUDA_VISIBLE_DEVICES``
(of diag's own environment) limits the GPUs reported to the ones it names.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from diag.model import GpuSample, Unavailable

__all__ = ["GpuQuery", "gpu_inventory", "parse_visible_devices", "query_gpus"]


@dataclass(frozen=True, slots=True)
class GpuQuery:
    gpus: tuple[GpuSample, ...]
    elapsed_s: float


def parse_visible_devices(value: str | None) -> list[str] | None:
    """``"0,2"`` -> ["0", "2"]; ``"GPU-ab12,..."`` keeps UUIDs; unset -> None (all GPUs)."""
    if value is None:
        return None
    items = [v.strip() for v in value.split(",")]
    out: list[str] = []
    for item in items:
        if not item or item == "-1":
            break  # CUDA stops at the first invalid entry
        out.append(item)
    return out


def _selected(index: int, uuid: str | Unavailable, visible: list[str] | None) -> bool:
    if visible is None:
        return True
    for v in visible:
        if v.isdigit() and int(v) == index:
            return True
        if isinstance(uuid, str) and not v.isdigit() and uuid.startswith(v):
            return True
    return False


def _err(nvml: Any, exc: Exception) -> str:
    try:
        return str(nvml.nvmlErrorString(exc.value)) if hasattr(exc, "value") else str(exc)
    except Exception:
        return str(exc)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _open_nvml(nvml: ModuleType | Any | None) -> ModuleType | Any | Unavailable:
    """NVML, initialised (the caller shuts it down), or why not."""
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return Unavailable("pynvml is not installed (pip install nvidia-ml-py)")
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return Unavailable(f"NVML not available: {_err(nvml, exc)} (no NVIDIA driver or GPU)")
    return nvml


def _try(nvml: Any, fn: Any) -> Any:
    try:
        return fn()
    except Exception as exc:
        return Unavailable(_err(nvml, exc))


def gpu_inventory(*, nvml: ModuleType | Any | None = None) -> dict[str, object] | Unavailable:
    """What the GPUs are: driver and CUDA driver versions, and per device its name, total
    memory and compute capability (every field its own ``Unavailable`` when NVML refuses
    it)."""
    opened = _open_nvml(nvml)
    if isinstance(opened, Unavailable):
        return opened
    nv = opened
    try:
        info: dict[str, object] = {
            "driver": _try(nv, lambda: _text(nv.nvmlSystemGetDriverVersion()))
        }
        cuda = _try(nv, lambda: int(nv.nvmlSystemGetCudaDriverVersion()))
        info["cuda_driver"] = (f"{cuda // 1000}.{cuda % 1000 // 10}"
                               if isinstance(cuda, int) else cuda)
        devices: list[object] = []
        for index in range(int(nv.nvmlDeviceGetCount())):
            h = _try(nv, lambda i=index: nv.nvmlDeviceGetHandleByIndex(i))
            if isinstance(h, Unavailable):
                devices.append({"index": index, "unavailable": h.reason})
                continue
            cc = _try(nv, lambda h=h: nv.nvmlDeviceGetCudaComputeCapability(h))
            devices.append({
                "index": index,
                "name": _try(nv, lambda h=h: _text(nv.nvmlDeviceGetName(h))),
                "memory_total_bytes": _try(
                    nv, lambda h=h: int(nv.nvmlDeviceGetMemoryInfo(h).total)
                ),
                "compute_capability": (
                    f"{cc[0]}.{cc[1]}" if isinstance(cc, (tuple, list)) and len(cc) == 2 else cc
                ),
            })
        info["devices"] = devices
        return info
    except Exception as exc:
        return Unavailable(f"NVML query failed: {_err(nv, exc)}")
    finally:
        with contextlib.suppress(Exception):
            nv.nvmlShutdown()


def query_gpus(
    *,
    samples: int = 5,
    interval_s: float = 0.1,
    nvml: ModuleType | Any | None = None,
    visible_devices: str | None = None,
    use_env: bool = True,
) -> GpuQuery | Unavailable:
    """Every (visible) GPU with utilization sampled over ``samples`` readings."""
    start = time.monotonic()
    opened = _open_nvml(nvml)
    if isinstance(opened, Unavailable):
        return opened
    nvml = opened
    if visible_devices is None and use_env:
        visible_devices = os.environ.get("CUDA_VISIBLE_DEVICES")
    visible = parse_visible_devices(visible_devices)
    try:
        count = int(nvml.nvmlDeviceGetCount())
        handles: list[tuple[int, Any, str | Unavailable, str | Unavailable]] = []
        for i in range(count):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            uuid: str | Unavailable
            name: str | Unavailable
            try:
                uuid = _text(nvml.nvmlDeviceGetUUID(h))
            except Exception as exc:
                uuid = Unavailable(_err(nvml, exc))
            if not _selected(i, uuid, visible):
                continue
            try:
                name = _text(nvml.nvmlDeviceGetName(h))
            except Exception as exc:
                name = Unavailable(_err(nvml, exc))
            handles.append((i, h, name, uuid))
        if not handles:
            return Unavailable(
                "NVML found no GPU"
                if count == 0
                else f"no GPU matches CUDA_VISIBLE_DEVICES={visible_devices}"
            )
        util: dict[int, list[float]] = {i: [] for i, *_ in handles}
        util_err: dict[int, str] = {}
        for n in range(max(1, samples)):
            if n:
                time.sleep(interval_s)
            for i, h, _, _ in handles:
                if i in util_err:
                    continue
                try:
                    util[i].append(float(nvml.nvmlDeviceGetUtilizationRates(h).gpu))
                except Exception as exc:
                    util_err[i] = _err(nvml, exc)
        out: list[GpuSample] = []
        for i, h, name, uuid in handles:
            used: int | Unavailable
            total: int | Unavailable
            try:
                mem = nvml.nvmlDeviceGetMemoryInfo(h)
                used, total = int(mem.used), int(mem.total)
            except Exception as exc:
                used = total = Unavailable(_err(nvml, exc))
            procs: dict[int, int] = {}
            try:
                for p in nvml.nvmlDeviceGetComputeRunningProcesses(h):
                    mem_used = getattr(p, "usedGpuMemory", None)
                    procs[int(p.pid)] = int(mem_used) if isinstance(mem_used, int) else 0
            except Exception:
                pass  # per-process memory is not supported everywhere (e.g. vGPU / MIG)
            readings = util[i]
            mean: float | Unavailable
            peak: float | Unavailable
            if readings:
                mean = round(sum(readings) / len(readings), 1)
                peak = max(readings)
            else:
                mean = peak = Unavailable(util_err.get(i, "no utilization reading"))
            out.append(
                GpuSample(
                    index=i,
                    name=name,
                    uuid=uuid,
                    util_percent_mean=mean,
                    util_percent_max=peak,
                    memory_used_bytes=used,
                    memory_total_bytes=total,
                    samples=len(readings),
                    processes=procs,
                )
            )
        return GpuQuery(tuple(out), round(time.monotonic() - start, 3))
    except Exception as exc:
        return Unavailable(f"NVML query failed: {_err(nvml, exc)}")
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
