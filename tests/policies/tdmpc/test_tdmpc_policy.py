"""TD-MPC acting and its config: seeded planning is a function of each episode's seed alone (batch 1, 5 and 20 give
the same actions), reset() forgets the planner's warm start, each plan's action is executed n_action_repeats times,
the target network follows the weights by its EMA, the training window reads next.reward, and configs LeRobot cannot
express are refused naming their fields."""

import contextlib
import dataclasses

import pytest
import torch

from hfpolicy.cli.flags import error_in_flags
from hfpolicy.constants import ACTION, OBS_ENV_STATE, OBS_IMAGE, OBS_STATE, REWARD
from hfpolicy.field_errors import ConfigFieldError
from hfpolicy.policies import FeatureType, NormMode, PolicyFeature
from hfpolicy.policies.tdmpc import TDMPCConfig, TDMPCPolicy

SMALL = dict(  # the default structure, small enough for CPU tests
    latent_dim=8, mlp_dim=32, state_encoder_hidden_dim=16, image_encoder_hidden_dim=4, q_ensemble_size=3,
    n_gaussian_samples=24, n_pi_samples=6, n_elites=6, cem_iterations=3,
)  # fmt: skip
STATE_INPUTS = {
    OBS_STATE: PolicyFeature(FeatureType.STATE, (2,)),
    OBS_ENV_STATE: PolicyFeature(FeatureType.STATE, (16,)),
}
OUTPUTS = {ACTION: PolicyFeature(FeatureType.ACTION, (2,))}


def state_config(**overrides) -> TDMPCConfig:
    return TDMPCConfig(input_features=dict(STATE_INPUTS), output_features=dict(OUTPUTS), **{**SMALL, **overrides})


def stats() -> dict[str, dict[str, torch.Tensor]]:
    return {ACTION: {"min": torch.tensor([10.0, 20.0]), "max": torch.tensor([500.0, 480.0])}}


def trained_looking(policy: TDMPCPolicy) -> TDMPCPolicy:
    """Random weights everywhere (the reward and Q heads start at zero, which would make every plan's value equal)."""
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.normal_(0, 0.5)
    return policy.eval()


def observations(n: int, steps: int) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [{k: torch.rand(n, *f.shape, generator=generator) for k, f in STATE_INPUTS.items()} for _ in range(steps)]


def test_seeded_planning_does_not_depend_on_the_batch():
    """Row i's actions are a function of its observations and its seed alone: bitwise equal whether the row acts
    alone, in a batch of 5 or of 20, whatever the global RNG."""
    policy = trained_looking(TDMPCPolicy(state_config(), dataset_stats=stats()))
    n, steps = 20, 6  # 3 plans, each warm-starting the next
    obs, seeds = observations(n, steps), [1000 + i for i in range(n)]

    def act(rows: list[int]) -> torch.Tensor:
        policy.reset(seeds=[seeds[i] for i in rows])
        torch.manual_seed(len(rows))  # the global RNG must not matter
        return torch.stack([policy.select_action({k: v[rows] for k, v in o.items()}) for o in obs], 1)

    together = act(list(range(n)))
    assert torch.equal(act(list(range(5))), together[:5])
    for i in (0, 7, 19):
        assert torch.equal(act([i]), together[i : i + 1])
    assert torch.equal(together[:, 0], together[:, 1]) and not torch.equal(together[:, 0], together[:, 2])
    policy.reset()  # without seeds the noise comes from the global RNG: other actions
    assert not torch.equal(torch.stack([policy.select_action(o) for o in obs], 1), together)


def test_reset_forgets_the_planners_warm_start():
    policy = trained_looking(TDMPCPolicy(state_config(n_action_repeats=1), dataset_stats=stats()))
    obs = observations(3, 2)

    def first_action() -> torch.Tensor:
        policy.reset(seeds=[1, 2, 3])
        return policy.select_action(obs[1])

    fresh = first_action()
    policy.select_action(obs[0])  # another plan, whose mean would warm-start the next
    assert torch.equal(first_action(), fresh)  # reset() forgot it: the first plan again
    policy.reset(seeds=[1, 2, 3])
    policy.select_action(obs[0])
    warm = policy._plan_mean
    policy.reset(seeds=[1, 2, 3])
    policy._plan_mean = warm  # kept, the warm start gives another plan from the same draws
    assert not torch.equal(policy.select_action(obs[1]), fresh)


def test_planning_off_executes_pi_and_repeats_it():
    policy = trained_looking(TDMPCPolicy(state_config(use_mpc=False, n_action_repeats=3), dataset_stats=stats()))
    obs = observations(2, 6)
    policy.reset()
    actions = torch.stack([policy.select_action(o) for o in obs], 1)
    with torch.no_grad():
        z = policy.model.encode(policy.normalizer.normalize(obs[3]))
        expected = policy.normalizer.unnormalize(ACTION, policy.model.pi(z).clamp(-1, 1))
    assert torch.equal(actions[:, 3], expected) and torch.equal(actions[:, 3], actions[:, 5])
    assert not torch.equal(actions[:, 0], actions[:, 3])


def test_exploring_adds_seeded_noise_to_pi_and_floors_the_planners_std():
    """Exploring (online RL's collection only): pi's action plus noise of the exploration std from the episode's
    generator (use_mpc=false); with the planner, its std floored at the exploration std and noise of it on the
    executed action: more spread for a higher floor. Outside the block, acting is as before."""
    policy = trained_looking(TDMPCPolicy(state_config(use_mpc=False, n_action_repeats=1), dataset_stats=stats()))
    obs = observations(2, 1)[0]
    policy.reset()
    plain = policy.select_action(obs)
    policy.reset(seeds=[11, 12])
    with policy.exploring(0.4):
        explored = policy.select_action(obs)
    with torch.no_grad():
        z = policy.model.encode(policy.normalizer.normalize(obs))
        noise = torch.stack([torch.randn(1, 2, generator=torch.Generator().manual_seed(s))[0] for s in (11, 12)])
        expected = policy.normalizer.unnormalize(ACTION, (policy.model.pi(z) + 0.4 * noise).clamp(-1, 1))
    assert torch.allclose(explored, expected, atol=1e-5) and not torch.allclose(explored, plain)
    policy.reset()
    assert torch.equal(policy.select_action(obs), plain)  # nothing left of the exploration

    planner = trained_looking(TDMPCPolicy(state_config(n_action_repeats=1), dataset_stats=stats()))
    obs, seeds = observations(16, 1)[0], list(range(16))

    def act(std: float | None) -> torch.Tensor:
        planner.reset(seeds=seeds)
        with planner.exploring(std) if std is not None else contextlib.nullcontext():
            return planner.select_action(obs)

    unexplored = act(None)
    spread = {std: (act(std) - unexplored).abs().mean().item() for std in (0.0, 0.5, 1.5)}
    assert 0 < spread[0.0] < spread[0.5] < spread[1.5]
    assert torch.equal(act(0.5), act(0.5)) and torch.equal(act(None), unexplored)  # seeded, and gone after
    with pytest.raises(ValueError, match="exploration std must be >= 0"), planner.exploring(-1):
        pass


def test_target_network_follows_the_weights_by_its_ema():
    policy = TDMPCPolicy(state_config(target_model_momentum=0.9), dataset_stats=stats())
    target = dict(policy.target_model.named_parameters())
    assert all(torch.equal(p, target[n]) for n, p in policy.model.named_parameters())  # starts as a copy
    assert not any(p.requires_grad for p in target.values())
    assert {id(p) for p in policy.get_optim_params()}.isdisjoint(id(p) for p in target.values())
    before = {n: p.clone() for n, p in target.items()}
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(1.0)
    policy.after_optimizer_step()
    for name, p in policy.model.named_parameters():
        torch.testing.assert_close(target[name], 0.9 * before[name] + 0.1 * p)


def test_training_window_reads_rewards_and_every_frame_starts_a_sample():
    config = state_config(horizon=4)
    windows = config.delta_timestamps(fps=10)
    assert windows[OBS_STATE] == windows[OBS_ENV_STATE] == [0.0, 0.1, 0.2, 0.3, 0.4]
    assert windows[ACTION] == windows[REWARD] == [0.0, 0.1, 0.2, 0.3]
    assert config.drop_n_last_frames == 0
    with pytest.raises(ValueError, match="--policy.horizon=4"):
        config.check_window_fits([3])


@pytest.mark.parametrize(
    ("change", "flag"),
    [
        ({"n_obs_steps": 2}, "--policy.n_obs_steps=2 must be 1"),
        ({"input_features": {OBS_IMAGE: PolicyFeature(FeatureType.IMAGE, (3, 84, 96))}}, "square"),
        (
            {
                "input_features": {
                    "observation.images.top": PolicyFeature(FeatureType.IMAGE, (3, 84, 84)),
                    "observation.images.wrist": PolicyFeature(FeatureType.IMAGE, (3, 84, 84)),
                }
            },
            "one camera",
        ),
        ({"normalization_mapping": {"action": NormMode.MEAN_STD}}, "action to min_max"),
        ({"n_action_steps": 2}, "--policy.n_action_steps=2) needs --policy.n_action_repeats=1"),
        ({"input_features": {OBS_IMAGE: PolicyFeature(FeatureType.IMAGE, (3, 38, 38))}}, "39 pixels a side"),
    ],
)
def test_configs_lerobot_cannot_express_are_refused_by_name(change, flag):
    with pytest.raises(ConfigFieldError) as error:
        config = state_config()
        config = dataclasses.replace(config, **change)
        config.validate_features()
    assert flag in error_in_flags(error.value, TDMPCConfig, "policy.")
    assert "\n" not in str(error.value)


def test_image_and_state_inputs_train_and_act():
    inputs = {
        OBS_IMAGE: PolicyFeature(FeatureType.IMAGE, (3, 40, 40)),
        OBS_STATE: PolicyFeature(FeatureType.STATE, (4,)),
    }
    config = TDMPCConfig(
        input_features=inputs, output_features={ACTION: PolicyFeature(FeatureType.ACTION, (4,))}, **SMALL
    )
    policy = TDMPCPolicy(config, dataset_stats={ACTION: {"min": -torch.ones(4), "max": torch.ones(4)}})
    batch = {OBS_IMAGE: torch.rand(2, 6, 3, 40, 40), OBS_STATE: torch.rand(2, 6, 4), ACTION: torch.rand(2, 5, 4)}
    batch[REWARD] = torch.rand(2, 5, 1)
    policy(batch)["loss"].backward()
    assert policy.model.encoder.image[0].weight.grad.abs().sum() > 0
    policy.eval().reset(seeds=[0, 1])
    assert policy.select_action({k: v[:, 0] for k, v in batch.items() if k != ACTION}).shape == (2, 4)
