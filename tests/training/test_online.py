"""Online training's parts on the real PushT env: expert labels, the online dataset, batch mixing, seed checks.
(The whole loop, with kill-and-resume and two processes, is tested in tests/test_train.py.)"""

import gc
import json
import os

import gym_pusht  # noqa: F401  (registers gym_pusht/PushT-v0)
import gymnasium as gym
import numpy as np
import pytest
import torch
from accelerate import Accelerator
from policies.toy_policy import make_toy_policy
from test_faults_checkpoints import fill, small_tmpfs  # noqa: F401 (a fixture)
from training.tiny_online_run import FLAGS, ONLINE_FLAGS

from hfpolicy.constants import ACTION, DONE, OBS_ENV_STATE, OBS_IMAGE, OBS_STATE, REWARD, SUCCESS
from hfpolicy.datasets import PolicyDataset
from hfpolicy.datasets.batch_images import frames_to_float
from hfpolicy.datasets.mixture import DATASET_INDEX
from hfpolicy.datasets.pusht_zarr import pusht_features
from hfpolicy.envs import PushTEnvConfig
from hfpolicy.experts import PushTExpert, run_expert_episode
from hfpolicy.training.config import OnlineConfig, TrainConfig, TrainConfigError, validate_train_config
from hfpolicy.training.online import (
    ONLINE_DATA_DIR,
    OnlineDataError,
    OnlineTraining,
    collect_episodes,
    reset_argument,
)

FEATURES = pusht_features(environment_state=True, images=False)
ENV = PushTEnvConfig(obs_type="environment_state_agent_pos", episode_length=40)


def online_training(tmp_path, **fields) -> OnlineTraining:
    cfg = OnlineConfig(every=10, n_episodes=3, **fields)
    deltas = {OBS_STATE: [-0.1, 0.0], OBS_ENV_STATE: [-0.1, 0.0], ACTION: [0.1 * i for i in range(-1, 15)]}
    return OnlineTraining(cfg, tmp_path, ENV, FEATURES, 10, deltas, drop_n_last_frames=7, seed=3)


def test_expert_driven_episodes_are_the_experts_own_and_labels_its_actions():
    """With the expert driving every step, an online episode is the expert's own episode of that seed: the labels
    are exactly the actions it takes, frame t holds the observation before action t."""
    policy = make_toy_policy("environment_state_agent_pos")
    cfg = OnlineConfig(every=1, labels="expert", expert_drive_prob=1.0)
    episodes, data = collect_episodes(policy, ENV, [11, 12], cfg, FEATURES)
    assert data == episodes
    env = gym.make("gym_pusht/PushT-v0", obs_type="environment_state_agent_pos", max_episode_steps=40)
    for episode in episodes:
        reference = run_expert_episode(env, PushTExpert(), seed=episode.seed, max_steps=40)
        assert np.array_equal(np.stack(episode.frames[ACTION]), reference.actions)
        assert episode.n_expert_steps == episode.length == reference.n_steps
        assert np.allclose(np.stack(episode.frames[REWARD]), reference.rewards)
        env.reset(seed=episode.seed)
        assert np.array_equal(episode.frames[OBS_STATE][0], env.unwrapped.get_obs()["agent_pos"])


def test_policy_driven_expert_labels_differ_from_the_actions_applied():
    """The toy policy drives; the expert labels what it would do (its plan re-made as the policy strays)."""
    policy = make_toy_policy("environment_state_agent_pos")
    cfg = OnlineConfig(every=1, labels="expert")
    (episode,), _ = collect_episodes(policy, ENV, [5], cfg, FEATURES)
    assert episode.length == 40 and episode.n_expert_steps == 0 and episode.n_replans > 10
    labels, applied = np.stack(episode.frames[ACTION]), np.stack(episode.applied)
    assert np.abs(labels - applied).max() > 50  # the toy policy does not act like the expert
    # Each label is paced from where the env's controller was heading: the target the policy commanded last.
    assert np.linalg.norm(labels[1:] - applied[:-1], axis=1).max() <= 20.0
    assert set(episode.frames) == {OBS_STATE, OBS_ENV_STATE, ACTION, REWARD, SUCCESS, DONE}


def test_rounds_write_a_dataset_that_counts_what_they_collected(tmp_path):
    online = online_training(tmp_path, labels="expert")
    accelerator, policy = Accelerator(cpu=True), make_toy_policy("environment_state_agent_pos")
    assert online.is_due(10) and not online.is_due(15) and not online.is_due(5)
    stats = [online.collect(accelerator, policy, None, 10)]
    assert online.is_due(20) and not online.is_due(10) and online.round_seeds() == list(range(1_000_003, 1_000_006))
    first_round = tmp_path / ONLINE_DATA_DIR / "data" / "chunk-000" / "file-000.parquet"
    written = (first_round.stat().st_ino, first_round.read_bytes())
    stats.append(online.collect(accelerator, policy, None, 20))
    assert (first_round.stat().st_ino, first_round.read_bytes()) == written  # appended to, not rewritten
    dataset = PolicyDataset("local/online", root=tmp_path / ONLINE_DATA_DIR)
    assert dataset.num_episodes == 6 == stats[-1]["online/episodes"] == online.n_episodes
    assert dataset.num_frames == 6 * 40 == online.n_frames
    meta = json.loads((tmp_path / ONLINE_DATA_DIR / "meta" / "hfpolicy_online.json").read_text())
    assert [r["seeds"] for r in meta["rounds"]] == [
        list(range(1_000_000, 1_000_003)),
        list(range(1_000_003, 1_000_006)),
    ]
    assert set(dataset.features) >= set(FEATURES)

    # Batches: the last `ratio` share of rows comes from the online data, as a function of (seed, step, rank).
    offline = {key: torch.zeros((8, *value.shape[1:])) for key, value in online.dataset.get_batch([0] * 8).items()
               if isinstance(value, torch.Tensor)}  # fmt: skip
    mixed = online.mix(offline, step=21, rank=0)
    assert torch.equal(mixed[ACTION][:4], offline[ACTION][:4]) and mixed[ACTION][4:].abs().sum() > 0
    assert torch.equal(online.mix(offline, 21, 0)[ACTION], mixed[ACTION])
    assert not torch.equal(online.mix(offline, 22, 0)[ACTION], mixed[ACTION])
    assert not torch.equal(online.mix(offline, 21, 1)[ACTION], mixed[ACTION])
    online.member_index = 2  # after a mixture of two datasets, the online rows say they come from a third
    indexed = online.mix({**offline, DATASET_INDEX: torch.zeros(8, dtype=torch.int64)}, 21, 0)
    assert indexed[DATASET_INDEX].tolist() == [0] * 4 + [2] * 4 and torch.equal(indexed[ACTION], mixed[ACTION])

    # Resume from a checkpoint at step 15 (after the first round): the second round is dropped from disk too.
    resumed = online_training(tmp_path, labels="expert")
    resumed.restore(accelerator, 15, {"online_episodes": 3})
    assert PolicyDataset("local/online", root=tmp_path / ONLINE_DATA_DIR).num_episodes == 3 == resumed.n_episodes
    with pytest.raises(TrainConfigError, match="does not belong to this checkpoint"):
        online_training(tmp_path, labels="expert").restore(accelerator, 15, {"online_episodes": 5})

    # Resume from a checkpoint before the first round: no online data at all, on disk or in the batches.
    before = online_training(tmp_path, labels="expert")
    before.restore(accelerator, 5, {"online_episodes": 0})
    assert before.dataset is None and before.n_episodes == 0 and not (tmp_path / ONLINE_DATA_DIR).exists()
    assert before.mix(offline, 6, 0) is offline


def test_self_imitation_keeps_only_successful_episodes(tmp_path):
    online = online_training(tmp_path, labels="policy")
    stats = online.collect(Accelerator(cpu=True), make_toy_policy("environment_state_agent_pos"), None, 10)
    assert stats["online/round_success"] == 0.0  # the toy policy never succeeds: nothing is kept
    assert online.n_episodes == 0 and online.dataset is None and not (tmp_path / ONLINE_DATA_DIR).exists()
    batch = {ACTION: torch.ones(4, 16, 2)}
    assert online.mix(batch, 11, 0) is batch  # no online data yet: offline batches as they are


def test_recovery_demos_start_where_the_policy_failed():
    """Recovery labels: the expert demonstrates from the state each failed episode ended in."""
    policy = make_toy_policy("environment_state_agent_pos")
    env_cfg = PushTEnvConfig(obs_type="environment_state_agent_pos", episode_length=200)  # time to finish from there
    played, demos = collect_episodes(policy, env_cfg, [21, 22], OnlineConfig(every=1, labels="recovery"), FEATURES)
    assert not any(e.success for e in played) and len(demos) == 2 and all(d.success for d in demos)
    for failed, demo in zip(played, demos, strict=True):
        assert demo.seed == failed.seed and demo.n_expert_steps == demo.length
        assert np.allclose(demo.frames[OBS_STATE][0], failed.final_state[:2])  # the agent where the policy left it
        env = gym.make("gym_pusht/PushT-v0", obs_type="environment_state_agent_pos")
        env.reset(options={"reset_to_state": reset_argument(failed.final_state)})
        block = env.unwrapped.block  # the block pose of the failed episode's end, reproduced
        assert np.allclose([*block.position, block.angle], failed.final_state[2:], atol=1e-6)
        assert np.allclose(demo.frames[OBS_ENV_STATE][0], failed.frames[OBS_ENV_STATE][-1], atol=50)


def test_online_seeds_never_overlap_the_evaluation_or_the_recording():
    cfg = TrainConfig(steps=1000)
    cfg.online = OnlineConfig(every=100, n_episodes=50, start_seed=99_800)  # 10 rounds: 99800..100299
    with pytest.raises(
        TrainConfigError, match=r"overlap the evaluation's seeds 100000\.\.100049.*--online\.start_seed"
    ):
        validate_train_config(cfg)
    cfg.online = OnlineConfig(every=100, n_episodes=50, start_seed=0)
    cfg.dataset.scripted_episodes = 500
    with pytest.raises(TrainConfigError, match="overlap the scripted recording's seeds 0..499"):
        validate_train_config(cfg)
    cfg.online = OnlineConfig(every=100, n_episodes=50)  # the default start seed is far from both
    validate_train_config(cfg)
    cfg.online = OnlineConfig(every=100, labels="policy", expert_drive_prob=0.5)
    with pytest.raises(TrainConfigError, match="expert_drive_prob"):
        validate_train_config(cfg)


@pytest.mark.slow
def test_push_publishes_the_online_data_beside_the_model(pusht_state_dataset, tmp_path, hub_server):
    from huggingface_hub import HfApi, ModelCard

    from hfpolicy.hub.push import main as push_main
    from hfpolicy.training import parse_train_config, train

    flags = [
        f"--dataset.root={pusht_state_dataset}", f"--output_dir={tmp_path / 'run'}", "--policy.type=diffusion",
        f"--dataset.input_features=[{OBS_STATE},{OBS_ENV_STATE}]", "--policy.down_dims=[16,32]",
        "--policy.diffusion_step_embed_dim=16", "--policy.noise_scheduler_type=DDIM", "--policy.num_inference_steps=2",
        "--batch_size=8", "--tracker=none", "--progress=false", "--num_threads=1", "--steps=6", "--eval.freq=0",
        "--online.every=2", "--online.n_episodes=2", "--online.labels=expert", "--env.episode_length=20",
    ]  # fmt: skip
    train(parse_train_config(flags))
    argv = [f"--run={tmp_path / 'run'}", "--repo_id=user/online-model", "--online_data_repo_id=user/online-data"]
    assert push_main(argv) == 0
    files = set(HfApi().list_repo_files("user/online-data", repo_type="dataset"))
    assert {"meta/info.json", "meta/hfpolicy_online.json"} <= files
    card = ModelCard.load("user/online-model").text
    assert "every 2 steps, 2 episodes of the policy (labelled by the scripted expert (DAgger))" in card
    assert "it trained on 4 online episodes" in card and "(https://huggingface.co/datasets/user/online-data)" in card


@pytest.mark.slow
def test_a_small_online_run_beats_the_same_run_offline(tmp_path, monkeypatch):
    """The whole loop earns its keep: a tiny state ACT trained 600 steps on 4 scripted demos, offline and then with
    three rounds of recovery demos, ends clearly better with them on the same 16 evaluation seeds. Every part is
    seeded (training, online seeds, per-episode eval seeds), so the margin is no luck of sampling. Measured under
    load 12: avg max reward 0.208 offline against 0.347 online (with --seed=1: 0.216 against 0.288; DAgger labels
    instead of recovery demos gave 0.192 at 3x the rollout time at this scale)."""
    from hfpolicy.training import parse_train_config, train

    monkeypatch.setenv("HFPOLICY_CACHE", str(tmp_path / "cache"))  # the 4 demos are recorded once, for both runs
    flags = FLAGS
    online_flags = [*ONLINE_FLAGS, "--online.labels=recovery"]
    offline = train(parse_train_config([*flags, f"--output_dir={tmp_path / 'offline'}"]))
    online = train(parse_train_config([*flags, *online_flags, f"--output_dir={tmp_path / 'online'}"]))
    before, after = offline.eval_summary["avg_max_reward"], online.eval_summary["avg_max_reward"]
    assert after > before + 0.06 and after > 1.25 * before, f"avg max reward offline {before:.3f}, online {after:.3f}"
    meta = json.loads((tmp_path / "online" / ONLINE_DATA_DIR / "meta" / "hfpolicy_online.json").read_text())
    assert [r["step"] for r in meta["rounds"]] == [150, 300, 450]  # none after the last step


def test_online_rows_carry_their_frames_as_the_offline_batch_does(tmp_path):
    # A run's batches carry uint8 frames (made float on the device): the online rows mixed in must be uint8 too,
    # the same frames as in a float batch, not floats in [0, 1] cast to uint8.
    env = PushTEnvConfig(obs_type="pixels_agent_pos", episode_length=20)
    deltas = {OBS_STATE: [-0.1, 0.0], OBS_IMAGE: [-0.1, 0.0], ACTION: [0.1 * i for i in range(-1, 15)]}
    features = pusht_features(images=True)
    online = OnlineTraining(OnlineConfig(every=10, n_episodes=2), tmp_path, env, features, 10, deltas, 7, seed=3)
    online.collect(Accelerator(cpu=True), make_toy_policy("pixels_agent_pos"), None, 10)
    shapes = {key: value.shape[1:] for key, value in online.dataset.get_batch([0]).items() if torch.is_tensor(value)}
    as_float = {key: torch.zeros((8, *shape)) for key, shape in shapes.items()}
    as_uint8 = {**as_float, OBS_IMAGE: torch.zeros((8, *shapes[OBS_IMAGE]), dtype=torch.uint8)}
    mixed_float, mixed_uint8 = online.mix(as_float, 21, 0), online.mix(as_uint8, 21, 0)
    assert mixed_uint8[OBS_IMAGE].dtype == torch.uint8 and mixed_float[OBS_IMAGE].dtype == torch.float32
    assert mixed_float[OBS_IMAGE][4:].max() > 0.5  # the rendered frames, not the zeros of the offline rows
    assert torch.equal(frames_to_float(mixed_uint8[OBS_IMAGE]), mixed_float[OBS_IMAGE])
    # A second round appends its own video file; a resume between the rounds drops it and keeps the first round's
    # bytes as they were (no decode and re-encode of what was stored).
    online.collect(Accelerator(cpu=True), make_toy_policy("pixels_agent_pos"), None, 20)
    videos = sorted((tmp_path / ONLINE_DATA_DIR / "videos").rglob("*.mp4"))
    assert [p.name for p in videos] == ["file-000.mp4", "file-001.mp4"]
    first = videos[0].read_bytes()
    resumed = OnlineTraining(OnlineConfig(every=10, n_episodes=2), tmp_path, env, features, 10, deltas, 7, seed=3)
    resumed.restore(Accelerator(cpu=True), 15, {"online_episodes": 2})
    assert sorted((tmp_path / ONLINE_DATA_DIR / "videos").rglob("*.mp4")) == videos[:1]
    assert videos[0].read_bytes() == first and resumed.dataset.num_episodes == 2


def test_a_full_disk_during_a_round_is_one_line_with_the_way_on(small_tmpfs):  # noqa: F811 (the fixture)
    """The round's data written onto a full disk (pyarrow's own OSError [Errno 28]): one error naming the folder,
    the room the round needs and what is free, advising only what exists (no checkpoint yet: run again)."""
    fill(small_tmpfs, 8 * 1024)
    online = online_training(small_tmpfs, labels="expert")
    accelerator, policy = Accelerator(cpu=True), make_toy_policy("environment_state_agent_pos")
    try:
        online.collect(accelerator, policy, None, 10)
    except OnlineDataError as e:
        message = str(e)  # not kept: its traceback holds pyarrow's half-made writer, whose open file pins the tmpfs
    else:
        pytest.fail("no error on a full disk")
    gc.collect()
    assert "\n" not in message and message.startswith(f"disk full while writing the online data into {online.root}:")
    assert "MB are free there" in message and "--resume" not in message
    assert message.endswith("run the same command again (no checkpoint was kept yet: the run starts again in place)")
    assert sorted(os.listdir(small_tmpfs)) == ["filler"]  # no staging, no half-written online_data


def test_a_full_disk_as_pyarrow_says_it_is_the_same_line(tmp_path, monkeypatch):
    """Where no tmpfs can be mounted: pyarrow's parquet writer fails as it does on a full disk."""
    import pyarrow.parquet as pq

    def full(self, *args, **kwargs):
        raise OSError("[Errno 28] Error writing bytes to file. Detail: [errno 28] No space left on device")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", full)
    online = online_training(tmp_path, labels="expert")
    with pytest.raises(OnlineDataError, match=r"disk full while writing the online data into .*online_data"):
        online.collect(Accelerator(cpu=True), make_toy_policy("environment_state_agent_pos"), None, 10)
    assert os.listdir(tmp_path) == []
