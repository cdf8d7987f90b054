"""Which CPU kernels the 1D U-Net's convolutions run. `use_cpu_matmul_convolutions(unet)` turns every nn.Conv1d /
nn.ConvTranspose1d into the subclasses below (same parameters and state dict), and `set_cpu_kernels(module, choice)`
picks their kernels: "matmul" (one matrix multiply over unfolded windows, or followed by col2im), "onednn" (acting only:
oneDNN with weights packed once), "torch" (PyTorch's own, rounding as LeRobot's) or "auto" (timed per layer shape on
this machine, cached in $HFPOLICY_CACHE/cpu_kernels/ per CPU, torch version and thread count). `set_acting_dtype`
makes acting run oneDNN with bf16 weights. The choice belongs to the running policy, not its weights or config; how
"auto" measures, and the figures: docs/speed.md#cpu-kernels-of-the-u-net.
"""

import functools
import hashlib
import json
import os
import platform
import statistics
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F  # noqa: N812
from filelock import FileLock
from torch import Tensor, nn

from hfpolicy.io.atomic import write_json_atomically
from hfpolicy.policies.action_selection import PER_EPISODE_ROW_BLOCK

KERNEL_CHOICES = ("auto", "matmul", "onednn", "torch")
KERNELS = ("torch", "matmul", "onednn")  # what a layer call runs; "torch" first: the reference the others must beat
ACTING_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
CALIBRATION_ROUNDS = 3  # timed runs per kernel (after one warm-up each), interleaved
MATMUL_MARGIN = 0.9  # "auto" keeps another kernel than torch's only where it takes at most this fraction of its time
# Inside torch.compile nothing is looked up or timed (the cache lookup broke the graph): "auto" runs this kernel.
COMPILED_DEFAULT = "matmul"
# Below this many rows _matmul_weight multiplies the other way round; per-episode acting (16 rows x the deepest
# U-Net level's length 4) never goes below it.
FEW_ROWS = 4 * PER_EPISODE_ROW_BLOCK
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})  # /proc/cpuinfo flags of native bf16 dot products


def use_cpu_matmul_convolutions(module: nn.Module) -> nn.Module:
    """In place: every nn.Conv1d / nn.ConvTranspose1d inside `module` becomes switchable (kernel choice "auto")."""
    for child in module.modules():
        if type(child) is nn.Conv1d:
            child.__class__ = MatmulConv1d
        elif type(child) is nn.ConvTranspose1d:
            child.__class__ = MatmulConvTranspose1d
    return module


def set_cpu_kernels(module: nn.Module, choice: str) -> nn.Module:
    """Sets the kernel choice (one of KERNEL_CHOICES) of every switchable convolution inside `module`."""
    if choice not in KERNEL_CHOICES:
        raise ValueError(f"cpu kernels {choice!r} is not a choice; use one of {KERNEL_CHOICES}")
    for child in _switchable(module):
        child.cpu_kernels = choice
        if choice in ("matmul", "torch"):
            _PACKED.pop(child, None)
    return module


def set_acting_dtype(module: nn.Module, dtype: str, force: bool = False) -> nn.Module:
    """The dtype the switchable convolutions inside `module` act in on CPU: "float32" (their kernel choice) or
    "bfloat16" (oneDNN with bf16 weights; refused on a CPU without native bf16 unless `force`)."""
    if dtype not in ACTING_DTYPES:
        raise ValueError(f"acting dtype {dtype!r} is not a choice; use one of {tuple(ACTING_DTYPES)}")
    if dtype == "bfloat16":
        if not onednn_available() or not torch.ops.mkldnn._is_mkldnn_bf16_supported():
            raise ValueError(
                "acting dtype 'bfloat16' needs oneDNN's bf16 kernels, which this CPU or PyTorch build lacks (PyTorch "
                "runs them with AVX-512 or AVX-NE-CONVERT); act in float32"
            )
        if not native_bf16() and not force:
            raise ValueError(
                "acting dtype 'bfloat16': this CPU has no native bf16 (AVX512-BF16 or AMX in /proc/cpuinfo), where "
                "oneDNN emulates it slowly; act in float32, or pass force=True"
            )
    for child in _switchable(module):
        child.acting_dtype = ACTING_DTYPES[dtype]
        _PACKED.pop(child, None)
    return module


def _switchable(module: nn.Module) -> list["_ChoosesKernel"]:
    return [child for child in module.modules() if isinstance(child, MatmulConv1d | MatmulConvTranspose1d)]


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and bool(torch.backends.mkldnn.enabled)


# Per layer: (what the weights were packed from, the packed weight, the bias in dtype). Kept beside the layers so that
# a deepcopy or state dict of the policy never sees them.
_PACKED: "weakref.WeakKeyDictionary[nn.Module, tuple[tuple, Tensor, Tensor | None]]" = weakref.WeakKeyDictionary()


class _ChoosesKernel(nn.modules.conv._ConvNd):
    """What both convolutions share: which kernel runs a call, and the oneDNN-packed weights."""

    cpu_kernels: str = "auto"
    acting_dtype: torch.dtype = torch.float32

    def train(self, mode: bool = True):
        if mode:
            _PACKED.pop(self, None)  # training changes the weights: no second copy while it runs
        return super().train(mode)

    def _kernel_for(self, x: Tensor, kernels: dict[str, Callable[[Tensor], Tensor]]) -> str:
        """The kernel of this call. "auto" times them once per layer key (KERNEL_CACHE): training per batch size,
        "torch" against "matmul"; acting below PER_EPISODE_ROW_BLOCK rows per batch size, all three; acting with more
        once at PER_EPISODE_ROW_BLOCK rows, so that per-episode acting runs one kernel per layer whatever the batch."""
        choice = self.cpu_kernels
        if torch.compiler.is_compiling():  # nothing looked up, packed or timed (bf16 acting too runs in float32)
            return {"auto": COMPILED_DEFAULT, "onednn": "torch"}.get(choice, choice)
        training = torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad)
        if not training and self.acting_dtype != torch.float32:
            return "onednn"
        if choice == "onednn":
            return "torch" if training or not onednn_available() else "onednn"
        if choice != "auto":
            return choice
        few_rows = not training and x.shape[0] < PER_EPISODE_ROW_BLOCK
        rows = x.shape[0] if training or few_rows else PER_EPISODE_ROW_BLOCK
        key = (
            f"{type(self).__name__} in={self.in_channels} out={self.out_channels} k={self.kernel_size[0]} "
            f"stride={self.stride[0]} pad={self.padding[0]} bias={self.bias is not None} length={x.shape[2]} "
            f"batch={rows} {'train' if training else 'act'} {str(x.dtype).removeprefix('torch.')}"
        )
        cached = KERNEL_CACHE.get(key)
        if cached is not None:
            return cached
        if not (few_rows and onednn_available() and x.dtype == torch.float32):
            kernels = {name: kernels[name] for name in ("torch", "matmul")}
        sample = x.detach()[:1].expand(rows, *x.shape[1:]).contiguous() if rows != x.shape[0] else x.detach()
        choice = calibrate(sample, self, kernels, training)
        if choice != "onednn":
            _PACKED.pop(self, None)  # packed while timing it
        return KERNEL_CACHE.set(key, choice)

    def _number_padding(self) -> int:
        """The padding as a number: a string padding ("same") never reaches the matmul kernel (see `forward`)."""
        return cast(tuple[int, ...], self.padding)[0]

    def _packed(self, x: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor | None]:
        """The weight reordered for oneDNN (as a height-1 2D convolution) and the bias, in `dtype`; made again when the
        weights change."""
        weight = self.weight
        source = (dtype, weight.data_ptr(), weight._version, None if self.bias is None else self.bias._version)
        packed = _PACKED.get(self)
        if packed is not None and packed[0] == source:
            return packed[1], packed[2]
        _PACKED.pop(self, None)  # the old copy goes before the new one is made
        with torch.no_grad():
            dense = weight.detach().to(dtype).unsqueeze(2)  # (C, C', 1, kernel)
            geometry = self._onednn_geometry()
            size = [x.shape[0], x.shape[1], 1, x.shape[2]]
            reorder = torch.ops.mkldnn._reorder_convolution_weight
            if isinstance(self, nn.ConvTranspose1d):
                reorder = torch.ops.mkldnn._reorder_convolution_transpose_weight
            packed_weight = reorder(dense, *geometry, 1, size)
            bias = None if self.bias is None else self.bias.detach().to(dtype)
        _PACKED[self] = (source, packed_weight, bias)
        return packed_weight, bias

    def _onednn_geometry(self) -> list[list[int]]:
        """padding, (output_padding,) stride, dilation of the equivalent height-1 2D convolution."""
        padding, stride = [0, self._number_padding()], [1, self.stride[0]]
        if isinstance(self, nn.ConvTranspose1d):
            return [padding, [0, 0], stride, [1, 1]]
        return [padding, stride, [1, 1]]

    def _onednn_forward(self, x: Tensor) -> Tensor:
        dtype = self.acting_dtype
        weight, bias = self._packed(x, dtype)
        x4 = x.to(dtype).unsqueeze(2).contiguous()
        convolution = torch.ops.mkldnn._convolution_pointwise
        if isinstance(self, nn.ConvTranspose1d):
            convolution = torch.ops.mkldnn._convolution_transpose_pointwise
        out = convolution(x4, weight, bias, *self._onednn_geometry(), 1, "none", [], "")
        return out.squeeze(2).to(x.dtype)


def calibrate(x: Tensor, layer: _ChoosesKernel, kernels: dict[str, Callable[[Tensor], Tensor]], training: bool) -> str:
    """The fastest kernel for `x` (forward, and backward when training), timed interleaved; another than "torch" only
    if it beats it by MATMUL_MARGIN."""

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
        run(kernel)  # warm-up (and the oneDNN kernel's packing)
    for _ in range(CALIBRATION_ROUNDS):
        for name, kernel in kernels.items():
            start = time.perf_counter()
            run(kernel)
            times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(values) for name, values in times.items()}
    fastest = min((name for name in medians if name != "torch"), key=medians.__getitem__)
    return fastest if medians[fastest] <= MATMUL_MARGIN * medians["torch"] else "torch"


class MatmulConv1d(_ChoosesKernel, nn.Conv1d):
    """nn.Conv1d that, on CPU, may run as one matrix multiply over unfolded windows or as oneDNN with packed weights."""

    def forward(self, x: Tensor) -> Tensor:
        if (
            x.device.type != "cpu"
            or x.ndim != 3
            or self.groups != 1
            or self.dilation != (1,)
            or self.padding_mode != "zeros"
            or isinstance(self.padding, str)
            or (self.cpu_kernels == "torch" and self.acting_dtype == torch.float32)
        ):
            return super().forward(x)
        kernels = {"torch": super().forward, "matmul": self._matmul_forward, "onednn": self._onednn_forward}
        return kernels[self._kernel_for(x, kernels)](x)

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
    """nn.ConvTranspose1d that, on CPU, may run as a matrix multiply and col2im (F.fold) or as oneDNN with packed
    weights."""

    def forward(self, x: Tensor, output_size: list[int] | None = None) -> Tensor:
        if (
            x.device.type != "cpu"
            or x.ndim != 3
            or output_size is not None
            or self.groups != 1
            or self.dilation != (1,)
            or self.output_padding != (0,)
            or self.padding_mode != "zeros"
            or (self.cpu_kernels == "torch" and self.acting_dtype == torch.float32)
        ):
            return super().forward(x, output_size)
        kernels: dict[str, Callable[[Tensor], Tensor]] = {
            "torch": super().forward,
            "matmul": self._matmul_forward,
            "onednn": self._onednn_forward,
        }
        return kernels[self._kernel_for(x, kernels)](x)

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
    """rows (M, K) @ weight (N, K).T + bias -> (M, N); below FEW_ROWS rows as weight @ rows.T, which MKL streams
    through the weights ~1.3x faster."""
    if rows.shape[0] < FEW_ROWS:
        out = weight @ rows.t() if bias is None else torch.addmm(bias[:, None], weight, rows.t())
        return out.t()
    weight = weight.t()
    return rows @ weight if bias is None else torch.addmm(bias, rows, weight)


def machine_key() -> str:
    """CPU model, a hash of its flags, torch version and threads: what the kernels' speed and rounding depend on."""
    model, flags = _cpuinfo()
    flags_hash = hashlib.sha256(flags.encode()).hexdigest()[:8]
    return f"{model} flags-{flags_hash} torch-{torch.__version__} threads-{torch.get_num_threads()}"


@functools.cache
def _cpuinfo() -> tuple[str, str]:
    """The CPU model and its flags line (from /proc/cpuinfo where there is one), read once per process."""
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
    return model, flags


def cpu_flags() -> frozenset[str]:
    return frozenset(_cpuinfo()[1].split())


def instruction_sets() -> dict[str, bool]:
    """Which of the instruction sets that decide the CPU kernels' speed this CPU has."""
    flags = cpu_flags()
    return {
        "avx2": "avx2" in flags,
        "avx512": "avx512f" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        "amx": "amx_tile" in flags,
    }


def native_bf16() -> bool:
    return bool(cpu_flags() & NATIVE_BF16_FLAGS)


class KernelCache:
    """This machine's measured choices {layer key: kernel}, kept in a JSON file written under a file lock. The first
    process to record a layer's choice decides it for every process (so that concurrent runs round alike)."""

    def __init__(self):
        self._choices: dict[str, str] | None = None
        self._machine: str | None = None

    def path(self) -> Path:
        cache = Path(os.environ.get("HFPOLICY_CACHE", Path.home() / ".cache" / "hfpolicy"))
        name = "".join(c if c.isalnum() or c in "-." else "_" for c in machine_key())
        return cache / "cpu_kernels" / f"{name}.json"

    def _load(self) -> dict[str, str]:
        machine = machine_key()
        if self._choices is None or self._machine != machine:  # e.g. the thread count changed
            self._machine, self._choices = machine, {}
            try:
                data: Any = json.loads(self.path().read_text())
                if isinstance(data, dict) and isinstance(data.get("choices"), dict):
                    self._choices = {k: v for k, v in data["choices"].items() if v in KERNELS}
            except (OSError, ValueError):
                pass  # none yet, or unreadable: measure again
        return self._choices

    def get(self, key: str) -> str | None:
        return self._load().get(key)

    def set(self, key: str, choice: str) -> str:
        """Records `choice` unless another process recorded one first; returns the choice that holds."""
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
        """Forgets the in-memory choices: the file is read again."""
        self._choices = None


KERNEL_CACHE = KernelCache()
