"""The policy base class: the select_action queue and history, normalization stats, strict save / load (local, Hub)."""

import json
import re

import pytest
import safetensors.torch
import torch
from policies.toy_policy import ToyConfig, ToyPolicy, make_toy_policy, toy_stats

from hfpolicy.constants import ACTION, CONFIG_FILE, OBS_IMAGE, OBS_STATE, WEIGHTS_FILE, pad_key
from hfpolicy.field_errors import ConfigFieldError
from hfpolicy.policies import (
    FeatureType,
    MissingStatsError,
    NormMode,
    Policy,
    PolicyFeature,
    PolicyLoadError,
    get_policy_class,
    make_policy,
)


def observation(step: int, batch_size: int = 3) -> dict[str, torch.Tensor]:
    """A distinct state per step and env (inside the [0, 512] stats range)."""
    envs = torch.arange(batch_size, dtype=torch.float32)[:, None]
    return {OBS_STATE: torch.cat([10.0 * step + envs, 300.0 - 5.0 * step + envs], dim=1)}


class ChunkSpy:
    """Wraps a policy's predict_action_chunk to count the calls and keep their (raw, time-stacked) inputs."""

    def __init__(self, policy: Policy, monkeypatch: pytest.MonkeyPatch):
        self.inputs: list[dict[str, torch.Tensor]] = []
        self.outputs: list[torch.Tensor] = []
        original = policy.predict_action_chunk

        def spy(obs, **noise_sources):
            self.inputs.append({k: v.clone() for k, v in obs.items()})
            self.outputs.append(original(obs, **noise_sources))
            return self.outputs[-1]

        monkeypatch.setattr(policy, "predict_action_chunk", spy)


@pytest.fixture
def policy() -> ToyPolicy:
    return make_toy_policy()


def test_queue_predicts_a_chunk_every_n_action_steps(policy, monkeypatch):
    assert (policy.config.n_obs_steps, policy.config.horizon, policy.config.n_action_steps) == (2, 16, 8)
    spy = ChunkSpy(policy, monkeypatch)
    policy.reset()
    actions, counted = [], []
    for t in range(20):
        counted.append(policy.chunks_predicted)
        actions.append(policy.select_action(observation(t)))
    assert len(spy.inputs) == 3  # predicted at steps 0, 8 and 16
    # chunks_predicted counts them as they come (the base class counts for every policy)
    assert counted == [0] * 1 + [1] * 8 + [2] * 8 + [3] * 3 and policy.chunks_predicted == 3
    assert all(a.shape == (3, 2) for a in actions)
    # The executed actions are the chunks' entries in order.
    for t, action in enumerate(actions):
        torch.testing.assert_close(action, spy.outputs[t // 8][:, t % 8], rtol=0, atol=0)


def test_history_is_padded_with_the_first_observation(policy, monkeypatch):
    spy = ChunkSpy(policy, monkeypatch)
    policy.reset()
    for t in range(9):
        policy.select_action(observation(t))
    first, second = spy.inputs
    assert first[OBS_STATE].shape == (3, 2, 2)  # (batch, n_obs_steps, state dim)
    torch.testing.assert_close(first[OBS_STATE][:, 0], observation(0)[OBS_STATE])  # padded with step 0 itself
    torch.testing.assert_close(first[OBS_STATE][:, 1], observation(0)[OBS_STATE])
    torch.testing.assert_close(second[OBS_STATE][:, 0], observation(7)[OBS_STATE])  # steps 7 and 8 at step 8
    torch.testing.assert_close(second[OBS_STATE][:, 1], observation(8)[OBS_STATE])


def test_reset_mid_episode_forces_a_new_chunk_and_history(policy, monkeypatch):
    spy = ChunkSpy(policy, monkeypatch)
    policy.reset()
    for t in range(3):
        policy.select_action(observation(t))
    policy.reset()
    policy.select_action(observation(50))
    assert len(spy.inputs) == 2  # without the reset, step 3 would have come from the first chunk
    torch.testing.assert_close(spy.inputs[1][OBS_STATE][:, 0], observation(50)[OBS_STATE])


def test_batch_size_change_without_reset_is_an_error(policy):
    policy.reset()
    policy.select_action(observation(0, batch_size=3))
    with pytest.raises(RuntimeError, match="reset"):
        policy.select_action(observation(1, batch_size=2))


def test_actions_are_unnormalized_dataset_units(policy):
    """state -> [-1, 1] (min_max over [0, 512]) -> gain * s + offset -> back to [0, 512]."""
    policy.reset()
    obs = observation(0)
    action = policy.select_action(obs)
    normalized_state = obs[OBS_STATE] / 512 * 2 - 1
    expected = (policy.gain * normalized_state + policy.offset[1] + 1) / 2 * 512  # offset index n_obs_steps - 1
    torch.testing.assert_close(action, expected.detach())


def test_missing_stats_raise_when_acting_or_training():
    policy = ToyPolicy(ToyConfig())  # no dataset stats
    with pytest.raises(MissingStatsError, match=r"observation\.state"):
        policy.select_action(observation(0))
    batch = {OBS_STATE: torch.zeros(2, 2, 2), ACTION: torch.zeros(2, 16, 2), pad_key(ACTION): torch.zeros(2, 16).bool()}
    with pytest.raises(MissingStatsError):
        policy(batch)


def test_forward_returns_a_loss_that_trains(policy):
    batch = {
        OBS_STATE: torch.rand(4, 2, 2) * 512,
        ACTION: torch.rand(4, 16, 2) * 512,
        pad_key(ACTION): torch.zeros(4, 16, dtype=torch.bool),
    }
    loss = policy(batch)["loss"]
    loss.backward()
    assert loss.ndim == 0 and policy.gain.grad is not None
    with pytest.raises(KeyError, match="action"):
        policy({OBS_STATE: batch[OBS_STATE]})


def run_episode(policy: Policy, steps: int = 12) -> torch.Tensor:
    policy.reset()
    return torch.stack([policy.select_action(observation(t)) for t in range(steps)])


def perturbed(policy: ToyPolicy) -> ToyPolicy:
    """Parameters away from their initial values, so that a load which drops them shows."""
    with torch.no_grad():
        policy.gain.add_(0.123)
        policy.offset.mul_(-1.7)
    return policy


def test_save_and_load_from_a_local_dir(tmp_path):
    policy = perturbed(make_toy_policy(obs_type="pixels_agent_pos", high=400.0, offset_scale=(0.4, 0.1)))
    policy.save_pretrained(tmp_path)
    assert {CONFIG_FILE, WEIGHTS_FILE} <= {p.name for p in tmp_path.iterdir()}
    saved_config = json.loads((tmp_path / CONFIG_FILE).read_text())
    assert saved_config["type"] == "toy" and saved_config["offset_scale"] == [0.4, 0.1]

    for loader in (Policy, ToyPolicy):  # the base class dispatches on `type`
        loaded = loader.from_pretrained(tmp_path)
        assert type(loaded) is ToyPolicy and not loaded.training
        assert loaded.config == policy.config  # nested dataclasses, enums and tuples restored
        assert isinstance(loaded.config.offset_scale, tuple)
        images = torch.rand(3, 3, 96, 96)
        for p in (policy, loaded):
            p.reset()
        for t in range(10):
            obs = {**observation(t), OBS_IMAGE: images}
            torch.testing.assert_close(loaded.select_action(obs), policy.select_action(obs), rtol=0, atol=0)

    overridden = Policy.from_pretrained(tmp_path, config_overrides={"n_action_steps": 4})
    assert overridden.config.n_action_steps == 4


def test_push_to_hub_and_load_by_repo_id(hub_server, tmp_path):
    policy = perturbed(make_toy_policy())
    repo_id = "user/test-base-toy-policy"
    policy.push_to_hub(repo_id)
    loaded = Policy.from_pretrained(repo_id)
    assert type(loaded) is ToyPolicy and loaded.config == policy.config
    torch.testing.assert_close(run_episode(loaded), run_episode(policy), rtol=0, atol=0)
    # Only config.json and model.safetensors were downloaded (the model card is not needed to act).
    downloads = {path.rsplit("/", 1)[-1] for _, path in hub_server.requests if repo_id in path and "/resolve/" in path}
    assert downloads == {CONFIG_FILE, WEIGHTS_FILE}

    with pytest.raises(PolicyLoadError, match="not a local directory"):
        Policy.from_pretrained(tmp_path / "nothing-here")
    with pytest.raises(PolicyLoadError, match="user/no-such-policy"):
        Policy.from_pretrained("user/no-such-policy")
    tmp_path.joinpath("empty").mkdir()
    with pytest.raises(PolicyLoadError, match="config.json"):
        Policy.from_pretrained(tmp_path / "empty")


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_damaged_weights_give_a_clear_error(tmp_path, damage):
    make_toy_policy().save_pretrained(tmp_path)
    weights = tmp_path / WEIGHTS_FILE
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"not a safetensors file" * 10)
    with pytest.raises(PolicyLoadError, match=r"model\.safetensors.*(truncated|corrupt)"):
        Policy.from_pretrained(tmp_path)


def test_unknown_policy_type_lists_the_known_ones(tmp_path):
    make_toy_policy().save_pretrained(tmp_path)
    config = json.loads((tmp_path / CONFIG_FILE).read_text())
    config["type"] = "difusion"
    (tmp_path / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(PolicyLoadError, match=r"unknown policy type 'difusion'.*toy"):
        Policy.from_pretrained(tmp_path)
    with pytest.raises(PolicyLoadError, match="no policy class for type 'nope'.*toy"):
        get_policy_class("nope")


def test_unknown_config_field_is_named(tmp_path):
    make_toy_policy().save_pretrained(tmp_path)
    config = json.loads((tmp_path / CONFIG_FILE).read_text())
    config["n_action_step"] = 3
    (tmp_path / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(PolicyLoadError, match="n_action_step"):
        Policy.from_pretrained(tmp_path)


def test_strict_loading_names_missing_unexpected_and_mismatched_keys(tmp_path):
    make_toy_policy().save_pretrained(tmp_path)
    state = safetensors.torch.load_file(tmp_path / WEIGHTS_FILE)
    del state["gain"]
    state["extra.weight"] = torch.zeros(3)
    state["offset"] = torch.zeros(5, 2)
    safetensors.torch.save_file(state, tmp_path / WEIGHTS_FILE)
    with pytest.raises(PolicyLoadError) as error:
        Policy.from_pretrained(tmp_path)
    message = str(error.value)
    assert "missing keys ['gain']" in message
    assert "unexpected keys ['extra.weight']" in message
    assert "offset: saved (5, 2), model (16, 2)" in message


def test_stats_travel_in_the_weights(tmp_path):
    policy = make_toy_policy(high=300.0)
    policy.save_pretrained(tmp_path)
    state = safetensors.torch.load_file(tmp_path / WEIGHTS_FILE)
    stat_keys = sorted(k for k in state if k.startswith("normalizer."))
    assert stat_keys and all(torch.isfinite(state[k]).all() for k in stat_keys)
    loaded = Policy.from_pretrained(tmp_path)
    torch.testing.assert_close(run_episode(loaded), run_episode(policy), rtol=0, atol=0)


def test_make_policy_builds_the_registered_class():
    config = ToyConfig()
    policy = make_policy(config, dataset_stats=toy_stats(config))
    assert type(policy) is ToyPolicy
    with pytest.raises(TypeError, match="ToyConfig"):
        ToyPolicy(object())


# --- loaded files that would silently mean something else --------------------------------------------------------
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_weights_with_nan_or_inf_are_refused_by_name(tmp_path, value):
    make_toy_policy().save_pretrained(tmp_path)
    with safetensors.safe_open(tmp_path / WEIGHTS_FILE, framework="pt") as f:
        metadata = f.metadata()
    state = safetensors.torch.load_file(tmp_path / WEIGHTS_FILE)
    state["offset"][2, 1] = value  # a corrupted but parseable file
    safetensors.torch.save_file(state, tmp_path / WEIGHTS_FILE, metadata=metadata)
    with pytest.raises(PolicyLoadError, match=r"NaN or inf in offset \(1 values\)"):
        Policy.from_pretrained(tmp_path)


@pytest.mark.parametrize(("field", "value"), [("horizon", 32), ("n_obs_steps", 3), ("offset_scale", [0.1, 0.1])])
def test_config_edited_to_contradict_the_weights_is_refused(tmp_path, field, value):
    make_toy_policy().save_pretrained(tmp_path)
    config = json.loads((tmp_path / CONFIG_FILE).read_text())
    trained_with = config[field]
    config[field] = value
    (tmp_path / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(
        PolicyLoadError, match=rf"contradicts the weights.*{field}: .*trained with {re.escape(repr(trained_with))}"
    ):
        Policy.from_pretrained(tmp_path)
    # the same change as an override is refused too
    (tmp_path / CONFIG_FILE).write_text(json.dumps({**config, field: trained_with}))
    with pytest.raises(PolicyLoadError, match=f"contradicts the weights.*{field}"):
        Policy.from_pretrained(tmp_path, config_overrides={field: value})


def test_acting_fields_may_change_after_training(tmp_path):
    make_toy_policy().save_pretrained(tmp_path)
    config = json.loads((tmp_path / CONFIG_FILE).read_text())
    (tmp_path / CONFIG_FILE).write_text(json.dumps({**config, "n_action_steps": 4, "optimizer_lr": 0.5}))
    loaded = Policy.from_pretrained(tmp_path)
    assert loaded.config.n_action_steps == 4 and loaded.config.optimizer_lr == 0.5


def test_the_base_feature_checks_name_their_fields():
    with pytest.raises(ConfigFieldError, match=r"^n_obs_steps=1 and n_action_steps=0 must be >= 1$") as e:
        ToyConfig(n_obs_steps=1, n_action_steps=0).validate_features()
    assert e.value.flags("policy.") == "--policy.n_obs_steps=1 and --policy.n_action_steps=0 must be >= 1"
    with pytest.raises(ConfigFieldError, match=r"feature 'observation.state' of type state needs 1 dims, got \(2, 1\)"):
        ToyConfig(input_features={OBS_STATE: PolicyFeature(FeatureType.STATE, (2, 1))}).validate_features()
    with pytest.raises(ConfigFieldError, match=r"normalization_mapping has entries \['observation.bogus'\] that"):
        ToyConfig(normalization_mapping={"observation.bogus": NormMode.MEAN_STD}).validate_features()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: {**c, "horizon": "abc"}, r"config\.json: `horizon`: Couldn't parse 'abc' into an int"),
        (lambda c: {**c, "type": {}}, r"'type' must be a policy type name .* got \{\}"),
        (lambda c: [c], r"a policy config is a JSON object .* got a list"),
        (lambda c: {**c, "n_action_steps": 20}, r"config\.json: n_obs_steps - 1 \+ n_action_steps must be <= horizon"),
    ],
    ids=["wrong-type", "type-not-a-string", "not-an-object", "invalid-combination"],
)
def test_bad_config_json_is_one_clear_error(tmp_path, edit, message):
    make_toy_policy().save_pretrained(tmp_path)
    config = json.loads((tmp_path / CONFIG_FILE).read_text())
    (tmp_path / CONFIG_FILE).write_text(json.dumps(edit(config)))
    with pytest.raises(PolicyLoadError, match=message):
        Policy.from_pretrained(tmp_path)


def test_diffusion_config_combination_errors_are_value_errors_that_keep_their_fields():
    """from_dict passes a config's own check on with its fields (the CLI says them as flags), not as plain text."""
    from hfpolicy.field_errors import ConfigFieldError
    from hfpolicy.policies import PolicyConfig
    from hfpolicy.policies.diffusion import DiffusionConfig

    data = DiffusionConfig().to_dict()
    with pytest.raises(
        ConfigFieldError, match=r"n_action_steps=20 does not fit.*<= horizon - n_obs_steps \+ 1 = 15"
    ) as e:
        PolicyConfig.from_dict({**data, "n_action_steps": 20})
    assert "n_action_steps" in e.value.fields and isinstance(e.value, ValueError)
    assert e.value.flags("policy.", only={"n_action_steps"}).startswith("--policy.n_action_steps=20 does not fit")
    with pytest.raises(ValueError, match=r"`down_dims.0`: Couldn't parse 'a' into an int"):
        PolicyConfig.from_dict({**data, "down_dims": "abc"})


def test_a_policy_written_to_the_documented_contract_acts(monkeypatch):
    """The class docstring's contract: `generate_actions(observation)`, no noise arguments for a deterministic policy."""
    from hfpolicy.policies import registry

    monkeypatch.setitem(registry._POLICY_CLASSES, "toy", ToyPolicy)  # the subclass below registers itself: undone after

    class OneArgumentPolicy(ToyPolicy):
        def generate_actions(self, observation):
            self.generate_calls += 1
            start = self.config.n_obs_steps - 1
            return self._chunk(observation[OBS_STATE][:, -1])[:, start : start + self.config.n_action_steps]

    config = ToyConfig()
    policy, reference = OneArgumentPolicy(config, toy_stats(config)), ToyPolicy(config, toy_stats(config))
    reference.load_state_dict(policy.state_dict())
    observation = {OBS_STATE: torch.randn(3, 2)}
    policy.reset(seeds=[0, 1, 2])  # seeds make per-episode generators: they are not passed to it
    reference.reset(seeds=[0, 1, 2])
    for _ in range(9):  # past the first chunk of 8: a second prediction
        torch.testing.assert_close(policy.select_action(observation), reference.select_action(observation))
    assert policy.generate_calls == 2
    with pytest.raises(TypeError, match="takes no `noise`: add a `noise"):
        policy.predict_action_chunk({OBS_STATE: torch.randn(3, 2, 2)}, noise=torch.zeros(3, 16, 2))


def test_a_training_run_folder_loads_its_last_checkpoint_and_says_so(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "train_config.json").parent.mkdir()
    (run / "train_config.json").write_text("{}")
    with pytest.raises(PolicyLoadError, match=re.escape(str(run / "checkpoints" / "last" / "pretrained_model"))):
        Policy.from_pretrained(run)  # no checkpoint yet: the message names where the policy will be
    older, newer = make_toy_policy(high=100.0), make_toy_policy(high=300.0)
    older.save_pretrained(run / "checkpoints" / "step_000002" / "pretrained_model")
    newer.save_pretrained(run / "checkpoints" / "step_000004" / "pretrained_model")
    (run / "checkpoints" / "last").symlink_to("step_000004")
    capsys.readouterr()
    for source in (run, run / "checkpoints", run / "checkpoints" / "step_000004"):
        loaded = Policy.from_pretrained(source)
        assert torch.equal(loaded.state_dict()["normalizer.stats.observation_state.max"], torch.full((2,), 300.0))
        assert "training run's folder: loading its last checkpoint's policy" in capsys.readouterr().err
