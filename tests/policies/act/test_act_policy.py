"""ACT: shapes and gradients (image, state, several cameras), the CVAE loss, deterministic acting, the action queue in
real gym-pusht, the backbone's own learning rate, save / load (local and through the Hub-protocol test server), and
errors for missing features."""

import pytest
import torch
from act_setup import image_config, observation, pusht_stats, state_config, training_batch

from hfpolicy.constants import ACTION, CONFIG_FILE, OBS_ENV_STATE, OBS_IMAGE, OBS_STATE, WEIGHTS_FILE, pad_key
from hfpolicy.envs import make_env, observations_to_batch
from hfpolicy.policies import FeatureType, Policy, PolicyFeature, PolicyLoadError
from hfpolicy.policies.act import ACTConfig, ACTPolicy
from hfpolicy.policies.act.modeling import sinusoidal_positions_1d, sinusoidal_positions_2d

CONFIGS = {"image": image_config, "state": state_config}
# Parameters of LeRobot 0.6.1's ACTPolicy with its default ACTConfig for PushT images (96x96 + agent position, 2-dim
# actions), counted on the meta device in LeRobot's own environment.
LEROBOT_PUSHT_IMAGE_PARAMS = 51_588_994


def make_policy(variant: str = "image", seed: int = 0, stats=None, **overrides) -> ACTPolicy:
    torch.manual_seed(seed)
    return ACTPolicy(CONFIGS[variant](**overrides), dataset_stats=stats or pusht_stats())


@pytest.mark.parametrize("variant", ["image", "state"])
def test_output_shapes_gradients_and_parameter_groups(variant):
    policy = make_policy(variant)
    out = policy(training_batch(policy.config, batch_size=4))
    assert set(out) == {"loss", "l1_loss", "kld_loss"}
    loss = out["loss"]
    assert loss.shape == () and torch.isfinite(loss) and loss > 0
    torch.testing.assert_close(loss.detach(), out["l1_loss"] + 10.0 * out["kld_loss"])
    loss.backward()
    without_grad = [name for name, p in policy.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    # Every weight is trained (backbone, CVAE, positions, queries) except, at initialization, the first decoder
    # layer's self-attention: its queries are all zero, so only its biases (initialized to zero) reach the output.
    assert without_grad == [
        "decoder.layers.0.self_attn.in_proj_weight",
        "decoder.layers.0.self_attn.out_proj.weight",
        "decoder.layers.0.norm_self_attn.weight",
    ]

    groups = policy.get_optim_params()
    assert sum(len(g["params"]) for g in groups) == len(list(policy.parameters()))
    if variant == "image":
        backbone = {id(p) for p in policy.backbone.parameters()}
        assert [g.get("lr") for g in groups] == [None, policy.config.optimizer_lr_backbone]
        assert {id(p) for p in groups[1]["params"]} == backbone
    else:
        assert len(groups) == 1 and not hasattr(policy, "backbone")

    policy.eval()
    normalized = policy.normalizer.normalize(observation(policy.config, batch_size=3))
    assert policy.generate_actions(normalized).shape == (3, policy.config.chunk_size, 2)
    assert policy.predict_action_chunk(observation(policy.config, 3)).shape == (3, policy.config.n_action_steps, 2)


def test_several_cameras_each_give_tokens():
    cameras = {
        "observation.images.top": PolicyFeature(FeatureType.IMAGE, (3, 96, 96)),
        "observation.images.side": PolicyFeature(FeatureType.IMAGE, (3, 64, 96)),  # another shape: its own pass
    }
    inputs = {**cameras, OBS_STATE: PolicyFeature(FeatureType.STATE, (2,))}
    policy = make_policy("image", stats=pusht_stats(image_keys=cameras), input_features=inputs).eval()
    normalized = policy.normalizer.normalize(observation(policy.config, batch_size=2))
    current = policy.current_observation(normalized)
    tokens, positions = policy.encode_images([current[key] for key in cameras])
    assert tokens.shape == (2, 3 * 3 + 2 * 3, 32) and positions.shape == (1, 15, 32)  # 96 / 32 = 3, 64 / 32 = 2
    actions = policy.generate_actions(normalized)
    for key in cameras:  # each camera matters
        changed = dict(normalized, **{key: normalized[key].flip(-1)})
        assert not torch.allclose(policy.generate_actions(changed), actions)


def test_cameras_of_one_shape_share_one_batched_backbone_pass():
    cameras = {f"observation.images.{name}": PolicyFeature(FeatureType.IMAGE, (3, 64, 64)) for name in ("a", "b")}
    inputs = {**cameras, OBS_ENV_STATE: PolicyFeature(FeatureType.STATE, (16,))}
    policy = make_policy("image", stats=pusht_stats(image_keys=cameras), input_features=inputs).eval()
    calls = []
    policy.backbone.register_forward_hook(lambda module, args, out: calls.append(args[0].shape[0]))
    images = [torch.rand(3, 3, 64, 64, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    tokens, _ = policy.encode_images(images)
    assert calls == [6]  # one pass over both cameras
    one_by_one = torch.cat([policy.encode_images([image])[0] for image in images], dim=1)
    torch.testing.assert_close(tokens, one_by_one, rtol=1e-5, atol=1e-5)  # frozen batch norm: batching changes nothing


def test_positions_are_the_sinusoid_tables():
    positions = sinusoidal_positions_1d(7, 6)
    torch.testing.assert_close(positions[3, 0], torch.tensor(3.0).sin())  # channel 0: sin(pos)
    torch.testing.assert_close(positions[3, 1], torch.tensor(3.0).cos())  # channel 1: cos(pos)
    torch.testing.assert_close(positions[5, 4], torch.tensor(5.0 / 10000 ** (4 / 6)).sin())
    grid = sinusoidal_positions_2d((3, 4), 8, torch.zeros(())).reshape(3, 4, 8)
    assert len({tuple(cell.tolist()) for cell in grid.reshape(12, 8)}) == 12  # every cell its own position
    assert torch.equal(grid[:, :1, :4].expand(3, 4, 4), grid[..., :4])  # first half: the row only
    assert torch.equal(grid[:1, :, 4:].expand(3, 4, 4), grid[..., 4:])  # second half: the column only
    torch.testing.assert_close(grid[2, 0, 0], torch.tensor(3 / (3 + 1e-6) * 2 * torch.pi).sin())  # last row: 2 pi


def test_loss_is_masked_l1_plus_weighted_kl_and_ignores_padded_actions():
    policy = make_policy("state", kl_weight=3.0).eval()  # eval: no dropout, so the pieces can be recomputed
    batch = policy.normalizer.normalize(training_batch(policy.config, batch_size=3))
    noise = torch.randn(3, policy.config.latent_dim, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = policy.compute_loss(batch, noise=noise)
        current = policy.current_observation(batch)
        mean, log_var = policy.cvae(current[OBS_STATE], batch[ACTION], batch[pad_key(ACTION)])
        predicted = policy.predict(current, mean + (0.5 * log_var).exp() * noise)
        valid = ~batch[pad_key(ACTION)]
        l1 = (predicted - batch[ACTION]).abs()[valid].mean()
        kl = 0.5 * (mean.square() + log_var.exp() - 1 - log_var).sum(-1).mean()
        torch.testing.assert_close(out["l1_loss"], l1)
        torch.testing.assert_close(out["kld_loss"], kl)
        torch.testing.assert_close(out["loss"], l1 + 3.0 * kl)
        # Padded actions reach neither the CVAE (attention mask) nor the L1 term.
        changed = dict(batch, **{ACTION: torch.where(valid[..., None], batch[ACTION], 1e3)})
        torch.testing.assert_close(policy.compute_loss(changed, noise=noise)["loss"], out["loss"], rtol=1e-6, atol=1e-6)
        unpadded = dict(batch, **{pad_key(ACTION): torch.zeros_like(valid)})
        assert not torch.allclose(policy.compute_loss(unpadded, noise=noise)["loss"], out["loss"])


def test_without_the_cvae_the_loss_is_l1_and_there_is_no_cvae():
    policy = make_policy("state", use_vae=False).eval()
    assert not any(name.startswith("cvae.") for name in policy.state_dict())
    out = policy(training_batch(policy.config, batch_size=2))
    assert set(out) == {"loss", "l1_loss"} and torch.equal(out["loss"].detach(), out["l1_loss"])


def test_acting_uses_the_zero_latent_and_is_deterministic():
    policy = make_policy("image").eval()
    normalized = policy.normalizer.normalize(observation(policy.config, batch_size=2))
    actions = policy.generate_actions(normalized)
    torch.testing.assert_close(actions, policy.generate_actions(normalized), rtol=0, atol=0)
    zero = torch.zeros(2, policy.config.latent_dim)
    torch.testing.assert_close(actions, policy.predict(policy.current_observation(normalized), zero), rtol=0, atol=0)
    with torch.no_grad():
        for p in policy.cvae.parameters():  # the CVAE encoder is for training only
            p.add_(1.0)
    torch.testing.assert_close(actions, policy.generate_actions(normalized), rtol=0, atol=0)


def test_select_action_in_pusht_predicts_a_chunk_every_n_action_steps(monkeypatch):
    policy = make_policy("image", n_action_steps=4).eval()
    calls = []
    generate = policy.generate_actions
    monkeypatch.setattr(policy, "generate_actions", lambda obs, **kw: calls.append(obs) or generate(obs, **kw))
    env = make_env("pusht", n_envs=2, obs_type="pixels_agent_pos")
    try:
        obs, _ = env.reset(seed=[1000, 1001])
        policy.reset()
        actions = []
        for _ in range(10):
            action = policy.select_action(observations_to_batch(obs, keys=policy.config.input_features))
            actions.append(action)
            obs, *_ = env.step(action.numpy())
    finally:
        env.close()
    assert len(calls) == 3  # at steps 0, 4 and 8
    assert calls[0][OBS_IMAGE].shape == (2, 1, 3, 96, 96) and calls[0][OBS_STATE].shape == (2, 1, 2)
    actions = torch.stack(actions)
    assert actions.shape == (10, 2, 2) and torch.isfinite(actions).all()
    assert not torch.equal(actions[0], actions[1])


def test_save_pretrained_and_from_pretrained_give_identical_actions(tmp_path):
    policy = make_policy("image", temporal_ensemble_coeff=0.01, n_action_steps=1).eval()
    policy.save_pretrained(tmp_path)
    assert {CONFIG_FILE, WEIGHTS_FILE} <= {p.name for p in tmp_path.iterdir()}
    for loader in (ACTPolicy, Policy):
        loaded = loader.from_pretrained(tmp_path)
        assert type(loaded) is ACTPolicy and not loaded.training and loaded.config == policy.config
        assert loaded.config.input_features[OBS_IMAGE].type == FeatureType.IMAGE
        assert loaded.state_dict().keys() == policy.state_dict().keys()
        assert all(torch.equal(loaded.state_dict()[k], v) for k, v in policy.state_dict().items())
        assert_same_actions(policy, loaded)
    queued = Policy.from_pretrained(tmp_path, config_overrides={"temporal_ensemble_coeff": None, "n_action_steps": 5})
    assert queued.config.n_action_steps == 5 and queued.make_action_buffer().steps_per_chunk == 5


def assert_same_actions(policy: ACTPolicy, loaded: ACTPolicy) -> None:
    outputs = []
    for p in (policy, loaded):
        p.reset()
        steps = [observation(policy.config, 2, phase=0.5 * t, time_dim=False) for t in range(3)]
        outputs.append(torch.stack([p.select_action(o) for o in steps]))
    torch.testing.assert_close(outputs[1], outputs[0], rtol=0, atol=0)


def test_push_to_hub_and_load_by_repo_id(hub_server):
    policy = make_policy("state").eval()
    repo_id = "user/test-act-policy-state"
    policy.push_to_hub(repo_id)
    loaded = Policy.from_pretrained(repo_id)
    assert type(loaded) is ACTPolicy and loaded.config == policy.config
    assert_same_actions(policy, loaded)
    downloads = {path.rsplit("/", 1)[-1] for _, path in hub_server.requests if repo_id in path and "/resolve/" in path}
    assert downloads == {CONFIG_FILE, WEIGHTS_FILE}


def test_loading_is_strict(tmp_path):
    make_policy("image").save_pretrained(tmp_path)
    # An architecture change is refused by the saved config check (issue 13), naming the field...
    with pytest.raises(PolicyLoadError, match=r"contradicts the weights.*input_features"):
        Policy.from_pretrained(
            tmp_path, config_overrides={"input_features": {OBS_IMAGE: {"type": "image", "shape": [3, 96, 96]}}}
        )  # without observation.state: one 1D token fewer, and no state projection
    with pytest.raises(PolicyLoadError, match=r"contradicts the weights.*use_vae"):
        Policy.from_pretrained(tmp_path, config_overrides={"use_vae": False})
    # ... and a state dict that does not fit is refused key by key.
    policy = make_policy("image")
    state = dict(policy.state_dict())
    state["extra.weight"] = torch.zeros(1)
    state["token_positions.weight"] = state["token_positions.weight"][:-1]
    with pytest.raises(PolicyLoadError, match=r"unexpected keys \['extra.weight'\].*token_positions.weight"):
        policy.load_strict(state)


def test_missing_inputs_and_unusable_features_are_named():
    policy = make_policy("state").eval()
    obs = observation(policy.config, 2, time_dim=False)
    del obs[OBS_ENV_STATE]
    with pytest.raises(KeyError, match=OBS_ENV_STATE):
        policy.select_action(obs)
    with pytest.raises(ValueError, match=r"n_obs_steps=1"):
        policy.predict_action_chunk(observation(policy.config, 2, time_dim=False))  # no time dim
    batch = training_batch(policy.config, 2)
    batch[ACTION] = batch[ACTION][:, :4]
    with pytest.raises(ValueError, match="chunk_size"):
        policy(batch)
    with pytest.raises(ValueError, match="at least one image"):
        ACTPolicy(state_config(input_features={OBS_STATE: PolicyFeature(FeatureType.STATE, (2,))}))
    extra = {**state_config().input_features, "observation.velocity": PolicyFeature(FeatureType.STATE, (2,))}
    with pytest.raises(ValueError, match="observation.velocity"):
        ACTPolicy(state_config(input_features=extra))


def test_stats_are_required_to_act_and_train():
    torch.manual_seed(0)
    policy = ACTPolicy(state_config())
    with pytest.raises(Exception, match="no normalization stats"):
        policy.predict_action_chunk(observation(policy.config, 1))
    with pytest.raises(Exception, match="no normalization stats"):
        policy(training_batch(policy.config, 1))


def test_default_config_is_the_paper_setup():
    config = ACTConfig(
        input_features={
            OBS_IMAGE: PolicyFeature(FeatureType.IMAGE, (3, 96, 96)),
            OBS_STATE: PolicyFeature(FeatureType.STATE, (2,)),
        },
        output_features={ACTION: PolicyFeature(FeatureType.ACTION, (2,))},
    )
    assert (config.n_obs_steps, config.chunk_size, config.n_action_steps) == (1, 100, 100)
    assert (config.dim_model, config.n_heads, config.dim_feedforward) == (512, 8, 3200)
    assert (config.n_encoder_layers, config.n_decoder_layers, config.n_vae_encoder_layers) == (4, 1, 4)
    assert (config.latent_dim, config.kl_weight, config.dropout, config.pre_norm) == (32, 10.0, 0.1, False)
    assert (config.optimizer_lr, config.optimizer_lr_backbone, config.optimizer_weight_decay) == (1e-5, 1e-5, 1e-4)
    assert config.delta_timestamps(10) == {OBS_IMAGE: [0.0], OBS_STATE: [0.0], ACTION: [i / 10 for i in range(100)]}
    assert config.drop_n_last_frames == 0  # every frame starts a sample; actions past the end are padding
    with torch.device("meta"):  # shapes only
        policy = ACTPolicy(config)
    assert sum(p.numel() for p in policy.parameters()) == LEROBOT_PUSHT_IMAGE_PARAMS


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"n_obs_steps": 2}, "n_obs_steps=2 must be 1"),
        ({"n_action_steps": 101}, "between 1 and chunk_size=100"),
        ({"vision_backbone": "vit"}, "vision_backbone='vit'"),
        ({"n_heads": 7}, "n_heads=7 must divide dim_model=512"),
        ({"feedforward_activation": "glu"}, "feedforward_activation='glu'"),
    ],
)
def test_bad_settings_are_named(fields, message):
    with pytest.raises(ValueError, match=message):
        ACTConfig(**fields)
