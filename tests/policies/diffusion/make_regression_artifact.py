"""Regenerates tests/policies/diffusion/regression/: tiny Diffusion Policies and their outputs on fixed inputs, which
test_regression.py compares against, so that any silent change of the numerics fails a test.

When to run it: ONLY after an intended change of Diffusion Policy's numerics (architecture, initialization-independent
math, noise schedule, sampler, normalization, crop), never to make a failing regression test pass without knowing why
it failed. Say in the commit message what changed and why the new outputs are right. Run from the repository root:

    .venv/bin/python tests/policies/diffusion/make_regression_artifact.py

Per variant (image: 96x96 pixels + agent position; state: agent position + environment state) it writes
`<variant>/config.json`, `<variant>/model.safetensors` and `<variant>/expected.safetensors`. The image variant's
ResNet18 weights (11 M values, 44 MB) are not stored: both this script and the test fill them with
`fill_backbone_deterministically` (a fixed formula, no RNG); everything else is stored. Inputs are RNG-free formulas
(`diffusion_setup.wave`); the sampled actions use a torch.Generator seeded with SAMPLING_SEED. Total size < 1 MB.
"""

import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

import safetensors.torch
import torch
from diffusion_setup import observation_window, pusht_stats, training_batch, wave

from hfpolicy.constants import CONFIG_FILE, OBS_ENV_STATE, OBS_IMAGE, OBS_STATE, WEIGHTS_FILE
from hfpolicy.policies import FeatureType, PolicyConfig, PolicyFeature
from hfpolicy.policies.diffusion import DiffusionConfig, DiffusionPolicy

ARTIFACT_DIR = Path(__file__).resolve().parent / "regression"
EXPECTED_FILE = "expected.safetensors"
BATCH_SIZE = 3
SAMPLING_SEED = 1234
DDIM_STEPS = 5
INIT_SEED = 0
TINY_NET = dict(
    n_obs_steps=2,
    horizon=8,
    n_action_steps=4,
    down_dims=(16, 32),
    n_groups=4,
    kernel_size=5,
    diffusion_step_embed_dim=16,
    spatial_softmax_num_keypoints=4,
    num_train_timesteps=20,
)


def regression_configs() -> dict[str, DiffusionConfig]:
    action = {"action": PolicyFeature(FeatureType.ACTION, (2,))}
    image_inputs = {
        OBS_IMAGE: PolicyFeature(FeatureType.IMAGE, (3, 96, 96)),
        OBS_STATE: PolicyFeature(FeatureType.STATE, (2,)),
    }
    state_inputs = {
        OBS_STATE: PolicyFeature(FeatureType.STATE, (2,)),
        OBS_ENV_STATE: PolicyFeature(FeatureType.STATE, (16,)),
    }
    return {
        "image": DiffusionConfig(input_features=image_inputs, output_features=action, **TINY_NET),
        "state": DiffusionConfig(input_features=state_inputs, output_features=action, **TINY_NET),
    }


def backbone_keys(policy: DiffusionPolicy) -> list[str]:
    return [name for name in policy.state_dict() if ".backbone." in name]


@torch.no_grad()
def fill_backbone_deterministically(policy: DiffusionPolicy) -> None:
    """Sets every ResNet weight from a formula: conv weights ~ sin waves scaled by 1/sqrt(fan_in), norm affines near
    (1, 0). The network computes as with trained weights; only the values are synthetic."""
    state = policy.state_dict(keep_vars=True)
    for i, name in enumerate(backbone_keys(policy)):
        tensor = state[name]
        base = wave(tuple(tensor.shape), phase=float(i))  # in [-1, 1]
        if tensor.ndim > 1:
            fan_in = math.prod(tensor.shape[1:])
            tensor.copy_(base * math.sqrt(6.0 / fan_in))
        elif name.endswith("weight"):
            tensor.copy_(1.0 + 0.1 * base)
        else:
            tensor.copy_(0.1 * base)


def load_regression_policy(variant_dir: Path) -> DiffusionPolicy:
    """The stored policy: from_pretrained for the state variant; config + backbone formula + stored weights for the
    image variant (strictly: the stored keys must be exactly the model's non-backbone keys)."""
    config_data = json.loads((variant_dir / CONFIG_FILE).read_text())
    config = PolicyConfig.from_dict(config_data)
    if not config.image_features:
        return DiffusionPolicy.from_pretrained(variant_dir)
    policy = DiffusionPolicy(config)
    fill_backbone_deterministically(policy)
    stored = safetensors.torch.load_file(str(variant_dir / WEIGHTS_FILE))
    expected_keys = set(policy.state_dict()) - set(backbone_keys(policy))
    if set(stored) != expected_keys:
        raise AssertionError(
            f"stored weights do not fit the model: missing {sorted(expected_keys - set(stored))}, "
            f"unexpected {sorted(set(stored) - expected_keys)}"
        )
    policy.load_state_dict(stored, strict=False)
    return policy.eval()


@torch.no_grad()
def compute_outputs(policy: DiffusionPolicy) -> dict[str, torch.Tensor]:
    """The quantities the regression test compares, all from RNG-free inputs except the seeded sampling noise."""
    config = policy.config
    policy.eval()
    batch = training_batch(config, BATCH_SIZE, phase=0.25)
    normalized = policy.normalizer.normalize(batch)
    noise = wave((BATCH_SIZE, config.horizon, 2), phase=3.0, low=-2.0, high=2.0)
    timesteps = torch.tensor([0, config.num_train_timesteps // 2, config.num_train_timesteps - 1])
    global_cond = policy.encode_observations(normalized)
    noisy = policy.noise_scheduler.add_noise(normalized["action"], noise, timesteps)
    outputs = {
        "global_cond": global_cond,
        "unet_output": policy.unet(noisy, timesteps, global_cond),
        "loss": policy.compute_loss(normalized, noise=noise, timesteps=timesteps)["loss"],
    }
    observation = observation_window(config, BATCH_SIZE, phase=0.5)
    policy.noise_generator = torch.Generator().manual_seed(SAMPLING_SEED)
    outputs["actions_ddpm"] = policy.predict_action_chunk(observation)
    sampler = (config.noise_scheduler_type, config.num_inference_steps)
    policy.set_sampler("DDIM", DDIM_STEPS)
    policy.noise_generator = torch.Generator().manual_seed(SAMPLING_SEED)
    outputs["actions_ddim"] = policy.predict_action_chunk(observation)
    policy.set_sampler(*sampler)
    return {name: value.detach().clone().contiguous() for name, value in outputs.items()}


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix=".regression-", dir=ARTIFACT_DIR.parent))
    try:
        for variant, config in regression_configs().items():
            torch.manual_seed(INIT_SEED)
            policy = DiffusionPolicy(config, dataset_stats=pusht_stats())
            if config.image_features:
                fill_backbone_deterministically(policy)
            out = tmp / variant
            policy.save_pretrained(out)
            if config.image_features:  # keep the artifact small: drop the formula-filled ResNet weights
                kept = {k: v for k, v in policy.state_dict().items() if k not in set(backbone_keys(policy))}
                safetensors.torch.save_file({k: v.contiguous() for k, v in kept.items()}, str(out / WEIGHTS_FILE))
            (out / "README.md").unlink(missing_ok=True)  # the model card save_pretrained adds: not needed here
            reloaded = load_regression_policy(out)
            outputs = compute_outputs(reloaded)
            safetensors.torch.save_file(outputs, str(out / EXPECTED_FILE))
            print(f"{variant}: " + ", ".join(f"{k} {tuple(v.shape)}" for k, v in outputs.items()))
        for path in [tmp, *tmp.rglob("*")]:  # mkdtemp makes private files; these go into git
            path.chmod(0o755 if path.is_dir() else 0o644)
        total = sum(f.stat().st_size for f in tmp.rglob("*") if f.is_file())
        if total > 1_000_000:
            raise RuntimeError(f"the regression artifact would be {total} bytes; keep it under 1 MB")
        old = ARTIFACT_DIR.with_name(f".{ARTIFACT_DIR.name}.old-{os.getpid()}")
        if ARTIFACT_DIR.exists():
            os.replace(ARTIFACT_DIR, old)
        os.replace(tmp, ARTIFACT_DIR)
        shutil.rmtree(old, ignore_errors=True)
        print(f"wrote {ARTIFACT_DIR} ({total / 1e3:.0f} kB)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
