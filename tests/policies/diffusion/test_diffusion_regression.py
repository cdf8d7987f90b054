"""Numerics regression: tiny stored policies must reproduce their stored outputs (see make_regression_artifact.py for
what is stored and when to regenerate it)."""

import pytest
import safetensors.torch
import torch
from make_regression_artifact import ARTIFACT_DIR, EXPECTED_FILE, compute_outputs, load_regression_policy

VARIANTS = ["image", "state"]
# (rtol, atol). Network outputs: float summation order only (threads, BLAS / oneDNN kernels). Sampled actions are in
# pixels of the 512 x 512 workspace: denoising from pure noise amplifies rounding-level differences of the conditioning
# (another conv kernel for the ResNet moves the image variant's DDIM-5 actions by ~0.3 px), while a change of the
# sampler or schedule (no clipping, other betas) moves them by hundreds of px.
TOLERANCES = {
    "global_cond": (1e-4, 1e-5),
    "unet_output": (1e-4, 1e-5),
    "loss": (1e-4, 1e-6),
    "actions_ddpm": (0.0, 1.0),
    "actions_ddim": (0.0, 1.0),
}


def test_artifact_is_small_and_complete():
    files = sorted(p.relative_to(ARTIFACT_DIR).as_posix() for p in ARTIFACT_DIR.rglob("*") if p.is_file())
    assert files == [f"{v}/{name}" for v in VARIANTS for name in ("config.json", EXPECTED_FILE, "model.safetensors")]
    assert sum((ARTIFACT_DIR / f).stat().st_size for f in files) < 1_000_000


@pytest.mark.parametrize("variant", VARIANTS)
def test_stored_policy_reproduces_stored_outputs(variant):
    expected = safetensors.torch.load_file(str(ARTIFACT_DIR / variant / EXPECTED_FILE))
    policy = load_regression_policy(ARTIFACT_DIR / variant)
    assert (policy.config.image_features != {}) == (variant == "image")
    actual = compute_outputs(policy)
    assert sorted(actual) == sorted(expected)
    for name, value in expected.items():
        rtol, atol = TOLERANCES[name]
        torch.testing.assert_close(actual[name], value, rtol=rtol, atol=atol, msg=lambda m, n=name: f"{n}: {m}")
    # The outputs are informative: sampling and the loss depend on the inputs, DDPM and DDIM differ.
    assert not torch.allclose(expected["actions_ddpm"], expected["actions_ddim"])
    assert expected["loss"] > 0 and torch.isfinite(expected["loss"])
