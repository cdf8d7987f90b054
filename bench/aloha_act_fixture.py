"""A LeRobot 0.6.1 ACT checkpoint with ALOHA features, and the actions LeRobot computes from gym-aloha observations.

Two steps, one per venv (LeRobot's venv has no gym-aloha; hfpolicy's has no LeRobot):

    python bench/aloha_act_fixture.py observe OUT                 # hfpolicy's venv: gym-aloha's own env, seeds 5, 6
    LEROBOT_VENV/bin/python bench/aloha_act_fixture.py make OUT   # LeRobot's venv: checkpoint + reference

`observe` writes OUT/gym_aloha_observations.safetensors: the reset observations of `gym_aloha/AlohaTransferCube-v0`
(obs_type pixels_agent_pos) for seeds 5 and 6, as LeRobot's eval receives them from a vector env
(`pixels.top` (2, 480, 640, 3) uint8, `agent_pos` (2, 14) float64), and their seeds. `make` builds a small ACT
(ResNet18 backbone without pretrained weights, chunk 10, synthetic stats) with LeRobot's ALOHA features
(observation.images.top (3, 480, 640), observation.state (14,), action (14,)), takes 2 optimizer steps so that no
weight is at its initialization, saves it as lerobot-train does (OUT/pretrained_model: policy + pre/post-processors),
and writes OUT/reference.safetensors: the action chunk LeRobot gives those observations through its own pipeline
(lerobot.envs.utils.preprocess_observation -> preprocessor -> predict_action_chunk -> postprocessor), with the seeds.
The test tests/policies/act/test_act_aloha_lerobot.py reads OUT from $HFPOLICY_ACT_ALOHA_FIXTURE (47 MB, not stored).
"""

import argparse
import json
import os
import sys
from pathlib import Path

SEEDS = [5, 6]
OBSERVATIONS_FILE = "gym_aloha_observations.safetensors"


def observe(out: Path) -> None:
    os.environ.setdefault("MUJOCO_GL", "egl")  # headless (gym-aloha would otherwise try GLFW, which needs a display)
    import gym_aloha  # noqa: F401 (registers gym_aloha/AlohaTransferCube-v0)
    import gymnasium as gym
    import numpy as np
    import torch
    from safetensors.torch import save_file

    tops, states = [], []
    for seed in SEEDS:
        env = gym.make("gym_aloha/AlohaTransferCube-v0", obs_type="pixels_agent_pos")
        observation, _ = env.reset(seed=seed)
        tops.append(observation["pixels"]["top"])
        states.append(observation["agent_pos"])
        env.close()
    out.mkdir(parents=True, exist_ok=True)
    tensors = {
        "pixels.top": torch.from_numpy(np.stack(tops)),
        "agent_pos": torch.from_numpy(np.stack(states)),
        "seeds": torch.tensor(SEEDS),
    }
    save_file(tensors, str(out / OBSERVATIONS_FILE))
    print(json.dumps({"out": str(out / OBSERVATIONS_FILE), "seeds": SEEDS}))


def make(out: Path) -> None:
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.envs.utils import preprocess_observation
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors
    from safetensors.torch import load_file, save_file

    raw = load_file(str(out / OBSERVATIONS_FILE))
    torch.manual_seed(0)
    image, state, action = "observation.images.top", "observation.state", "action"
    inputs = {image: PolicyFeature(FeatureType.VISUAL, (3, 480, 640)), state: PolicyFeature(FeatureType.STATE, (14,))}
    outputs = {action: PolicyFeature(FeatureType.ACTION, (14,))}
    cfg = ACTConfig(
        input_features=inputs,
        output_features=outputs,
        chunk_size=10,
        n_action_steps=10,
        pretrained_backbone_weights=None,
        device="cpu",
        dim_model=64,
        n_heads=4,
        dim_feedforward=128,
        n_encoder_layers=2,
        n_decoder_layers=1,
        n_vae_encoder_layers=1,
        latent_dim=8,
    )
    g = torch.Generator().manual_seed(1)

    def rnd(*shape, lo=0.0, hi=1.0):
        return lo + (hi - lo) * torch.rand(*shape, generator=g)

    joints_mean, joints_std = rnd(14, lo=-0.5, hi=0.5), rnd(14, lo=0.1, hi=0.6)
    stats = {
        image: {
            "mean": rnd(3, 1, 1, lo=0.2, hi=0.5),
            "std": rnd(3, 1, 1, lo=0.1, hi=0.3),
            "min": torch.zeros(3, 1, 1),
            "max": torch.ones(3, 1, 1),
        },
    }
    for key in (state, action):
        stats[key] = {"mean": joints_mean, "std": joints_std, "min": joints_mean - 2, "max": joints_mean + 2}
    policy = ACTPolicy(cfg)
    pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    policy.train()
    for _ in range(2):
        batch = {image: rnd(2, 3, 480, 640), state: rnd(2, 14, lo=-1, hi=1)}
        batch[action] = rnd(2, cfg.chunk_size, 14, lo=-1, hi=1)
        batch["action_is_pad"] = torch.zeros(2, cfg.chunk_size, dtype=torch.bool)
        loss, _ = policy.forward(pre(batch))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    policy.eval()
    folder = out / "pretrained_model"
    policy.save_pretrained(folder)
    pre.save_pretrained(folder)
    post.save_pretrained(folder)

    observation = {"pixels": {"top": raw["pixels.top"].numpy()}, "agent_pos": raw["agent_pos"].numpy()}
    with torch.no_grad():
        chunk = post(policy.predict_action_chunk(pre(preprocess_observation(observation))))
    save_file({"actions": chunk.contiguous(), "seeds": raw["seeds"]}, str(out / "reference.safetensors"))
    print(json.dumps({"out": str(out), "actions": list(chunk.shape)}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["observe", "make"])
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    (observe if args.step == "observe" else make)(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
