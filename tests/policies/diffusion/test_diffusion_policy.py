"""Diffusion Policy: shapes (image, state, several cameras), acting in real gym-pusht, sampling (DDPM, DDIM), the
masked loss, cropping, and save / load (local and through the Hub-protocol test server)."""

import json

import pytest
import torch
from diffusion_setup import image_config, observation_window, pusht_stats, state_config, training_batch

from hfpolicy.constants import ACTION, CONFIG_FILE, OBS_ENV_STATE, OBS_IMAGE, OBS_STATE, WEIGHTS_FILE, pad_key
from hfpolicy.envs import make_env, observations_to_batch
from hfpolicy.policies import FeatureType, Policy, PolicyFeature
from hfpolicy.policies.diffusion import DiffusionConfig, DiffusionPolicy, cpu_kernels
from hfpolicy.policies.diffusion.cpu_kernels import KERNEL_CACHE, MatmulConv1d, MatmulConvTranspose1d
from hfpolicy.policies.diffusion.modeling import crop_images

CONFIGS = {"image": image_config, "state": state_config}


def make_policy(variant: str = "image", seed: int = 0, **overrides) -> DiffusionPolicy:
    torch.manual_seed(seed)
    return DiffusionPolicy(CONFIGS[variant](**overrides), dataset_stats=pusht_stats())


class CallCounter:
    """Counts calls of a module's forward (a forward hook: the module itself runs unchanged)."""

    def __init__(self, module: torch.nn.Module):
        self.calls = 0
        module.register_forward_hook(self._hook)

    def _hook(self, *_):
        self.calls += 1


@pytest.mark.parametrize("variant", ["image", "state"])
def test_output_shapes_and_gradients(variant):
    policy = make_policy(variant)
    config = policy.config
    feature_dim = 2 + (2 * config.spatial_softmax_num_keypoints if variant == "image" else 16)
    assert policy.global_cond_dim == config.n_obs_steps * feature_dim
    assert hasattr(policy, "rgb_encoder") == (variant == "image")

    loss = policy(training_batch(config, batch_size=4))["loss"]
    assert loss.shape == () and torch.isfinite(loss) and loss > 0
    loss.backward()
    trainable = [p for p in policy.get_optim_params()]
    assert len(trainable) == len(list(policy.parameters()))
    without_grad = [name for name, p in policy.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert without_grad == []  # every weight, the vision encoder's included, is trained

    policy.eval()
    observation = observation_window(config, batch_size=3)
    normalized = policy.normalizer.normalize(observation)
    assert policy.encode_observations(normalized).shape == (3, policy.global_cond_dim)
    config.num_inference_steps = 3
    assert policy.generate_actions(normalized).shape == (3, config.n_action_steps, 2)
    assert policy.predict_action_chunk(observation).shape == (3, config.n_action_steps, 2)


@pytest.mark.parametrize("separate", [False, True])
def test_several_cameras_with_a_shared_or_separate_encoders(separate):
    cameras = {f"observation.images.{name}": PolicyFeature(FeatureType.IMAGE, (3, 96, 96)) for name in ("top", "side")}
    inputs = {**cameras, OBS_STATE: PolicyFeature(FeatureType.STATE, (2,))}
    stats = {**pusht_stats(), **{key: pusht_stats()[OBS_IMAGE] for key in cameras}}
    torch.manual_seed(0)
    config = image_config(input_features=inputs, use_separate_rgb_encoder_per_camera=separate, num_inference_steps=2)
    policy = DiffusionPolicy(config, dataset_stats=stats).eval()
    encoders = policy.rgb_encoders if separate else [policy.rgb_encoder]
    assert len(encoders) == (2 if separate else 1)
    counters = [CallCounter(encoder) for encoder in encoders]
    observation = observation_window(policy.config, batch_size=2)
    assert policy.predict_action_chunk(observation).shape == (2, 8, 2)
    assert [c.calls for c in counters] == ([1, 1] if separate else [1])  # one batched pass per encoder per chunk
    assert policy.global_cond_dim == 2 * (2 + 2 * 2 * policy.config.spatial_softmax_num_keypoints)
    # Each camera matters: changing one camera's images changes the conditioning.
    normalized = policy.normalizer.normalize(observation)
    changed = dict(normalized, **{"observation.images.side": normalized["observation.images.side"].flip(-1)})
    assert not torch.allclose(policy.encode_observations(normalized), policy.encode_observations(changed))


def test_generate_actions_returns_the_executed_part_of_the_denoised_horizon(monkeypatch):
    policy = make_policy("state", n_obs_steps=3, horizon=16, n_action_steps=5, num_inference_steps=4).eval()
    final_samples = []
    step = policy.sampler.step

    def recording_step(*args, **kwargs):
        out = step(*args, **kwargs)
        final_samples.append(out.prev_sample)
        return out

    monkeypatch.setattr(policy.sampler, "step", recording_step)
    normalized = policy.normalizer.normalize(observation_window(policy.config, batch_size=2))
    actions = policy.generate_actions(normalized, generator=torch.Generator().manual_seed(0))
    assert len(final_samples) == 4
    torch.testing.assert_close(actions, final_samples[-1][:, 2:7], rtol=0, atol=0)  # n_obs_steps - 1 = 2 onwards


@pytest.mark.parametrize(
    ("variant", "obs_type", "seed"),
    [("image", "pixels_agent_pos", 1000), ("state", "environment_state_agent_pos", 1001)],
)
def test_select_action_in_pusht_predicts_3_chunks_in_20_steps(variant, obs_type, seed, monkeypatch):
    policy = make_policy(variant, noise_scheduler_type="DDIM", num_inference_steps=4).eval()
    chunks = []
    generate = policy.generate_actions

    def counted(observation, **noise_sources):
        chunks.append({key: value.shape for key, value in observation.items()})
        return generate(observation, **noise_sources)

    monkeypatch.setattr(policy, "generate_actions", counted)
    env = make_env("pusht", n_envs=2, obs_type=obs_type)
    try:
        observation, _ = env.reset(seed=[seed, seed + 1])
        policy.reset()
        actions = []
        for _ in range(20):
            batch = observations_to_batch(observation, keys=policy.config.input_features)
            action = policy.select_action(batch)
            actions.append(action)
            observation, _, terminated, truncated, _ = env.step(action.numpy())
            assert not (terminated.any() or truncated.any())
    finally:
        env.close()
    assert len(chunks) == 3  # at steps 0, 8 and 16
    for shapes in chunks:
        for key, feature in policy.config.input_features.items():
            assert shapes[key] == (2, policy.config.n_obs_steps, *feature.shape)
    actions = torch.stack(actions)
    assert actions.shape == (20, 2, 2)
    # Clipped denoising keeps actions inside the normalization range (the 512 x 512 workspace).
    assert actions.min() >= 0 and actions.max() <= 512
    assert not torch.equal(actions[0], actions[1])  # successive actions of a chunk differ


@pytest.mark.parametrize(("scheduler", "steps", "expected_calls"), [("DDPM", None, 100), ("DDIM", 10, 10)])
def test_sampling_runs_the_unet_per_step_and_encodes_once(scheduler, steps, expected_calls):
    policy = make_policy("image", noise_scheduler_type=scheduler, num_inference_steps=steps).eval()
    assert type(policy.sampler).__name__ == f"{scheduler}Scheduler"
    unet, encoder = CallCounter(policy.unet), CallCounter(policy.rgb_encoder)
    observation = observation_window(policy.config, batch_size=2)
    policy.noise_generator = torch.Generator().manual_seed(7)
    first = policy.predict_action_chunk(observation)
    assert (unet.calls, encoder.calls) == (expected_calls, 1)
    assert first.shape == (2, 8, 2) and torch.isfinite(first).all()
    assert first.min() >= 0 and first.max() <= 512
    policy.noise_generator = torch.Generator().manual_seed(7)
    torch.testing.assert_close(policy.predict_action_chunk(observation), first, rtol=0, atol=0)
    policy.noise_generator = torch.Generator().manual_seed(8)
    assert not torch.allclose(policy.predict_action_chunk(observation), first)


def test_ddim_and_ddpm_sample_differently_from_the_same_noise():
    ddpm = make_policy("state", num_inference_steps=10).eval()
    ddim = make_policy("state", noise_scheduler_type="DDIM", num_inference_steps=10).eval()
    ddim.load_state_dict(ddpm.state_dict())
    observation = normalized_observation(ddpm)
    a = ddpm.generate_actions(observation, generator=torch.Generator().manual_seed(0))
    b = ddim.generate_actions(observation, generator=torch.Generator().manual_seed(0))
    assert a.shape == b.shape and not torch.allclose(a, b)
    # DDIM (eta = 0) is deterministic given the initial noise: the generator is only used for it.
    g = torch.Generator().manual_seed(0)
    torch.testing.assert_close(ddim.generate_actions(observation, generator=g), b, rtol=0, atol=0)


def test_set_sampler_switches_to_ddim_and_is_saved(tmp_path):
    policy = make_policy("state").eval()
    unet = CallCounter(policy.unet)
    policy.set_sampler("DDIM", 10)
    assert type(policy.sampler).__name__ == "DDIMScheduler"
    policy.predict_action_chunk(observation_window(policy.config, 1))
    assert unet.calls == 10
    policy.save_pretrained(tmp_path)
    loaded = DiffusionPolicy.from_pretrained(tmp_path)
    assert (loaded.config.noise_scheduler_type, loaded.config.inference_steps) == ("DDIM", 10)
    with pytest.raises(ValueError, match="noise_scheduler_type='PNDM' is not supported"):
        policy.set_sampler("PNDM", 10)
    with pytest.raises(ValueError, match="num_inference_steps=500 must be between 1 and num_train_timesteps=100"):
        policy.set_sampler("DDIM", 500)
    assert policy.config.inference_steps == 10  # a rejected choice changes nothing


def normalized_observation(policy: DiffusionPolicy, batch_size: int = 2) -> dict[str, torch.Tensor]:
    return policy.normalizer.normalize(observation_window(policy.config, batch_size))


def test_loss_is_the_mean_over_actions_that_are_not_padding():
    policy = make_policy("state").eval()
    batch = policy.normalizer.normalize(training_batch(policy.config, batch_size=3))
    is_pad = batch[pad_key(ACTION)]
    assert is_pad.sum() == 3
    noise = torch.randn(3, policy.config.horizon, 2, generator=torch.Generator().manual_seed(0))
    timesteps = torch.tensor([3, 50, 99])

    def loss(b):
        return policy.compute_loss(b, noise=noise, timesteps=timesteps)["loss"]

    with torch.no_grad():
        noisy = policy.noise_scheduler.add_noise(batch[ACTION], noise, timesteps)
        error = (policy.unet(noisy, timesteps, policy.encode_observations(batch)) - noise).square()
        valid = ~is_pad
        torch.testing.assert_close(loss(batch), error[valid].mean())
        # Padded actions' errors do not count (they still enter the U-Net's input, as in the dataset windows).
        no_padding = dict(batch, **{pad_key(ACTION): torch.zeros_like(is_pad)})
        torch.testing.assert_close(loss(no_padding), error.mean())
        assert not torch.allclose(loss(no_padding), loss(batch))
        without_mask = make_policy("state", mask_loss_for_padding=False).eval()
        torch.testing.assert_close(
            without_mask.compute_loss(batch, noise=noise, timesteps=timesteps)["loss"], error.mean()
        )


def test_sample_prediction_trains_on_the_actions():
    policy = make_policy("state", prediction_type="sample").eval()
    batch = policy.normalizer.normalize(training_batch(policy.config, batch_size=2))
    batch.pop(pad_key(ACTION))
    noise, timesteps = torch.zeros(2, 16, 2), torch.tensor([10, 20])
    with torch.no_grad():
        noisy = policy.noise_scheduler.add_noise(batch[ACTION], noise, timesteps)
        prediction = policy.unet(noisy, timesteps, policy.encode_observations(batch))
        expected = (prediction - batch[ACTION]).square().mean()
        torch.testing.assert_close(policy.compute_loss(batch, noise=noise, timesteps=timesteps)["loss"], expected)


def test_random_crop_in_training_center_crop_when_acting():
    images = torch.rand(6, 3, 96, 96)
    center = crop_images(images, (84, 84), random=False)
    torch.testing.assert_close(center, images[..., 6:90, 6:90], rtol=0, atol=0)
    torch.manual_seed(0)
    crops = crop_images(images, (84, 84), random=True)
    assert crops.shape == (6, 3, 84, 84)
    offsets = []
    for image, crop in zip(images, crops, strict=True):  # every crop is a window of its own image
        found = [
            (top, left)
            for top in range(13)
            for left in range(13)
            if torch.equal(image[:, top : top + 84, left : left + 84], crop)
        ]
        assert len(found) == 1
        offsets.append(found[0])
    assert len(set(offsets)) > 1  # independent offsets per image

    policy = make_policy("image")
    normalized = policy.normalizer.normalize(training_batch(policy.config, batch_size=2))
    noise, timesteps = torch.randn(2, 16, 2), torch.tensor([5, 60])

    def losses(n: int) -> set[float]:
        with torch.no_grad():
            return {policy.compute_loss(normalized, noise=noise, timesteps=timesteps)["loss"].item() for _ in range(n)}

    policy.train()
    assert len(losses(3)) > 1  # a new random crop each time
    policy.eval()
    center_losses = losses(3)
    assert len(center_losses) == 1  # always the center crop
    policy.config.crop_is_random = False
    policy.train()
    assert losses(2) == center_losses


def test_save_pretrained_and_from_pretrained_give_identical_actions(tmp_path):
    policy = make_policy("image", noise_scheduler_type="DDIM", num_inference_steps=5).eval()
    policy.save_pretrained(tmp_path)
    assert {CONFIG_FILE, WEIGHTS_FILE} <= {p.name for p in tmp_path.iterdir()}
    for loader in (DiffusionPolicy, Policy):
        loaded = loader.from_pretrained(tmp_path)
        assert type(loaded) is DiffusionPolicy and not loaded.training
        assert loaded.config == policy.config
        assert isinstance(loaded.config.down_dims, tuple) and isinstance(loaded.config.crop_shape, tuple)
        assert loaded.config.input_features[OBS_IMAGE].type == FeatureType.IMAGE
        for name, value in policy.state_dict().items():
            assert torch.equal(loaded.state_dict()[name], value), name
        assert_same_actions(policy, loaded)
    ddpm = DiffusionPolicy.from_pretrained(tmp_path, config_overrides={"noise_scheduler_type": "DDPM"})
    assert type(ddpm.sampler).__name__ == "DDPMScheduler"


def assert_same_actions(policy: DiffusionPolicy, loaded: DiffusionPolicy) -> None:
    observation = observation_window(policy.config, batch_size=2, phase=1.5)
    outputs = []
    for p in (policy, loaded):
        p.noise_generator = torch.Generator().manual_seed(3)
        p.reset()
        outputs.append(torch.stack([p.select_action({k: v[:, -1] for k, v in observation.items()}) for _ in range(3)]))
    torch.testing.assert_close(outputs[1], outputs[0], rtol=0, atol=0)


def test_push_to_hub_and_load_by_repo_id(hub_server):
    policy = make_policy("state", num_inference_steps=10).eval()
    repo_id = "user/test-diffusion-policy-state"
    policy.push_to_hub(repo_id)
    loaded = Policy.from_pretrained(repo_id)
    assert type(loaded) is DiffusionPolicy and loaded.config == policy.config
    assert_same_actions(policy, loaded)
    downloads = {path.rsplit("/", 1)[-1] for _, path in hub_server.requests if repo_id in path and "/resolve/" in path}
    assert downloads == {CONFIG_FILE, WEIGHTS_FILE}


def test_stats_are_required_to_act_and_train():
    torch.manual_seed(0)
    policy = DiffusionPolicy(state_config())
    with pytest.raises(Exception, match="no normalization stats"):
        policy.predict_action_chunk(observation_window(policy.config, 1))
    with pytest.raises(Exception, match="no normalization stats"):
        policy(training_batch(policy.config, 1))


def test_default_config_is_the_paper_pusht_setup():
    config = DiffusionConfig(
        input_features={
            OBS_IMAGE: PolicyFeature(FeatureType.IMAGE, (3, 96, 96)),
            OBS_STATE: PolicyFeature(FeatureType.STATE, (2,)),
        },
        output_features={ACTION: PolicyFeature(FeatureType.ACTION, (2,))},
    )
    assert (config.n_obs_steps, config.horizon, config.n_action_steps) == (2, 16, 8)
    assert config.down_dims == (512, 1024, 2048) and config.crop_shape == (84, 84)
    assert config.delta_timestamps(10) == {
        OBS_IMAGE: [-0.1, 0.0],
        OBS_STATE: [-0.1, 0.0],
        ACTION: [i / 10 for i in range(-1, 15)],
    }
    assert config.drop_n_last_frames == 7
    with torch.device("meta"):  # shapes only: the 262.7 M parameters are not allocated
        policy = DiffusionPolicy(config)
    assert sum(p.numel() for p in policy.parameters()) == 262_709_026  # as LeRobot's DiffusionPolicy on PushT
    assert policy.global_cond_dim == 2 * (2 + 64)
    scheduler = policy.noise_scheduler.config
    assert (scheduler.num_train_timesteps, scheduler.beta_schedule, scheduler.prediction_type) == (
        100,
        "squaredcos_cap_v2",
        "epsilon",
    )
    assert scheduler.clip_sample and scheduler.clip_sample_range == 1.0
    assert config.inference_steps == 100 and type(policy.sampler).__name__ == "DDPMScheduler"
    group_norms = [m for m in policy.rgb_encoder.modules() if isinstance(m, torch.nn.GroupNorm)]
    batch_norms = [m for m in policy.rgb_encoder.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(group_norms) == 20 and batch_norms == []
    assert (config.optimizer_lr, config.optimizer_betas, config.optimizer_weight_decay) == (1e-4, (0.95, 0.999), 1e-6)
    assert (config.scheduler_name, config.scheduler_warmup_steps, config.use_ema) == ("cosine", 500, True)


def test_state_only_variant_is_chosen_by_the_features():
    policy = make_policy("state")
    assert not hasattr(policy, "rgb_encoder") and not hasattr(policy, "rgb_encoders")
    assert policy.state_keys == [OBS_STATE, OBS_ENV_STATE]
    assert not any("backbone" in name for name in policy.state_dict())


@pytest.mark.parametrize("batch_size", [1, 40])  # few rows (weight @ windows.T) and many rows (windows @ weight.T)
@pytest.mark.parametrize(
    ("layer", "reference"),
    [
        (lambda: MatmulConv1d(6, 10, 5, padding=2), torch.nn.Conv1d),
        (lambda: MatmulConv1d(6, 10, 1), torch.nn.Conv1d),
        (lambda: MatmulConv1d(6, 6, 3, stride=2, padding=1), torch.nn.Conv1d),
        (lambda: MatmulConvTranspose1d(6, 6, 4, stride=2, padding=1), torch.nn.ConvTranspose1d),
    ],
)
def test_cpu_matmul_convolutions_match_torch_forward_and_backward(layer, reference, batch_size):
    torch.manual_seed(0)
    fast = layer()
    slow = reference(fast.in_channels, fast.out_channels, fast.kernel_size, fast.stride, fast.padding)
    slow.load_state_dict(fast.state_dict())
    x = torch.randn(batch_size, 6, 8, requires_grad=True)
    outputs, grads = [], []
    for module in (fast, slow):
        out = module(x)
        (out * torch.arange(out.numel()).reshape(out.shape).sin()).sum().backward()
        outputs.append(out)
        grads.append([x.grad.clone(), module.weight.grad.clone(), module.bias.grad.clone()])
        x.grad = None
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-5, atol=1e-5)
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("batch_size", [1, 5])
@pytest.mark.parametrize(
    ("layer", "reference"),
    [
        (lambda: MatmulConv1d(6, 10, 5, padding=2), torch.nn.Conv1d),
        (lambda: MatmulConv1d(6, 10, 1), torch.nn.Conv1d),
        (lambda: MatmulConv1d(6, 6, 3, stride=2, padding=1), torch.nn.Conv1d),
        (lambda: MatmulConvTranspose1d(6, 6, 4, stride=2, padding=1), torch.nn.ConvTranspose1d),
    ],
)
def test_onednn_kernel_acts_as_torch_and_trains_with_torchs_kernels(layer, reference, batch_size):
    torch.manual_seed(0)
    fast = set_kernels(layer(), "onednn")
    slow = reference(fast.in_channels, fast.out_channels, fast.kernel_size, fast.stride, fast.padding)
    slow.load_state_dict(fast.state_dict())
    x = torch.randn(batch_size, 8, 6).transpose(1, 2)  # channels first, not contiguous: as the U-Net's input
    with torch.inference_mode():
        acted = fast(x)
        assert fast in cpu_kernels._PACKED  # the packed weights are kept for the next call
        torch.testing.assert_close(fast(x), acted, rtol=0, atol=0)
    torch.testing.assert_close(acted, slow(x).detach(), rtol=1e-5, atol=1e-5)
    fast.train()
    assert fast not in cpu_kernels._PACKED  # dropped for training
    trained = fast(x.requires_grad_())  # gradients on: torch's own kernels
    torch.testing.assert_close(trained, slow(x), rtol=0, atol=0)
    trained.sum().backward()
    assert fast.weight.grad is not None and fast not in cpu_kernels._PACKED


def set_kernels(layer: torch.nn.Module, choice: str) -> torch.nn.Module:
    return cpu_kernels.set_cpu_kernels(layer, choice)


@pytest.mark.parametrize("kernels", ["matmul", "torch", "auto", "onednn", "auto+bfloat16"])
def test_per_episode_actions_do_not_depend_on_the_batch(kernels, tmp_path, monkeypatch):
    """With reset(seeds=...), row i's actions are a function of its observations and its seed alone: bitwise equal
    whether the row is acted on alone, in a batch of 5 or of 20 (small batches are padded; see Policy)."""
    monkeypatch.setenv("HFPOLICY_CACHE", str(tmp_path))  # "auto" measures afresh
    KERNEL_CACHE.clear()
    torch.manual_seed(0)
    policy = DiffusionPolicy(
        state_config(noise_scheduler_type="DDPM", num_train_timesteps=6, n_action_steps=4),
        dataset_stats=pusht_stats(),
    ).eval()
    kernels, _, dtype = kernels.partition("+")
    if dtype == "bfloat16" and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        pytest.skip("no oneDNN bf16 kernels on this CPU (test_bf16_acting_... checks the refusal)")
    policy.set_cpu_kernels(kernels)
    policy.set_acting_dtype(dtype or "float32", force=True)
    n, steps = 20, 9  # 3 chunks
    observations = [
        {k: 512 * torch.rand(n, *f.shape) for k, f in policy.config.input_features.items()} for _ in range(steps)
    ]
    seeds = [1000 + i for i in range(n)]

    def act(rows: list[int]) -> torch.Tensor:
        policy.reset(seeds=[seeds[i] for i in rows])
        torch.manual_seed(len(rows))  # the global RNG must not matter
        return torch.stack([policy.select_action({k: v[rows] for k, v in obs.items()}) for obs in observations], 1)

    together = act(list(range(n)))
    assert torch.equal(act(list(range(5))), together[:5])
    for i in (0, 7, 19):
        assert torch.equal(act([i]), together[i : i + 1])
    policy.reset()  # without seeds the noise comes from the global RNG: other actions
    assert not torch.equal(torch.stack([policy.select_action(obs) for obs in observations], 1), together)


def test_cpu_kernels_are_the_running_policys_choice_not_the_weights(tmp_path):
    config = state_config(noise_scheduler_type="DDIM", num_inference_steps=4)  # deterministic given the noise
    policy = DiffusionPolicy(config, dataset_stats=pusht_stats()).eval()
    convolutions = [m for m in policy.unet.modules() if isinstance(m, torch.nn.Conv1d | torch.nn.ConvTranspose1d)]
    assert convolutions and all(isinstance(m, MatmulConv1d | MatmulConvTranspose1d) for m in convolutions)
    assert {m.cpu_kernels for m in convolutions} == {"auto"} and policy.cpu_kernels == "auto"
    observation = observation_window(policy.config, batch_size=3)
    noise = torch.randn(3, policy.config.horizon, 2)
    sample, steps, cond = torch.randn(3, policy.config.horizon, 2), torch.tensor([5, 50, 90]), torch.randn(3, 36)
    outputs, actions = {}, {}
    for choice in ("matmul", "onednn", "torch"):
        policy.set_cpu_kernels(choice)
        assert {m.cpu_kernels for m in convolutions} == {choice}
        with torch.no_grad():
            outputs[choice] = policy.unet(sample, steps, cond)
        actions[choice] = policy.predict_action_chunk(observation, noise=noise)
    # One U-Net evaluation agrees up to float rounding, the actions (pixels of 512) within the regression test's 1 px.
    for choice in ("matmul", "onednn"):
        torch.testing.assert_close(outputs[choice], outputs["torch"], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(actions[choice], actions["torch"], rtol=0, atol=1.0)
    assert not torch.equal(outputs["matmul"], outputs["torch"])  # really other kernels
    assert not torch.equal(outputs["onednn"], outputs["matmul"])
    with pytest.raises(ValueError, match="not a choice"):
        policy.set_cpu_kernels("fast")

    policy.save_pretrained(tmp_path / "new")
    assert "fast_kernels" not in json.loads((tmp_path / "new" / CONFIG_FILE).read_text())
    # A config saved before the choice left the config still loads, whatever it said.
    old = json.loads((tmp_path / "new" / CONFIG_FILE).read_text()) | {"fast_kernels": False}
    (tmp_path / "new" / CONFIG_FILE).write_text(json.dumps(old))
    loaded = Policy.from_pretrained(tmp_path / "new")
    assert loaded.cpu_kernels == "auto"
    loaded.set_cpu_kernels("torch")
    assert torch.equal(loaded.predict_action_chunk(observation, noise=noise), actions["torch"])


def test_auto_kernels_are_measured_once_per_machine_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("HFPOLICY_CACHE", str(tmp_path))
    KERNEL_CACHE.clear()
    policy = DiffusionPolicy(state_config(), dataset_stats=pusht_stats()).eval()
    policy.predict_action_chunk(observation_window(policy.config, batch_size=2))
    files = list((tmp_path / "cpu_kernels").glob("*.json"))
    assert len(files) == 1 and torch.__version__.replace("+", "_") in files[0].name
    choices = json.loads(files[0].read_text())["choices"]
    assert choices and set(choices.values()) <= {"matmul", "onednn", "torch"}
    assert all(" act " in key and "batch=2" in key for key in choices)  # few rows (a robot): per batch size
    # Per-episode acting (padded to 16 rows): one choice per layer shape, for every batch size, never "onednn"
    policy.reset(seeds=[1, 2])
    policy.select_action({k: v[:, -1] for k, v in observation_window(policy.config, batch_size=2).items()})
    padded = {k: v for k, v in json.loads(files[0].read_text())["choices"].items() if k not in choices}
    assert padded and all(" act " in key and "batch=16" in key for key in padded)
    assert set(padded.values()) <= {"matmul", "torch"}
    # Training measures per batch size (forward + backward) and leaves the gradients alone.
    policy.train()
    policy(training_batch(policy.config, batch_size=4))["loss"].backward()
    trained = json.loads(files[0].read_text())["choices"]
    assert any(" train " in key and "batch=4" in key for key in trained)
    # A later process reads the choices instead of measuring: a forced choice in the file is obeyed.
    forced = {key: "torch" for key in trained}
    files[0].write_text(json.dumps({"choices": forced}))
    KERNEL_CACHE.clear()
    policy.eval().predict_action_chunk(observation_window(policy.config, batch_size=2))
    assert json.loads(files[0].read_text())["choices"] == forced  # nothing measured again


def test_the_first_process_to_record_a_kernel_choice_decides_it_for_the_machine(tmp_path, monkeypatch):
    """Two processes measuring one layer at once (a run and its resume, say) end with one kernel, the first one's:
    with a choice each, their results would differ in the last bits."""
    from hfpolicy.policies.diffusion.cpu_kernels import KernelCache

    monkeypatch.setenv("HFPOLICY_CACHE", str(tmp_path))
    first, second = KernelCache(), KernelCache()
    assert first.get("layer") is None and second.get("layer") is None  # both read the file before either wrote
    assert first.set("layer", "matmul") == "matmul"
    assert second.set("layer", "torch") == "matmul" and second.get("layer") == "matmul"
    assert second.set("other", "torch") == "torch"
    assert first.set("other", "matmul") == "torch"  # and the first process takes the second's for another layer
    assert KernelCache().get("layer") == "matmul" and KernelCache().get("other") == "torch"  # as the file says


def test_onednn_packed_weights_follow_the_weights():
    """The packed copy is made again when the weights change (a load_state_dict while acting), and dropped by train()."""
    observation, noise = observation_window(state_config(), batch_size=1), torch.randn(1, 16, 2)
    policies = [make_policy("state", seed=seed, noise_scheduler_type="DDIM", num_inference_steps=4) for seed in (0, 1)]
    actions = []
    for policy in policies:
        policy.eval().set_cpu_kernels("onednn")
        actions.append(policy.predict_action_chunk(observation, noise=noise))
    assert not torch.allclose(actions[0], actions[1])
    convolutions = [m for m in policies[0].unet.modules() if isinstance(m, MatmulConv1d | MatmulConvTranspose1d)]
    assert convolutions and all(m in cpu_kernels._PACKED for m in convolutions)
    policies[0].load_state_dict(policies[1].state_dict())
    torch.testing.assert_close(policies[0].predict_action_chunk(observation, noise=noise), actions[1], rtol=0, atol=0)
    policies[0].train()
    assert not any(m in cpu_kernels._PACKED for m in convolutions)


def test_bf16_acting_is_opt_in_refused_without_native_bf16_and_moves_actions_by_a_few_pixels(monkeypatch):
    policy = make_policy("state", noise_scheduler_type="DDIM", num_inference_steps=10).eval()
    observation = observation_window(policy.config, batch_size=4)
    noise = torch.randn(4, policy.config.horizon, 2, generator=torch.Generator().manual_seed(0))
    float32 = policy.predict_action_chunk(observation, noise=noise)
    with pytest.raises(ValueError, match="not a choice"):
        policy.set_acting_dtype("float16")
    monkeypatch.setattr(cpu_kernels, "cpu_flags", lambda: frozenset({"fma", "avx2"}))  # no native bf16
    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():  # no oneDNN bf16 kernels (AVX2): refused even if forced
        with pytest.raises(ValueError, match="needs oneDNN's bf16 kernels"):
            policy.set_acting_dtype("bfloat16", force=True)
        return
    with pytest.raises(ValueError, match="no native bf16.*force=True"):
        policy.set_acting_dtype("bfloat16")
    assert policy.acting_dtype == "float32"
    monkeypatch.setattr(cpu_kernels, "cpu_flags", lambda: frozenset({"avx2", "avx512f", "avx512_bf16"}))
    assert cpu_kernels.native_bf16() and cpu_kernels.instruction_sets()["avx512_bf16"]
    policy.set_acting_dtype("bfloat16")  # a CPU with native bf16 (on this one, emulated if it has none)
    bf16 = policy.predict_action_chunk(observation, noise=noise)
    error = (bf16 - float32).abs().max().item()
    # Pixels of PushT's 512 x 512 workspace: 4-11 px for this untrained small U-Net (DDIM-10, seeds 0-2; docs/speed.md)
    assert 0 < error < 16.0, error
    policy.train()
    policy(training_batch(policy.config, batch_size=2))["loss"].backward()  # training stays in float32
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in policy.parameters())
    policy.eval().set_acting_dtype("float32")
    torch.testing.assert_close(policy.predict_action_chunk(observation, noise=noise), float32, rtol=0, atol=1e-3)
