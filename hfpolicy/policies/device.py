"""The torch device a policy runs on (`--policy.device`), checked against what torch finds on this machine."""

import torch


def check_device(device: str) -> str:
    """`device` if torch can run on it here, else a ValueError naming --policy.device and the way out."""
    try:
        kind = torch.device(device).type
    except (RuntimeError, ValueError) as e:
        raise ValueError(f"--policy.device={device} is not a torch device ({e}): use cpu, cuda, cuda:1 or mps") from e
    available = {"cuda": torch.cuda.is_available, "mps": lambda: torch.backends.mps.is_available()}
    if kind in available and not available[kind]():
        raise ValueError(
            f"--policy.device={device}, but torch finds no {kind} device on this machine: use --policy.device=cpu "
            "(or leave it unset: cuda when available, else cpu)"
        )
    return device


def accelerator_device_options(device: str | None) -> dict[str, bool]:
    """The `Accelerator(...)` options that put training on `device` (None: accelerate's choice); an index (cuda:1) is
    refused, as accelerate gives each process its GPU by local rank."""
    if device is None:
        return {}
    kind = torch.device(check_device(device)).type
    if torch.device(device).index is not None:
        raise ValueError(
            f"--policy.device={device}: training gives each process its own GPU; choose the GPUs with "
            f"CUDA_VISIBLE_DEVICES (e.g. CUDA_VISIBLE_DEVICES=1) and pass --policy.device={kind}"
        )
    return {"cpu": kind == "cpu"}
