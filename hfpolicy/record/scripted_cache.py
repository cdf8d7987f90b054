"""Where `hfpolicy train --dataset.scripted_episodes=N` keeps its recordings of the scripted expert (one folder per
task and episode count under $HFPOLICY_CACHE), and the check that one is what is asked."""

import os
from pathlib import Path

from hfpolicy.constants import OBS_ENV_STATE
from hfpolicy.envs import AlohaEnvConfig, EnvConfig, PushTEnvConfig, XarmEnvConfig
from hfpolicy.envs.aloha import TASK_NAMES


def scripted_recording_env(env: EnvConfig | None) -> EnvConfig:
    """The env whose expert `--dataset.scripted_episodes` records: the training's task (default PushT) with its default
    episode length."""
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
    """Where `--dataset.scripted_episodes=N` records by default: $HFPOLICY_CACHE (default ~/.cache/hfpolicy)/datasets/
    <task>_scripted_N (pusht, aloha_transfer_cube, aloha_insertion, xarm_lift)."""
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


def check_scripted_recording(root: Path, meta, n: int, env: EnvConfig) -> None:
    """ValueError unless the dataset at `root` (`meta`) is the recording `--dataset.scripted_episodes=n` asks for."""
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
