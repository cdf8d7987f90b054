"""`hfpolicy record`: one episode loop for every env's recorder (hfpolicy.record.recorders). Episode i is
seeded start_seed + i; frame t holds the observation before action t and the reward, success so far and done flag that
action t produced, as in lerobot/pusht. The dataset is written atomically and optionally pushed to the Hub."""

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
from accelerate import PartialState
from tqdm.auto import tqdm

from hfpolicy.cli.commands import run_command
from hfpolicy.constants import ACTION, DONE, REWARD, SUCCESS
from hfpolicy.datasets import DatasetMeta, DatasetWriter, push_dataset_to_hub
from hfpolicy.datasets.writer import check_dataset_destination, remove_dead_writers_leftovers
from hfpolicy.envs import SUCCESS_INFO_KEY, AlohaEnvConfig, EnvConfig, PushTEnvConfig, XarmEnvConfig
from hfpolicy.record.config import DEMONSTRATORS, RecordConfig
from hfpolicy.record.recorders import EnvRecorder, aloha_recorder, pusht_recorder, xarm_recorder
from hfpolicy.record.scripted_cache import (
    check_scripted_recording,
    scripted_dataset_root,
    scripted_recording_env,
    scripted_task_label,
)
from hfpolicy.ticker import LiveNote, ticking
from hfpolicy.words import counted

# env config class -> (its recorder, what the policy would see of it without images or environment state)
RECORDERS: dict[type, tuple[Callable[..., EnvRecorder], str]] = {
    PushTEnvConfig: (pusht_recorder, "the agent"),
    AlohaEnvConfig: (aloha_recorder, "the joints"),
    XarmEnvConfig: (xarm_recorder, "the gripper"),
}


def checked_record_config(cfg: RecordConfig) -> RecordConfig:
    """`cfg` checked, with --max_steps resolved (default: the env's episode length); ValueError naming the flag."""
    if cfg.policy.type not in DEMONSTRATORS:
        raise ValueError(f"unknown demonstrator --policy.type={cfg.policy.type!r}; valid: {', '.join(DEMONSTRATORS)}")
    if type(cfg.env) not in RECORDERS:
        raise ValueError(f"scripted experts play PushT, ALOHA and xArm only; got --env.type={cfg.env.type}")
    if cfg.output_dir is None:
        raise ValueError("--output_dir is required: the folder the dataset is written to")
    max_steps = cfg.env.max_episode_steps if cfg.max_steps is None else cfg.max_steps
    if cfg.n_episodes < 1 or max_steps < 1:
        raise ValueError("--n_episodes and --max_steps must be >= 1")
    return dataclasses.replace(cfg, max_steps=max_steps)


def record_episodes(writer: DatasetWriter, recorder: EnvRecorder, cfg: RecordConfig, max_steps: int) -> int:
    """Records episodes `cfg.start_seed`.., keeping each one unless it failed and --discard_failures=true; returns how
    many it kept."""
    n_kept = n_successes = 0
    bar = tqdm(total=cfg.n_episodes, desc="recording", unit="episode", disable=not cfg.progress)
    note, so_far = LiveNote(bar), ""

    def frame_done(t: int) -> None:
        note(f"{so_far}frame {t}/{max_steps}")

    with bar, ticking(bar), writer:  # the elapsed time moves while videos are encoded and the dataset is finished
        for episode in range(cfg.n_episodes):
            success = record_frames(writer, recorder, cfg.start_seed + episode, max_steps, frame_done)
            n_successes += success
            if success or not cfg.discard_failures:
                writer.save_episode()
                n_kept += 1
            else:
                writer.clear_episode()
            so_far = f"success {100 * n_successes / (episode + 1):.1f}%, "
            bar.set_postfix_str(so_far.removesuffix(", "), refresh=False)
            bar.update(1)
        if n_kept == 0:
            raise RuntimeError("no episode was kept (every one failed and --discard_failures=true)")
    return n_kept


def record(cfg: RecordConfig) -> Path:
    """Records `cfg.n_episodes` expert episodes into a new dataset at `cfg.output_dir`; returns its root."""
    cfg = checked_record_config(cfg)
    assert cfg.output_dir is not None and cfg.max_steps is not None  # required and resolved by checked_record_config
    output_dir, max_steps = Path(cfg.output_dir), cfg.max_steps
    remove_interrupted_recording(output_dir)
    check_dataset_destination(output_dir, cfg.overwrite, cli=True)  # before the env starts; again once held
    make_recorder, seen = RECORDERS[type(cfg.env)]
    if not cfg.images and not cfg.environment_state:
        raise ValueError(f"--images=false needs --environment_state=true: the policy would see only {seen}")
    env_cfg = dataclasses.replace(
        cfg.env,
        obs_type="pixels_agent_pos" if cfg.images else "environment_state_agent_pos",
        episode_length=max_steps,
    )
    recorder = make_recorder(cfg, env_cfg)
    try:
        repo_id = cfg.repo_id or f"local/{output_dir.name}"
        writer = DatasetWriter.create(output_dir, repo_id, recorder.fps, recorder.features, overwrite=cfg.overwrite)
        n_kept = record_episodes(writer, recorder, cfg, max_steps)
    finally:
        recorder.close()
    if cfg.push_to:
        push_dataset_to_hub(
            output_dir,
            cfg.push_to,
            tags=[*recorder.tags, "scripted-expert", "hfpolicy"],
            description=f"{counted(n_kept, recorder.demonstration)} by {recorder.expert} (seeds from {cfg.start_seed}).",
        )
    return output_dir


def remove_interrupted_recording(root: Path) -> None:
    """Removes what a killed recording into `root` left (its staging folder), and says so in one line."""
    removed = remove_dead_writers_leftovers(root)
    if removed:
        names = ", ".join(path.name for path in removed)
        print(f"removed what an interrupted recording into {root} left ({names}); its writer is gone", flush=True)


def record_frames(
    writer: DatasetWriter, recorder: EnvRecorder, seed: int, max_steps: int, frame_done: Callable[[int], None]
) -> bool:
    """Writes the expert episode `recorder` plays from `seed` into the writer's current episode (frames as the module
    docstring says; `frame_done(t + 1)` follows frame t); returns whether it succeeded."""
    before: dict = {}  # the frame of the observation the next action is taken from
    succeeded = False

    def on_step(t, action, observation, reward, terminated, truncated, info) -> None:
        nonlocal succeeded
        succeeded = succeeded or bool(info.get(SUCCESS_INFO_KEY, False))
        frame = {**before, ACTION: np.asarray(action, dtype=np.float32)}
        if recorder.rewards:
            frame.update({REWARD: np.float32(reward), SUCCESS: succeeded})
        frame[DONE] = bool(terminated or truncated or t + 1 == max_steps)
        writer.add_frame(frame, task=recorder.task)
        before.update(recorder.observe(observation))
        frame_done(t + 1)

    recorder.run_episode(
        seed, on_reset=lambda observation, info: before.update(recorder.observe(observation)), on_step=on_step
    )
    return succeeded


class RecordWriteError(RuntimeError):
    """The dataset could not be written (a full disk, a folder that became unwritable)."""


def record_command(cfg: RecordConfig) -> str:
    """`hfpolicy record`: records, and says where to."""
    try:
        root = record(cfg)
    except (FileExistsError, FileNotFoundError):  # bad input, said as it is
        raise
    except OSError as e:
        raise RecordWriteError(f"cannot write --output_dir={cfg.output_dir}: {e}") from e
    pushed = f"; pushed to {cfg.push_to}" if cfg.push_to else ""
    return f"recorded {counted(cfg.n_episodes, 'episode')} into {root}{pushed}\nlook at them: hfpolicy view {root}"


def main(argv: list[str] | None = None) -> int:
    return run_command("record", argv)


def scripted_recording(n_episodes: int, root: str | Path | None, progress: bool, env: EnvConfig | None = None) -> Path:
    """The state-only recording of `n_episodes` expert demos of `env`'s task (default PushT; seeds 0..n-1) in `root`
    (default: `scripted_dataset_root`): reused when it exists, else recorded by the main process; ValueError for a
    folder holding other data."""
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
