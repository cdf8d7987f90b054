"""Evaluation: exact per-episode metrics whatever the batching, PushT determinism, videos, eval_info.json, the CLI."""

import functools
import json
import math
import os
import time

import gymnasium as gym
import numpy as np
import pytest
import torch
from envs.toy_env import (
    MAX_END_STEP,
    TOY_ENV_ID,
    ScriptedEpisodesEnv,
    episode_script,
    frame_level,
    reference_episode,
)
from policies.toy_policy import ToyConfig, ToyPolicy, make_toy_policy, toy_stats

from hfpolicy.constants import ACTION, EVAL_INFO_FILE, OBS_STATE
from hfpolicy.envs import AlohaEnvConfig, make_env, make_vector_env, observations_to_batch
from hfpolicy.eval import EvalResult, evaluate, main, rollout, summarize_episodes, wilson_interval
from hfpolicy.features import FeatureType, PolicyFeature
from hfpolicy.io.video import read_video_frames

START_SEED = 100_000
MAX_STEPS = 25  # below MAX_END_STEP, so some toy episodes are cut by max_steps


def toy_vector_env(n_envs: int, parallel: bool = False, lockstep: bool = True) -> gym.vector.VectorEnv:
    """Toy envs as hfpolicy builds vector envs, or (lockstep=False) a plain gymnasium one without parking."""
    if lockstep:
        return make_vector_env([ScriptedEpisodesEnv] * n_envs, parallel=parallel)
    vector_class = gym.vector.AsyncVectorEnv if parallel else gym.vector.SyncVectorEnv
    return vector_class([ScriptedEpisodesEnv] * n_envs, autoreset_mode=gym.vector.AutoresetMode.DISABLED)


@pytest.fixture(scope="module")
def toy_policy():
    return make_toy_policy(low=-50.0, high=150.0)


@pytest.fixture(scope="module")
def reference(toy_policy):
    """Ground truth for episodes 0..11, one env at a time."""
    return [reference_episode(toy_policy, START_SEED + i, MAX_STEPS) for i in range(12)]


def as_dicts(result: EvalResult) -> list[dict]:
    return [{k: v for k, v in e.to_dict().items() if k != "index"} for e in result.episodes]


def test_toy_episodes_cover_the_cases(reference):
    """The property test below is only meaningful if the toy episodes differ in how and when they end."""
    lengths = {e["length"] for e in reference}
    assert len(lengths) >= 6
    assert MAX_STEPS in lengths  # some cut by max_steps
    assert any(e["success"] for e in reference) and not all(e["success"] for e in reference)
    ended = [episode_script(START_SEED + i) for i in range(12)]
    ended = [script for script in ended if script["end_step"] <= MAX_STEPS]
    assert any(s["terminates"] for s in ended) and not all(s["terminates"] for s in ended)  # both ways to end


@pytest.mark.parametrize(
    ("batch_size", "n_episodes", "parallel", "lockstep"),
    [
        (1, 4, False, True),
        (3, 10, False, True),
        (7, 12, False, True),
        (7, 5, False, True),  # one partial batch only
        (3, 7, True, True),
        (3, 7, False, False),  # plain gymnasium vector env: finished envs are really reset, results still exact
        (3, 5, True, False),
    ],
)
def test_evaluate_matches_one_env_at_a_time(toy_policy, reference, batch_size, n_episodes, parallel, lockstep):
    env = toy_vector_env(batch_size, parallel, lockstep)
    try:
        result = evaluate(toy_policy, env, n_episodes, START_SEED, max_steps=MAX_STEPS, progress=False)
    finally:
        env.close()
    assert [e.index for e in result.episodes] == list(range(n_episodes))
    assert as_dicts(result) == reference[:n_episodes]  # exact float equality
    assert all(e.sum_reward < 100 for e in result.episodes)  # no poison reward from a step after the end


def test_evaluate_explicit_episode_indices(toy_policy, reference):
    """A rank of a distributed evaluation runs its own share of indices and gets the same records."""
    env = toy_vector_env(2)
    try:
        result = evaluate(toy_policy, env, episode_indices=[9, 2, 5], max_steps=MAX_STEPS, progress=False)
    finally:
        env.close()
    assert [e.index for e in result.episodes] == [2, 5, 9]
    assert as_dicts(result) == [reference[i] for i in (2, 5, 9)]


def test_rollout_callbacks_and_partial_batch(toy_policy, reference):
    env = toy_vector_env(4)
    ended = []
    try:
        records = rollout(
            toy_policy,
            env,
            seeds=[START_SEED + 3, START_SEED + 4],
            max_steps=MAX_STEPS,
            episode_indices=[3, 4],
            on_episode_end=lambda slot, record: ended.append((slot, record.index)),
        )
    finally:
        env.close()
    assert sorted(ended) == [(0, 3), (1, 4)]
    assert [r.length for r in records] == [reference[3]["length"], reference[4]["length"]]


def test_rollout_with_render_slots_needs_on_frame(toy_policy):
    env = toy_vector_env(1)
    try:
        with pytest.raises(ValueError, match="render_slots needs an on_frame"):
            rollout(toy_policy, env, seeds=[START_SEED], max_steps=5, render_slots=[0])
    finally:
        env.close()


def test_evaluate_rejects_bad_arguments(toy_policy):
    env = toy_vector_env(1)
    try:
        with pytest.raises(ValueError, match="either n_episodes or episode_indices"):
            evaluate(toy_policy, env, 3, episode_indices=[0], max_steps=5)
        with pytest.raises(ValueError, match="videos_dir"):
            evaluate(toy_policy, env, 3, n_videos=1, max_steps=5)
        with pytest.raises(ValueError, match="no time limit"):
            evaluate(toy_policy, env, 3)
    finally:
        env.close()


@pytest.mark.parametrize("parallel", [False, True])
def test_toy_videos_have_one_frame_per_step_plus_the_first(toy_policy, reference, tmp_path, parallel):
    env = toy_vector_env(3, parallel=parallel)
    try:
        result = evaluate(
            toy_policy, env, 7, START_SEED, max_steps=MAX_STEPS, n_videos=4, videos_dir=tmp_path, progress=False
        )
        n_renders = sum(env.get_attr("n_renders"))
    finally:
        env.close()
    # Only the recorded episodes were drawn, each once per step plus the first frame (nothing after its end).
    assert n_renders == sum(reference[i]["length"] + 1 for i in range(4))
    assert [p.name for p in result.video_paths] == [f"eval_episode_{i}.mp4" for i in range(4)]
    assert sorted(tmp_path.iterdir()) == sorted(result.video_paths)  # no temp files left, no extra videos
    for index, path in enumerate(result.video_paths):
        frames = read_video_frames(path)
        length = reference[index]["length"]
        assert frames.shape == (length + 1, 32, 32, 3)
        levels = frames.reshape(len(frames), -1).mean(axis=1)
        np.testing.assert_allclose(levels, [frame_level(t) for t in range(length + 1)], atol=3)


def pusht_policy(obs_type: str):
    """Deterministic elementwise policy for PushT: steers the agent around a point derived from its position."""
    return make_toy_policy(obs_type, initial_gain=0.8)


def test_pusht_batch_1_serial_and_parallel_give_identical_episodes():
    policy = pusht_policy("pixels_agent_pos")
    results = {}
    for name, n_envs, parallel in [("single", 1, False), ("serial", 8, False), ("parallel", 8, True)]:
        env = make_env("pusht", n_envs, parallel=parallel, episode_length=30)
        try:
            results[name] = as_dicts(evaluate(policy, env, 8, START_SEED, progress=False))
        finally:
            env.close()
    # Lengths, successes and seeds are exact; rewards to 1e-12: gym-pusht computes the coverage from a Python set of
    # shapes (pymunk's Body.shapes), whose order follows memory addresses, so the area can differ in the last bit.
    for name in ("serial", "parallel"):
        for expected, got in zip(results["single"], results[name], strict=True):
            assert {**got, "sum_reward": 0, "max_reward": 0} == {**expected, "sum_reward": 0, "max_reward": 0}
            assert got["sum_reward"] == pytest.approx(expected["sum_reward"], rel=1e-12, abs=1e-12)
            assert got["max_reward"] == pytest.approx(expected["max_reward"], rel=1e-12, abs=1e-12)
    assert len({e["sum_reward"] for e in results["single"]}) == 8  # the seeds give different episodes
    assert all(e["length"] == 30 for e in results["single"])  # truncated by the time limit


def test_pusht_videos_and_eval_info(tmp_path):
    policy = pusht_policy("environment_state_agent_pos")
    env = make_env("pusht", 2, obs_type="environment_state_agent_pos", episode_length=12, render_size=96)
    try:
        result = evaluate(policy, env, 3, n_videos=2, videos_dir=tmp_path / "videos", progress=False)
    finally:
        env.close()
    for episode, path in zip(result.episodes, result.video_paths, strict=False):
        assert read_video_frames(path).shape == (episode.length + 1, 96, 96, 3)
    assert len(result.video_paths) == 2

    saved = json.loads(result.save(tmp_path / EVAL_INFO_FILE).read_text())
    assert [e["seed"] for e in saved["per_episode"]] == [START_SEED, START_SEED + 1, START_SEED + 2]
    aggregated = saved["aggregated"]
    assert aggregated["n_episodes"] == 3
    assert aggregated["avg_sum_reward"] == pytest.approx(np.mean([e.sum_reward for e in result.episodes]))
    assert aggregated["avg_max_reward"] == pytest.approx(np.mean([e.max_reward for e in result.episodes]))
    assert aggregated["episodes_per_s"] == pytest.approx(3 / aggregated["eval_s"])
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # atomic: no temp file left


def test_wilson_interval_known_values():
    # Reference values of the Wilson score interval (95%): Newcombe (1998), Brown, Cai & DasGupta (2001).
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(81, 263) == pytest.approx((0.2553, 0.3662), abs=1e-4)
    low, high = wilson_interval(50, 50)
    assert high == 1.0 and 0.92 < low < 0.93


def test_summarize_episodes_success_rate(reference):
    from hfpolicy.eval import EpisodeRecord

    episodes = [EpisodeRecord(index=i, **e) for i, e in enumerate(reference)]
    summary = summarize_episodes(episodes, eval_s=2.0)
    n_successes = sum(e["success"] for e in reference)
    assert summary["pc_success"] == pytest.approx(100 * n_successes / len(reference))
    low, high = summary["pc_success_ci95"]
    assert low < summary["pc_success"] < high
    assert summary["episodes_per_s"] == len(reference) / 2.0


def test_eval_cli_end_to_end(tmp_path, capsys):
    policy = pusht_policy("environment_state_agent_pos")
    policy.save_pretrained(tmp_path / "policy")
    out = tmp_path / "eval"
    argv = [
        f"--policy.path={tmp_path / 'policy'}",
        "--env.type=pusht",
        "--env.episode_length=10",
        "--env.render_size=96",
        "--eval.n_episodes=3",
        "--eval.batch_size=2",
        "--eval.n_videos=2",
        f"--output_dir={out}",
        "--policy.device=cpu",
        "--progress=false",
        "--num_threads=1",
    ]
    assert main(argv) == 0
    assert torch.get_num_threads() == 1  # set deliberately, not left to the environment
    assert "success" in capsys.readouterr().out
    info = json.loads((out / EVAL_INFO_FILE).read_text())
    assert [e["index"] for e in info["per_episode"]] == [0, 1, 2]
    streamed = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert sorted(streamed, key=lambda e: e["index"]) == info["per_episode"]  # written as the episodes ended
    assert all(e["length"] == 10 for e in info["per_episode"])
    assert sorted(p.name for p in (out / "videos").iterdir()) == ["eval_episode_0.mp4", "eval_episode_1.mp4"]
    assert read_video_frames(out / "videos" / "eval_episode_0.mp4").shape == (11, 96, 96, 3)
    # The env's obs type was chosen from the policy's inputs (keypoints), and the batch obs reached the policy.
    assert math.isfinite(info["aggregated"]["avg_sum_reward"])

    # An obs type that lacks the policy's inputs: a clear error naming the fix.
    assert main([*argv[:2], "--env.obs_type=pixels_agent_pos", f"--output_dir={tmp_path / 'bad'}"]) == 2
    err = capsys.readouterr().err
    assert "observation.environment_state" in err and "--env.obs_type=environment_state_agent_pos" in err
    assert not (tmp_path / "bad").exists()

    # A TD-MPC flag on another policy type: one line naming the flag, before anything is written.
    assert main([*argv[:2], "--policy.use_mpc=true", f"--output_dir={tmp_path / 'mpc'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--policy.use_mpc" in err and "'toy' policy" in err
    assert not (tmp_path / "mpc").exists()


def test_eval_cli_errors(tmp_path, capsys):
    assert main(["--env.type=pusht"]) == 2
    assert "--policy.path is required" in capsys.readouterr().err
    assert main([f"--policy.path={tmp_path}"]) == 2
    assert "config.json" in capsys.readouterr().err
    assert main(["--policy.path=x", "--env.type=pushT"]) == 2  # one line, no usage dump
    err = capsys.readouterr().err
    assert "pusht" in err and err.count("\n") == 1
    assert main([f"--policy.path={tmp_path}", "--env.obs_type=state"]) == 2
    assert "valid obs types: pixels_agent_pos" in capsys.readouterr().err


def test_max_steps_default_is_the_env_time_limit(toy_policy):
    env = make_vector_env([functools.partial(gym.make, TOY_ENV_ID, max_episode_steps=4)] * 2)
    try:
        records = rollout(toy_policy, env, seeds=[START_SEED, START_SEED + 1])
    finally:
        env.close()
    assert all(r.length <= 4 for r in records)
    assert MAX_END_STEP > 4


# --- invalid actions: non-finite ones stop the evaluation; out-of-space ones reach the env unchanged, counted --------
class BoundedToyEnv(ScriptedEpisodesEnv):
    """The toy env with a bounded action space; it keeps every action it receives."""

    bound = 1.0

    def __init__(self):
        super().__init__()
        self.action_space = gym.spaces.Box(-self.bound, self.bound, (2,), np.float32)
        self.received = []

    def step(self, action):
        self.received.append(np.array(action))
        return super().step(action)


def test_non_finite_action_stops_the_evaluation_naming_episode_and_step():
    from hfpolicy.eval import InvalidActionError

    policy = make_toy_policy(low=-50.0, high=150.0)
    with torch.no_grad():
        policy.offset[3, 1] = float("nan")  # the 3rd executed action of every chunk (n_obs_steps=2: index 1 + 2)
    env = toy_vector_env(2)
    try:
        with pytest.raises(InvalidActionError, match=r"non-finite action .* in episode 0 \(seed 100000\) at step 3"):
            evaluate(policy, env, 2, START_SEED, max_steps=MAX_STEPS, progress=False)
    finally:
        env.close()


def test_out_of_space_actions_reach_the_env_unchanged_and_are_counted(toy_policy, reference):
    env = make_vector_env([BoundedToyEnv] * 3, parallel=False)
    try:
        result = evaluate(toy_policy, env, 3, START_SEED, max_steps=MAX_STEPS, progress=False)
        received = np.concatenate([np.stack(e.unwrapped.received) for e in env.envs])
    finally:
        env.close()
    assert np.abs(received).max() > 10 * BoundedToyEnv.bound  # the policy's actions, far outside [-1, 1], arrived
    # every step of every episode lay outside the space, and it is counted ...
    assert [e.n_actions_outside_space for e in result.episodes] == [e.length for e in result.episodes]
    assert result.aggregated["n_actions_outside_space"] == sum(e.length for e in result.episodes) > 0
    # ... and the episodes are exactly those of the unbounded env (the reward depends on the applied action)
    counted = [
        {**r, "n_actions_outside_space": r["length"], "outside_steps": list(range(1, r["length"] + 1))}
        for r in reference[:3]
    ]
    assert as_dicts(result) == counted


def test_actions_inside_the_space_are_not_counted(toy_policy, reference):
    class WideToyEnv(BoundedToyEnv):
        bound = 1e6

    env = make_vector_env([WideToyEnv] * 3, parallel=False)
    try:
        result = evaluate(toy_policy, env, 3, START_SEED, max_steps=MAX_STEPS, progress=False)
    finally:
        env.close()
    assert as_dicts(result) == reference[:3]  # exact, with n_actions_outside_space = 0


# Joint targets outside ALOHA's declared Box (its actuators' ctrlrange) and outside [-1, 1]; dyadic, so exact in float32
ALOHA_TARGETS = [3.5, -2.0, 1.75, 0.5, -2.5, -3.25, 1.25, -3.5, 1.5, -1.875, 0.25, 2.5, 3.25, -0.25]


def fixed_aloha_policy(targets: list[float]) -> ToyPolicy:
    """A state policy whose every action is `targets` (gain 0; min/max stats of -1/1 make normalization the identity)."""
    joints = len(targets)
    config = ToyConfig(
        input_features={OBS_STATE: PolicyFeature(FeatureType.STATE, (joints,))},
        output_features={ACTION: PolicyFeature(FeatureType.ACTION, (joints,))},
    )
    policy = ToyPolicy(config, dataset_stats=toy_stats(config, low=-1.0, high=1.0))
    with torch.no_grad():
        policy.gain = torch.nn.Parameter(torch.zeros(joints))
        policy.offset = torch.nn.Parameter(torch.tensor(targets).expand(config.horizon, joints).clone())
    return policy


def test_aloha_gets_the_policys_joint_targets_exactly():
    """LeRobot's eval hands gym-aloha the policy's action as it is; so does hfpolicy: the controls MuJoCo receives are
    the targets (grippers unnormalized, second finger mirrored), though they lie outside the env's declared space."""
    from gym_aloha.constants import unnormalize_puppet_gripper_position

    policy = fixed_aloha_policy(ALOHA_TARGETS)
    cfg = AlohaEnvConfig(task="AlohaTransferCube-v0", obs_type="environment_state_agent_pos")
    env = cfg.make(2)
    try:
        space = env.single_action_space
        targets = np.asarray(ALOHA_TARGETS, dtype=np.float32)
        assert ((targets < space.low) | (targets > space.high)).sum() >= 10
        with torch.inference_mode():
            policy.reset()
            observation, _ = env.reset(seed=[0, 1])
            chosen = policy.select_action(observations_to_batch(observation, "cpu", {OBS_STATE}))
        np.testing.assert_array_equal(chosen.numpy(), np.stack([targets, targets]))  # the policy's action is exact

        records = rollout(policy, env, seeds=[3, 4], max_steps=3)
        controls = [e.unwrapped.physics.data.ctrl.copy() for e in env.envs]
    finally:
        env.close()
    t = targets.astype(np.float64)
    left, right = unnormalize_puppet_gripper_position(t[6]), unnormalize_puppet_gripper_position(t[13])
    expected = np.concatenate([t[:6], [left, -left], t[7:13], [right, -right]])
    for control in controls:
        np.testing.assert_array_equal(control, expected)
    assert [r.n_actions_outside_space for r in records] == [r.length for r in records] == [3, 3]


def test_eval_cli_checks_the_output_dir_before_running_episodes(tmp_path, capsys):
    policy = pusht_policy("environment_state_agent_pos")
    policy.save_pretrained(tmp_path / "policy")
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    argv = [f"--policy.path={tmp_path / 'policy'}", "--eval.n_episodes=2", "--progress=false", "--num_threads=1"]
    start = time.monotonic()
    assert main([*argv, f"--output_dir={blocker / 'eval'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith(f"hfpolicy eval: error: --output_dir={blocker / 'eval'} cannot be written") and "\n" not in err
    )
    assert time.monotonic() - start < 10  # before any episode ran


def test_records_are_handed_out_as_episodes_end_so_a_failure_keeps_them():
    from hfpolicy.eval import InvalidActionError

    policy = make_toy_policy(low=-50.0, high=150.0)
    with torch.no_grad():
        policy.offset[3, 1] = float("nan")  # the 3rd action: episode 13 (1 step long) ends before it, 14 does not
    env = toy_vector_env(1)
    kept = []
    try:
        with pytest.raises(InvalidActionError, match="episode 14"):
            evaluate(
                policy, env, episode_indices=[13, 14], max_steps=MAX_STEPS, progress=False, on_episode_end=kept.append
            )
    finally:
        env.close()
    assert [(r.index, r.length) for r in kept] == [(13, 1)]


def test_eval_cli_refuses_nan_weights_before_running(tmp_path, capsys):
    policy = pusht_policy("environment_state_agent_pos")
    with torch.no_grad():
        next(p for p in policy.parameters() if p.is_floating_point()).fill_(float("nan"))
    policy.save_pretrained(tmp_path / "policy")
    out = tmp_path / "eval"
    argv = [f"--policy.path={tmp_path / 'policy'}", f"--output_dir={out}", "--eval.n_episodes=2", "--num_threads=1"]
    assert main([*argv, "--env.episode_length=5", "--progress=false", "--eval.n_videos=0"]) == 2
    assert "NaN or inf" in capsys.readouterr().err  # refused at load: NaN weights never reach the env


def test_diffusion_policy_episodes_depend_on_their_seed_alone():
    """A sampling policy's episodes are functions of their seeds: each env slot draws its noise from a generator seeded
    with its episode's seed (Policy.reset(seeds=...)), whatever the batch size, the env kind, the run or the global RNG.
    """
    from policies.diffusion.diffusion_setup import pusht_stats, state_config

    from hfpolicy.policies.diffusion import DiffusionPolicy

    torch.manual_seed(0)
    # DDPM draws noise at every denoising step too, so both noise paths (initial sample, sampler steps) are covered.
    config = state_config(noise_scheduler_type="DDPM", num_train_timesteps=8, n_action_steps=4)
    policy = DiffusionPolicy(config, dataset_stats=pusht_stats()).eval()
    runs = {}
    for name, n_envs, parallel, global_seed in [
        ("batch 5", 5, False, 1),
        ("batch 5 again", 5, False, 2),
        ("batch 1", 1, False, 3),
        ("parallel batch 5", 5, True, 4),
    ]:
        torch.manual_seed(global_seed)  # the global RNG must not matter
        env = make_env("pusht", n_envs, parallel=parallel, obs_type="environment_state_agent_pos", episode_length=16)
        try:
            runs[name] = as_dicts(evaluate(policy, env, 5, START_SEED, progress=False))
        finally:
            env.close()
    reference = runs.pop("batch 5")
    for name, episodes in runs.items():
        for expected, got in zip(reference, episodes, strict=True):
            # Field by field. Rewards to 1e-12 only: gym-pusht sums its coverage in memory-address order (see above).
            assert {**got, "sum_reward": 0, "max_reward": 0} == {**expected, "sum_reward": 0, "max_reward": 0}, name
            assert got["sum_reward"] == pytest.approx(expected["sum_reward"], rel=1e-12, abs=1e-12), name
    assert len({e["sum_reward"] for e in reference}) == 5  # the seeds give different episodes


def test_policy_reset_seeds_must_match_the_batch():
    from policies.diffusion.diffusion_setup import pusht_stats, state_config

    from hfpolicy.policies.diffusion import DiffusionPolicy

    policy = DiffusionPolicy(state_config(num_inference_steps=2, noise_scheduler_type="DDIM"), pusht_stats()).eval()
    policy.reset(seeds=[1, 2, 3])
    observation = {key: torch.zeros(2, *f.shape) for key, f in policy.config.input_features.items()}
    with pytest.raises(RuntimeError, match="3 seeds but the batch has 2 envs"):
        policy.select_action(observation)


def test_an_unwritable_videos_dir_is_named(tmp_path):
    from hfpolicy.eval import VideoRecorder
    from hfpolicy.io.video import VideoWriteError, encode_video

    blocker = tmp_path / "a_file"  # a file where the videos folder should be: unwritable, even for root
    blocker.write_text("not a folder")
    frames = [np.zeros((16, 16, 3), np.uint8)] * 3
    with pytest.raises(VideoWriteError, match=rf"cannot write the video {blocker}/videos/a.mp4 .*writable"):
        encode_video(frames, blocker / "videos" / "a.mp4", fps=10)
    recorder = VideoRecorder(fps=10)  # the eval's background encoder: the same line, not a repr
    recorder.add_frame(blocker / "b.mp4", frames[0])
    recorder.finish(blocker / "b.mp4")
    with pytest.raises(VideoWriteError, match=rf"cannot write the video {blocker}/b.mp4"):
        recorder.close()


def test_default_threads_leave_a_loaded_machine_one_thread():
    from hfpolicy.eval.cli import default_eval_threads, set_torch_threads

    assert default_eval_threads(cores=2, load=11.0) == 1  # measured: 2 threads 637 s, 1 thread 40-68 s (load 11)
    assert default_eval_threads(cores=2, load=0.1) == 2  # an idle machine: every core
    assert default_eval_threads(cores=16, load=4.2) == 12
    threads = torch.get_num_threads()
    try:
        assert set_torch_threads(None) == default_eval_threads(len(os.sched_getaffinity(0)), os.getloadavg()[0])
    finally:
        torch.set_num_threads(threads)


def test_eval_info_says_which_policy_checkpoint_and_command_it_evaluated(tmp_path, monkeypatch, hub_server):
    """eval_info.json's provenance: the policy (a folder, or a Hub repo with the revision asked for and the commit
    it resolved to), the step and EMA-ness its weights recorded, the command, the hfpolicy version."""
    import shlex

    from huggingface_hub import HfApi

    import hfpolicy
    from hfpolicy.policies import Policy
    from hfpolicy.policies.module import WeightsOrigin

    policy = pusht_policy("environment_state_agent_pos")
    policy.weights_origin = WeightsOrigin(training_step=1234, ema=True)
    policy.save_pretrained(tmp_path / "policy")
    assert Policy.from_pretrained(tmp_path / "policy").weights_origin == WeightsOrigin(1234, True)
    policy.push_to_hub("user/provenance-toy")
    commit = HfApi().model_info("user/provenance-toy").sha
    quick = [
        "--env.type=pusht",
        "--env.episode_length=4",
        "--eval.n_episodes=2",
        "--eval.n_videos=0",
        "--progress=false",
    ]
    for source in (str(tmp_path / "policy"), "user/provenance-toy"):
        out = tmp_path / f"eval_{len(source)}"
        argv = ["eval", f"--policy.path={source}", *quick, f"--output_dir={out}", "--num_threads=1"]
        monkeypatch.setattr("sys.argv", ["/venv/bin/hfpolicy", *argv])
        assert main(argv[1:]) == 0
        provenance = json.loads((out / EVAL_INFO_FILE).read_text())["provenance"]
        where = (
            {"folder": str((tmp_path / "policy").resolve())}
            if source.startswith("/")
            else {"revision": "main", "commit": commit}
        )
        assert provenance == {
            "policy": source,
            "policy_type": "toy",
            **where,
            "checkpoint_step": 1234,
            "ema_weights": True,
            "env": "pusht",
            "command": "hfpolicy " + shlex.join(argv),
            "hfpolicy_version": hfpolicy.__version__,
        }
