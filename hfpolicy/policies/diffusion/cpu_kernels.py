"""Which CPU kernels the 1D U-Net's convolutions run: `use_cpu_matmul_convolutions(unet)` turns every nn.Conv1d /
nn.ConvTranspose1d of a module into the subclasses below (same parameters and state dict, so the model code uses
plain torch layers and reads like the paper), and `set_cpu_kernels(module, choice)` picks their kernels:

- "matmul": each convolution runs as one matrix multiply over unfolded windows (Conv1d) or one matrix multiply
  followed by col2im (ConvTranspose1d). For wide channels and short sequences (2048 channels x 4 steps) it beats
  oneDNN's and the fallback kernels on an AVX2 machine, forward and backward, and loses to torch's own kernels on a
  machine with AVX-512 + AMX (docs/speed.md#cpu-kernels-of-the-u-net has the figures).
- "torch": PyTorch's own kernels; they round as LeRobot's implementation does (bit-identical actions), which is why
  policies converted from LeRobot start with this choice.
- "auto" (the default): measured on the machine where it runs. The first call of each layer shape times both
  kernels (interleaved, median of CALIBRATION_ROUNDS) and keeps "matmul" only where it is at least MATMUL_MARGIN
  faster; the choices are cached in $HFPOLICY_CACHE/cpu_kernels/ (default ~/.cache/hfpolicy), one JSON file per CPU
  model + instruction set + torch version + thread count, so that later runs on that machine use the same kernels
  (and so round alike). Training (gradients on) is measured per batch size, forward + backward; acting (no
  gradients) once per layer shape at PER_EPISODE_ROW_BLOCK batch rows, and used for every batch size, because
  per-episode acting needs every batch to use one kernel per layer (see `hfpolicy.policies.action_selection`).
  Inside torch.compile nothing is looked up or timed: "matmul" (what the cpu recipe was tuned with; see COMPILED_DEFAULT).

The choice is a property of the running policy, not of its weights: it is not in the config (`policy.
set_cpu_kernels(...)` switches it at any time). Results agree with torch's kernels up to float rounding. Other
devices (cuDNN) and other settings (groups, dilation, padding modes, output_size) run torch's own kernels.
"""

import functools
import hashlib
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F  # noqa: N812
from filelock import FileLock
from torch import Tensor, nn

from hfpolicy.io.atomic import write_json_atomically
from hfpolicy.policies.action_selection import PER_EPISODE_ROW_BLOCK

KERNEL_CHOICES = ("auto", "matmul", "torch")
CALIBRATION_ROUNDS = 3  # timed runs per kernel (after one warm-up each), interleaved
MATMUL_MARGIN = 0.9  # "auto" keeps the matmul kernel only where it takes at most this fraction of torch's time
# Inside torch.compile: the kernel the cpu recipe's compiled step was tuned with. Nothing is looked up or timed there:
# the cache lookup (a string key, functools.cache, os.stat) broke the graph and recompiled the lookup per layer shape
# until dynamo's recompile limit (8) was hit in the first step of a compiled tiny DP.
COMPILED_DEFAULT = "matmul"
# The few-rows branch of _matmul_weight; per-episode acting never reaches it: its smallest batch (PER_EPISODE_ROW_BLOCK
# rows) times the deepest U-Net level's length (horizon 16 / 4 = 4) is this many rows.
FEW_ROWS = 4 * PER_EPISODE_ROW_BLOCK


def use_cpu_matmul_convolutions(module: nn.Module, choice: str = "auto") -> nn.Module:
    """In place: every nn.Conv1d / nn.ConvTranspose1d inside `module` gets the kernel `choice` (see the module doc)."""
    for child in module.modules():
        if type(child) is nn.Conv1d:
            child.__class__ = MatmulConv1d
        elif type(child) is nn.ConvTranspose1d:
            child.__class__ = MatmulConvTranspose1d
    return set_cpu_kernels(module, choice)


def set_cpu_kernels(module: nn.Module, choice: str) -> nn.Module:
    """Sets the kernel choice ("auto", "matmul" or "torch") of every switchable convolution inside `module`."""
    if choice not in KERNEL_CHOICES:
        raise ValueError(f"cpu kernels {choice!r} is not a choice; use one of {KERNEL_CHOICES}")
    for child in module.modules():
        if isinstance(child, MatmulConv1d | MatmulConvTranspose1d):
            child.cpu_kernels = choice
    return module


class _ChoosesKernel(nn.modules.conv._ConvNd):
    """What both convolutions share: which kernel runs a call."""

    cpu_kernels: str = "auto"

    def _kernel_for(self, x: Tensor, plain: Callable[[Tensor], Tensor], matmul: Callable[[Tensor], Tensor]) -> str:
        if self.cpu_kernels != "auto":
            return self.cpu_kernels
        if torch.compiler.is_compiling():
            return COMPILED_DEFAULT
        training = torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad)
        rows = x.shape[0] if training else PER_EPISODE_ROW_BLOCK
        key = (
            f"{type(self).__name__} in={self.in_channels} out={self.out_channels} k={self.kernel_size[0]} "
            f"stride={self.stride[0]} pad={self.padding[0]} bias={self.bias is not None} length={x.shape[2]} "
            f"batch={rows} {'train' if training else 'act'} {str(x.dtype).removeprefix('torch.')}"
        )
        cached = KERNEL_CACHE.get(key)
        if cached is not None:
            return cached
        sample = x.detach()[:1].expand(rows, *x.shape[1:]).contiguous() if rows != x.shape[0] else x.detach()
        choice = calibrate(sample, self, {"torch": plain, "matmul": matmul}, training)
        return KERNEL_CACHE.set(key, choice)

    def _number_padding(self) -> int:
        """The padding, a number: a string padding ("same") never reaches the matmul kernel (see `forward`)."""
        return cast(tuple[int, ...], self.padding)[0]


def calibrate(x: Tensor, layer: _ChoosesKernel, kernels: dict[str, Callable[[Tensor], Tensor]], training: bool) -> str:
    """The faster kernel for input `x`: forward (and, when training, backward to the input and weights, without
    touching .grad) timed interleaved; "matmul" only if it is faster than "torch" by MATMUL_MARGIN."""

    def run(kernel: Callable[[Tensor], Tensor]) -> None:
        if not training:
            with torch.no_grad():
                kernel(x)
            return
        inputs = x.detach().requires_grad_()
        out = kernel(inputs)
        torch.autograd.grad(out, [inputs, layer.weight], torch.ones_like(out))

    times: dict[str, list[float]] = {name: [] for name in kernels}
    for kernel in kernels.values():
        run(kernel)  # warm-up
    for _ in range(CALIBRATION_ROUNDS):
        for name, kernel in kernels.items():
            start = time.perf_counter()
            run(kernel)
            times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(values) for name, values in times.items()}
    return "matmul" if medians["matmul"] <= MATMUL_MARGIN * medians["torch"] else "torch"


class MatmulConv1d(_ChoosesKernel, nn.Conv1d):
    """nn.Conv1d that, on CPU, may run as one matrix multiply over unfolded windows (see `cpu_kernels`)."""

    def forward(self, x: Tensor) -> Tensor:
        if (
            x.device.type != "cpu"
            or x.ndim != 3
            or self.groups != 1
            or self.dilation != (1,)
            or self.padding_mode != "zeros"
            or isinstance(self.padding, str)
            or self.cpu_kernels == "torch"
        ):
            return super().forward(x)
        if self._kernel_for(x, super().forward, self._matmul_forward) == "torch":
            return super().forward(x)
        return self._matmul_forward(x)

    def _matmul_forward(self, x: Tensor) -> Tensor:
        batch, in_channels, _ = x.shape
        out_channels, _, kernel = self.weight.shape
        if padding := self._number_padding():
            x = F.pad(x, (padding, padding))
        windows = x.unfold(2, kernel, self.stride[0])  # (B, C_in, L_out, kernel)
        length = windows.shape[2]
        windows = windows.transpose(1, 2).reshape(batch * length, in_channels * kernel)
        out = _matmul_weight(windows, self.weight.reshape(out_channels, in_channels * kernel), self.bias)
        return out.view(batch, length, out_channels).transpose(1, 2)


class MatmulConvTranspose1d(_ChoosesKernel, nn.ConvTranspose1d):
    """nn.ConvTranspose1d that, on CPU, may run as one matrix multiply followed by col2im (F.fold)."""

    def forward(self, x: Tensor, output_size: list[int] | None = None) -> Tensor:
        if (
            x.device.type != "cpu"
            or x.ndim != 3
            or output_size is not None
            or self.groups != 1
            or self.dilation != (1,)
            or self.output_padding != (0,)
            or self.padding_mode != "zeros"
            or self.cpu_kernels == "torch"
        ):
            return super().forward(x, output_size)
        if self._kernel_for(x, super().forward, self._matmul_forward) == "torch":
            return super().forward(x)
        return self._matmul_forward(x)

    def _matmul_forward(self, x: Tensor) -> Tensor:
        batch, in_channels, length = x.shape
        _, out_channels, kernel = self.weight.shape
        rows = x.transpose(1, 2).reshape(batch * length, in_channels)
        columns = _matmul_weight(rows, self.weight.reshape(in_channels, out_channels * kernel).t(), None)
        columns = columns.view(batch, length, out_channels * kernel).transpose(1, 2)  # (B, C_out * kernel, L)
        (stride,), padding = self.stride, self._number_padding()
        out_length = (length - 1) * stride - 2 * padding + kernel
        out = F.fold(columns, (1, out_length), (1, kernel), stride=(1, stride), padding=(0, padding)).squeeze(2)
        return out if self.bias is None else out + self.bias[:, None]


def _matmul_weight(rows: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """rows (M, K) @ weight (N, K).T + bias -> (M, N). With few rows (acting with small batches) the product is
    computed as weight @ rows.T, which MKL streams through the weights ~1.3x faster. Below FEW_ROWS rows only, which
    per-episode acting (batches padded to PER_EPISODE_ROW_BLOCK rows) never reaches, so it rounds as larger batches."""
    if rows.shape[0] < FEW_ROWS:
        out = weight @ rows.t() if bias is None else torch.addmm(bias[:, None], weight, rows.t())
        return out.t()
    weight = weight.t()
    return rows @ weight if bias is None else torch.addmm(bias, rows, weight)


def machine_key() -> str:
    """CPU model, instruction-set flags (hashed), torch version and intra-op threads: what the kernels' speed and
    rounding depend on."""
    return f"{_cpu_identity()} torch-{torch.__version__} threads-{torch.get_num_threads()}"


@functools.cache
def _cpu_identity() -> str:
    """The CPU model and a hash of its flags, read once per process (every layer call asks for the machine key)."""
    model, flags = platform.processor() or platform.machine(), ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() == "model name" and not flags:
                model = value.strip()
            elif name.strip() == "flags":
                flags = value.strip()
                break
    return f"{model} flags-{hashlib.sha256(flags.encode()).hexdigest()[:8]}"


class KernelCache:
    """The measured choices of this machine: {layer key: "matmul" | "torch"}, read once from its JSON file and
    written back (atomically, under a file lock) after each new measurement. The first process to record a layer's
    choice decides it for every process of the machine: two runs measuring at once (a run and its resume, or the
    processes of a launch) could otherwise pick different kernels, and their results would differ in the last bits."""

    def __init__(self):
        self._choices: dict[str, str] | None = None
        self._machine: str | None = None

    def path(self) -> Path:
        cache = Path(os.environ.get("HFPOLICY_CACHE", Path.home() / ".cache" / "hfpolicy"))
        name = "".join(c if c.isalnum() or c in "-." else "_" for c in machine_key())
        return cache / "cpu_kernels" / f"{name}.json"

    def _load(self) -> dict[str, str]:
        machine = machine_key()
        if self._choices is None or self._machine != machine:  # thread count changed: other measurements
            self._machine, self._choices = machine, {}
            try:
                data: Any = json.loads(self.path().read_text())
                if isinstance(data, dict) and isinstance(data.get("choices"), dict):
                    self._choices = {k: v for k, v in data["choices"].items() if v in ("matmul", "torch")}
            except (OSError, ValueError):
                pass  # none yet, or unreadable: measure again
        return self._choices

    def get(self, key: str) -> str | None:
        return self._load().get(key)

    def set(self, key: str, choice: str) -> str:
        """Records `choice` for `key` unless another process recorded one first; returns the choice that holds."""
        choices = self._load()
        path = self.path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(path.with_name(path.name + ".lock")):
                self._choices = None  # what other processes recorded since this one read the file
                choices = {**choices, **self._load()}
                choice = choices.setdefault(key, choice)
                write_json_atomically(path, {"machine": self._machine, "choices": choices})
        except OSError:  # a read-only cache: the choice still holds for this process
            choices[key] = choice
        self._choices = choices
        return choice

    def clear(self) -> None:
        """Forgets the in-memory choices (the file is read again at the next call)."""
        self._choices = None


KERNEL_CACHE = KernelCache()
