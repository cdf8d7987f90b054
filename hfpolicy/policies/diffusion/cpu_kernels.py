"""Faster CPU kernels for the 1D U-Net's convolutions, switched on by `DiffusionConfig.fast_kernels` (default True):
`use_cpu_matmul_convolutions(unet)` turns every nn.Conv1d / nn.ConvTranspose1d in a module into the subclass below,
with the same parameters and state dict, so the model code uses plain torch layers and reads like the paper.

On CPU each convolution runs as one matrix multiply over unfolded windows (Conv1d) or one matrix multiply followed by
col2im (ConvTranspose1d). For the U-Net's wide channels and short sequences (2048 channels x 4 steps) oneDNN's and the
fallback convolution kernels are 1.5-3x slower than one GEMM on 2 CPU cores, forward and backward, and the fallback
transposed convolution reads its weights ~5x slower than memory allows. Results agree with torch's kernels up to float
rounding, which is why policies converted from LeRobot set fast_kernels=False (bit-identical actions). Other devices
(cuDNN) and other settings (groups, dilation, padding modes, output_size) run torch's own kernels.
"""

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn


def use_cpu_matmul_convolutions(module: nn.Module) -> nn.Module:
    """In place: every nn.Conv1d / nn.ConvTranspose1d inside `module` computes as a matrix multiply on CPU."""
    for child in module.modules():
        if type(child) is nn.Conv1d:
            child.__class__ = MatmulConv1d
        elif type(child) is nn.ConvTranspose1d:
            child.__class__ = MatmulConvTranspose1d
    return module


class MatmulConv1d(nn.Conv1d):
    """nn.Conv1d that, on CPU, runs as one matrix multiply over unfolded windows."""

    def forward(self, x: Tensor) -> Tensor:
        if (
            x.device.type != "cpu"
            or x.ndim != 3
            or self.groups != 1
            or self.dilation != (1,)
            or self.padding_mode != "zeros"
            or isinstance(self.padding, str)
        ):
            return super().forward(x)
        batch, in_channels, _ = x.shape
        out_channels, _, kernel = self.weight.shape
        if self.padding[0]:
            x = F.pad(x, (self.padding[0], self.padding[0]))
        windows = x.unfold(2, kernel, self.stride[0])  # (B, C_in, L_out, kernel)
        length = windows.shape[2]
        windows = windows.transpose(1, 2).reshape(batch * length, in_channels * kernel)
        out = _matmul_weight(windows, self.weight.reshape(out_channels, in_channels * kernel), self.bias)
        return out.view(batch, length, out_channels).transpose(1, 2)


class MatmulConvTranspose1d(nn.ConvTranspose1d):
    """nn.ConvTranspose1d that, on CPU, runs as one matrix multiply followed by col2im (F.fold)."""

    def forward(self, x: Tensor, output_size: list[int] | None = None) -> Tensor:
        if (
            x.device.type != "cpu"
            or x.ndim != 3
            or output_size is not None
            or self.groups != 1
            or self.dilation != (1,)
            or self.output_padding != (0,)
            or self.padding_mode != "zeros"
        ):
            return super().forward(x, output_size)
        batch, in_channels, length = x.shape
        _, out_channels, kernel = self.weight.shape
        rows = x.transpose(1, 2).reshape(batch * length, in_channels)
        columns = _matmul_weight(rows, self.weight.reshape(in_channels, out_channels * kernel).t(), None)
        columns = columns.view(batch, length, out_channels * kernel).transpose(1, 2)  # (B, C_out * kernel, L)
        (stride,), (padding,) = self.stride, self.padding
        out_length = (length - 1) * stride - 2 * padding + kernel
        out = F.fold(columns, (1, out_length), (1, kernel), stride=(1, stride), padding=(0, padding)).squeeze(2)
        return out if self.bias is None else out + self.bias[:, None]


def _matmul_weight(rows: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """rows (M, K) @ weight (N, K).T + bias -> (M, N). With few rows (acting with small batches) the product is
    computed as weight @ rows.T, which MKL streams through the weights ~1.3x faster. Below 64 rows only: per-episode
    acting pads batches to multiples of 16 (Policy.PER_EPISODE_ROW_BLOCK), whose deepest U-Net level has 64 rows, and must round
    as larger batches do."""
    if rows.shape[0] < 64:
        out = weight @ rows.t() if bias is None else torch.addmm(bias[:, None], weight, rows.t())
        return out.t()
    weight = weight.t()
    return rows @ weight if bias is None else torch.addmm(bias, rows, weight)
