"""`hfpolicy info` and `hfpolicy --version`: what this is and what it runs on (to paste into a bug report)."""

import os
import platform
from dataclasses import dataclass

import hfpolicy

# The libraries whose versions decide how hfpolicy behaves (torch is described on its own line part).
KEY_LIBRARIES = (
    "torchvision",
    "accelerate",
    "huggingface_hub",
    "diffusers",
    "datasets",
    "safetensors",
    "gymnasium",
    "gym-pusht",
    "draccus",
    "numpy",
    "av",
)


@dataclass
class InfoConfig:
    """`hfpolicy info` takes no flags."""


def library_version(name: str) -> str:
    import importlib.metadata  # ~80 ms: imported here, so that every command's start (which imports this) skips it

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def torch_description() -> str:
    """torch's version, its build (CPU or CUDA) and the accelerator found here."""
    import torch

    build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU build"
    if torch.cuda.is_available():
        found = f"{torch.cuda.device_count()} GPU(s): {torch.cuda.get_device_name(0)}"
    elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        found = "Apple MPS"
    else:
        found = "no GPU found here"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"torch {torch.__version__} ({build}; {found}; {cores} CPU cores)"


def environment_report() -> str:
    """Three lines: hfpolicy, Python and the platform, torch and the key libraries."""
    libraries = ", ".join(f"{name} {library_version(name)}" for name in KEY_LIBRARIES)
    return "\n".join(
        [
            f"hfpolicy {hfpolicy.__version__} (learn robot policies from demonstrations; {hfpolicy.__file__})",
            f"Python {platform.python_version()}, {platform.platform()}",
            f"{torch_description()}, {libraries}",
        ]
    )


def info_command(config: InfoConfig) -> str:
    """`hfpolicy info`: the environment report."""
    del config
    return environment_report()
