"""How close hfpolicy's actions must come to references that LeRobot computed on another machine.

A stored reference is exact only on the CPU kind it was computed on: float32 reductions run in another order with other
vector widths (AVX2 against AVX-512 + AMX), and denoising from noise amplifies those last bits. On an AVX-512 machine
LeRobot 0.6.1 itself misses its own Diffusion Policy references by 1.6e-4 (image) and 4.8e-4 (state) on actions of
~500 units, and hfpolicy gives the very same numbers there; an absolute 1e-4 was a bitwise test for one CPU kind.

The tolerance is therefore relative to the reference's scale: RELATIVE x max|reference| (~2.5e-3 on PushT's 0..512
pixel actions), five times the worst cross-CPU difference measured. What it must still catch: a wrong normalization
mode or stat, a permuted input or action dimension, a missed clip, a wrong scheduler -- each moves actions by whole
units (tests/policies/test_lerobot_format.py checks that other noise moves them by more than 1e-2 x scale).
"""

import torch

RELATIVE = 5e-6


def reference_tolerance(reference: torch.Tensor) -> float:
    """The largest absolute error allowed against `reference` (at least 1e-6, for references near zero)."""
    return max(RELATIVE * reference.abs().max().item(), 1e-6)


def assert_matches_reference(actual: torch.Tensor, reference: torch.Tensor) -> None:
    assert actual.shape == reference.shape, (actual.shape, reference.shape)
    error, tolerance = (actual - reference).abs().max().item(), reference_tolerance(reference)
    assert error <= tolerance, f"max |error| {error:.3g} > {tolerance:.3g} (scale {reference.abs().max().item():.3g})"
