"""`hfpolicy record`: demonstrations from a scripted expert, written as a LeRobot v3.0 dataset.

    hfpolicy record --env.type=pusht --policy.type=scripted --n_episodes=200 --output_dir=data/pusht_scripted \\
        [--push_to=user/pusht_scripted]
    hfpolicy record --env.type=aloha --env.task=AlohaInsertion-v0 --policy.type=scripted ...  (hfpolicy.record_aloha)
    hfpolicy record --env.type=xarm --policy.type=scripted ...  (hfpolicy.record_xarm)

The dataset has the features of the converted lerobot/pusht (observation.image as a 96x96 video, observation.state =
agent x, y, action = target agent x, y, next.reward / next.success / next.done), optionally the block keypoints as
observation.environment_state, so every policy config that trains on lerobot/pusht trains on it unchanged. Episode i
is seeded start_seed + i. Frame t holds the observation before action t and the reward, success and done flag that
action t produced, as in lerobot/pusht.
"""

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from hfpolicy.constants import ACTION, DONE, OBS_ENV_STATE, OBS_IMAGE, OBS_STATE, REWARD, SUCCESS
from hfpolicy.datasets import DatasetWriter, push_dataset_to_hub
from hfpolicy.datasets.pusht_zarr import PUSHT_TASK, pusht_features
from hfpolicy.datasets.writer import check_dataset_destination, remove_dead_writers_leftovers
from hfpolicy.envs import SUCCESS_INFO_KEY, AlohaEnvConfig, EnvConfig, PushTEnvConfig, XarmEnvConfig
from hfpolicy.envs.aloha import TASK_NAMES
from hfpolicy.envs.pusht_scorer import PushTScorer
from hfpolicy.words import counted

DEMONSTRATORS = ("scripted",)  # --policy.type values `hfpolicy record` knows


@dataclass
class DemonstratorConfig:
    """Who acts while recording."""

    type: str = "scripted"
    """"scripted": the env's expert planning on the simulator's state (PushT, ALOHA, xArm)"""


@dataclass
class RecordConfig:
    """`hfpolicy record` flags."""

    env: EnvConfig = field(default_factory=PushTEnvConfig)  # the simulator (--env.type=pusht)
    policy: DemonstratorConfig = field(default_factory=DemonstratorConfig)  # the demonstrator (--policy.type=scripted)
    n_episodes: int = 50  # episodes to record
    start_seed: int = 0  # episode i is seeded start_seed + i
    max_steps: int | None = (
        None  # steps after which an episode is cut (default: the env's: PushT 300, ALOHA 400, xArm 200)
    )
    output_dir: str | None = None  # where the dataset is written (must not exist, unless --overwrite=true); required
    overwrite: bool = False  # replace the dataset at output_dir, once the new one is complete (a re-run of a recipe)
    repo_id: str | None = None  # the dataset's name in its metadata (default: local/<output_dir name>)
    push_to: str | None = None  # Hub dataset repo id to upload the finished dataset to
    environment_state: bool = False  # also record observation.environment_state (PushT keypoints; ALOHA, xArm poses)
    images: bool = True  # record the camera (PushT 96x96, ALOHA 480x640, xArm 84x84 video); false: state-only
    discard_failures: bool = False  # leave out episodes that did not succeed within max_steps
    progress: bool = True  # show a progress bar


def checked_record_config(cfg: RecordConfig) -> RecordConfig:
    """`cfg` checked, with --max_steps resolved (default: the env's episode length); ValueError naming the flag."""
    if cfg.policy.type not in DEMONSTRATORS:
        raise ValueError(f"unknown demonstrator --policy.type={cfg.policy.type!r}; valid: {', '.join(DEMONSTRATORS)}")
    if not isinstance(cfg.env, PushTEnvConfig | AlohaEnvConfig | XarmEnvConfig):
        raise ValueError(f"scripted experts play PushT, ALOHA and xArm only; got --env.type={cfg.env.type}")
    if cfg.output_dir is None:
        raise ValueError("--output_dir is required: the folder the dataset is written to")
    if cfg.max_steps is None:
        cfg = dataclasses.replace(cfg, max_steps=cfg.env.max_episode_steps)
    if cfg.n_episodes < 1 or cfg.max_steps < 1:
        raise ValueError("--n_episodes and --max_steps must be >= 1")
    return cfg


def record_episodes(writer: DatasetWriter, cfg: RecordConfig, record_one: Callable[[int], bool]) -> int:
    """Records episodes `cfg.start_seed`.. with `record_one(seed)` (it adds the frames and says whether the episode
    succeeded), keeping each one unless it failed and --discard_failures=true; finishes the dataset; returns how
    many episodes it kept. One loop for every env's recording (PushT here, ALOHA and xArm in record_aloha/_xarm)."""
    n_kept = n_successes = 0
    with writer:
        bar = tqdm(range(cfg.n_episodes), desc="recording", unit="episode", disable=not cfg.progress)
        for episode in bar:
            success = record_one(cfg.start_seed + episode)
            n_successes += success
            if success or not cfg.discard_failures:
                writer.save_episode()
                n_kept += 1
            else:
                writer.clear_episode()
            bar.set_postfix_str(f"success {100 * n_successes / (episode + 1):.1f}%", refresh=False)
        if n_kept == 0:
            raise RuntimeError("no episode was kept (every one failed and --discard_failures=true)")
    return n_kept


def record(cfg: RecordConfig) -> Path:
    """Records `cfg.n_episodes` expert episodes into a new dataset at `cfg.output_dir`; returns its root."""
    cfg = checked_record_config(cfg)
    remove_interrupted_recording(Path(cfg.output_dir))
    if isinstance(cfg.env, AlohaEnvConfig):
        from hfpolicy.record_aloha import record_aloha

        return record_aloha(cfg)
    if isinstance(cfg.env, XarmEnvConfig):
        from hfpolicy.record_xarm import record_xarm

        return record_xarm(cfg)
    output_dir = Path(cfg.output_dir)
    check_dataset_destination(output_dir, cfg.overwrite, cli=True)  # before the env starts; again once held
    from hfpolicy.policies.scripted import PushTExpert

    if not cfg.images and not cfg.environment_state:
        raise ValueError("--images=false needs --environment_state=true: the policy would see only the agent")
    env_cfg = PushTEnvConfig(
        obs_type="pixels_agent_pos" if cfg.images else "environment_state_agent_pos",
        episode_length=cfg.max_steps,
        observation_size=cfg.env.observation_size,
        render_size=cfg.env.render_size,
    )

    env = env_cfg.make_single()
    expert = PushTExpert()
    scorer = PushTScorer() if cfg.environment_state else None
    features = pusht_features(env_cfg.observation_size, cfg.environment_state, images=cfg.images)
    writer = DatasetWriter.create(
        output_dir, cfg.repo_id or f"local/{output_dir.name}", env_cfg.fps, features, overwrite=cfg.overwrite
    )
    try:
        n_kept = record_episodes(writer, cfg, lambda seed: record_episode(env, expert, writer, cfg, seed, scorer))
    finally:
        env.close()
    if cfg.push_to:
        push_dataset_to_hub(
            output_dir,
            cfg.push_to,
            tags=["pusht", "scripted-expert", "hfpolicy"],
            description=f"{n_kept} PushT demonstrations by hfpolicy's scripted expert (seeds from {cfg.start_seed}).",
        )
    return output_dir


def remove_interrupted_recording(root: Path) -> None:
    """Removes what a recording into `root` that was killed (kill -9, a power cut) left, a staging folder and the
    folder it was going to fill (hfpolicy.datasets.writer.remove_dead_writers_leftovers), and says so in one line."""
    removed = remove_dead_writers_leftovers(root)
    if removed:
        names = ", ".join(path.name for path in removed)
        print(f"removed what an interrupted recording into {root} left ({names}); its writer is gone", flush=True)


def record_episode(env, expert, writer: DatasetWriter, cfg: RecordConfig, seed: int, scorer) -> bool:
    """One PushT expert episode (hfpolicy.policies.scripted.run_expert_episode) into the writer's current episode
    (see `record_frames`). Returns whether the episode succeeded."""
    from hfpolicy.policies.scripted.pusht_expert import run_expert_episode

    def observe(observation) -> dict:
        frame = {OBS_STATE: observation["agent_pos"].astype(np.float32)}
        if cfg.images:
            frame[OBS_IMAGE] = observation["pixels"]
        if scorer is not None:
            block = env.unwrapped.block
            frame[OBS_ENV_STATE] = scorer.keypoints(np.array([[*block.position, block.angle]]))[0].astype(np.float32)
        return frame

    return record_frames(
        writer, PUSHT_TASK, observe, lambda **hooks: run_expert_episode(env, expert, seed, cfg.max_steps, **hooks)
    )


def record_frames(writer: DatasetWriter, task: str, observe: Callable, run_episode: Callable) -> bool:
    """Writes the episode `run_episode(on_reset=..., on_step=...)` plays into the writer's current episode, with
    rewards: frame t holds `observe(observation)` of the observation before action t, and the reward, success so far
    (info["is_success"]) and done flag that action produced, as in lerobot/pusht. Returns whether it succeeded."""
    before: dict = {}  # the frame of the observation the next action is taken from
    succeeded = False

    def on_step(t, action, observation, reward, terminated, truncated, info) -> None:
        nonlocal succeeded
        succeeded = succeeded or bool(info.get(SUCCESS_INFO_KEY, False))
        frame = {**before, ACTION: np.asarray(action, dtype=np.float32), REWARD: np.float32(reward)}
        writer.add_frame({**frame, SUCCESS: succeeded, DONE: bool(terminated or truncated)}, task=task)
        before.update(observe(observation))

    run_episode(on_reset=lambda observation, info: before.update(observe(observation)), on_step=on_step)
    return succeeded


class RecordWriteError(RuntimeError):
    """The dataset could not be written (a full disk, a folder that became unwritable)."""


def record_command(cfg: RecordConfig) -> str:
    """`hfpolicy record`: records, and says where to (Ctrl-C or SIGTERM stops it cleanly, hfpolicy.io.termination:
    its staging folder is removed)."""
    try:
        root = record(cfg)
    except (FileExistsError, FileNotFoundError):  # bad input, said as it is
        raise
    except OSError as e:
        raise RecordWriteError(f"cannot write --output_dir={cfg.output_dir}: {e}") from e
    pushed = f"; pushed to {cfg.push_to}" if cfg.push_to else ""
    return f"recorded {counted(cfg.n_episodes, 'episode')} into {root}{pushed}\nlook at them: hfpolicy view {root}"


def main(argv: list[str] | None = None) -> int:
    from hfpolicy.cli.commands import run_command

    return run_command("record", argv)


def scripted_recording_env(env: EnvConfig | None) -> EnvConfig:
    """The env whose expert `--dataset.scripted_episodes` records: the training's task (default PushT) with its default
    episode length (PushT 300, ALOHA 400: full episodes, as the Hub's scripted datasets have; xArm 200)."""
    if isinstance(env, AlohaEnvConfig):
        return AlohaEnvConfig(task=env.task)
    if isinstance(env, XarmEnvConfig):
        return XarmEnvConfig(task=env.task)
    if env is None or isinstance(env, PushTEnvConfig):
        return PushTEnvConfig()
    raise ValueError(
        f"--dataset.scripted_episodes records the scripted expert of PushT, ALOHA or xArm, and --env.type={env.type} has "
        "none: record or convert a dataset and pass --dataset.root=DIR"
    )


def scripted_task_label(env: EnvConfig | None) -> str:
    """What a scripted recording of `env` shows, for messages: "PushT", or the ALOHA or xArm task."""
    env = scripted_recording_env(env)
    return env.task if isinstance(env, AlohaEnvConfig | XarmEnvConfig) else "PushT"


def scripted_dataset_root(n_episodes: int, env: EnvConfig | None = None) -> Path:
    """Where `--dataset.scripted_episodes=N` records by default: $HFPOLICY_CACHE (default ~/.cache/hfpolicy), in a
    folder named after the task (pusht_scripted_N, aloha_transfer_cube_scripted_N, aloha_insertion_scripted_N,
    xarm_lift_scripted_N)."""
    cache = Path(os.environ.get("HFPOLICY_CACHE", Path.home() / ".cache" / "hfpolicy"))
    for folder in (cache, cache / "datasets"):
        if folder.exists() and not folder.is_dir():
            raise ValueError(
                f"{folder} (under $HFPOLICY_CACHE, default ~/.cache/hfpolicy) is a file, not a folder, so the scripted "
                "demonstrations cannot be recorded there: move that file away, or set HFPOLICY_CACHE to another folder"
            )
    env = scripted_recording_env(env)
    name = f"aloha_{TASK_NAMES[env.task]}_scripted" if isinstance(env, AlohaEnvConfig) else "pusht_scripted"
    if isinstance(env, XarmEnvConfig):
        name = f"xarm_{env.task.removeprefix('Xarm').removesuffix('-v0').lower()}_scripted"
    return cache / "datasets" / f"{name}_{n_episodes}"


def scripted_recording(n_episodes: int, root: str | Path | None, progress: bool, env: EnvConfig | None = None) -> Path:
    """The recording of `n_episodes` expert demos of `env`'s task (default PushT; seeds 0..n-1, state-only: the agent
    or joints and observation.environment_state) in `root` (default: `scripted_dataset_root`): reused when it exists,
    else recorded by the main process (atomically: a stopped recording leaves nothing behind; what a killed one left,
    its writer dead, is removed here with a line saying so, and the next run records again). ValueError for a folder
    holding other data."""
    from accelerate import PartialState

    from hfpolicy.datasets import DatasetMeta

    n, env = n_episodes, scripted_recording_env(env)
    root = Path(root) if root is not None else scripted_dataset_root(n, env)
    if PartialState().is_main_process:  # the others come after it (main_process_first), to a finished recording
        remove_interrupted_recording(root)
    if root.exists():
        try:
            meta = DatasetMeta.load(root)
        except (ValueError, OSError) as e:
            raise ValueError(
                f"{root} exists but is not a readable dataset ({e}); delete it to record {n} episodes again"
            ) from e
        check_scripted_recording(root, meta, n, env)
        return root
    if PartialState().is_main_process:
        print(
            f"recording {counted(n, f'scripted {scripted_task_label(env)} demonstration')} into {root} "
            "(once; later runs reuse it)"
        )
        record(
            RecordConfig(
                env=env, n_episodes=n, output_dir=str(root), environment_state=True, images=False, progress=progress
            )
        )
    return root


def check_scripted_recording(root: Path, meta, n: int, env: EnvConfig) -> None:
    """ValueError unless the dataset at `root` (its DatasetMeta `meta`) is the recording of `n` demos of `env`'s
    task that `--dataset.scripted_episodes=n` asks for."""
    if meta.total_episodes != n or OBS_ENV_STATE not in meta.features:
        lacking = "" if OBS_ENV_STATE in meta.features else f" without {OBS_ENV_STATE}"
        raise ValueError(
            f"{root} holds {meta.total_episodes} episodes{lacking}, not the {n} scripted demonstrations "
            f"--dataset.scripted_episodes={n} asks for: choose another --dataset.root, or delete that folder"
        )
    expected = tuple(env.observation_features("environment_state_agent_pos")[OBS_ENV_STATE].shape)
    if tuple(meta.features[OBS_ENV_STATE]["shape"]) != expected:
        raise ValueError(
            f"{root} holds demonstrations of another task ({OBS_ENV_STATE} of shape "
            f"{tuple(meta.features[OBS_ENV_STATE]['shape'])}, {scripted_task_label(env)} has {expected}): choose "
            "another --dataset.root, or delete that folder"
        )
