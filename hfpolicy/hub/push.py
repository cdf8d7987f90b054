"""Publishing a training run to the Hub (its policy, latest evaluation with videos and page, curve, config and card), at
the end of training with `--hub.repo_id` or with `hfpolicy push --run=DIR`; and a dataset folder (`--dataset=DIR`)."""

import contextlib
import json
import re
from pathlib import Path

from huggingface_hub import HfApi
from huggingface_hub.errors import HFValidationError, LocalTokenNotFoundError
from huggingface_hub.utils import validate_repo_id

from hfpolicy.cli.commands import run_command
from hfpolicy.constants import EVAL_INFO_FILE, TRAIN_CONFIG_FILE
from hfpolicy.datasets import DatasetMeta, push_dataset_to_hub
from hfpolicy.datasets.format import INFO_PATH
from hfpolicy.datasets.writer import truncate_dataset
from hfpolicy.eval.episode_data import ONLINE_META_PATH
from hfpolicy.hub.push_config import PushConfig
from hfpolicy.io.episode_videos import episode_videos
from hfpolicy.io.hub_errors import describe_push_error
from hfpolicy.io.paths import contained_path
from hfpolicy.io.run_lock import RunLock, RunLockedError
from hfpolicy.policies.base import Policy
from hfpolicy.policies.card import PolicyArtifacts
from hfpolicy.runs.curve import draw_training_curve
from hfpolicy.runs.run_folder import PRETRAINED_DIR, RunFolder
from hfpolicy.viewer import view
from hfpolicy.words import counted


class PushError(RuntimeError):
    """The run cannot be pushed (no token, no write access, no network, nothing to push)."""


def check_push_access(repo_id: str, flag: str = "--hub.repo_id") -> None:
    """PushError unless a Hub token is set, valid, can write, and its user (or an organization of it) owns `repo_id`'s
    namespace; run before training, so a bad token is found in seconds. `flag` names the repo in errors."""
    flag = f"{flag}={repo_id}"
    try:
        validate_repo_id(repo_id)
    except HFValidationError as e:
        raise PushError(f"{flag} is not a valid Hub repo id ({e})") from None
    try:
        info = HfApi().whoami()
    except LocalTokenNotFoundError:
        raise PushError(
            f"{flag} needs a Hub token with write access and none is set: log in (`hf auth login`) or set HF_TOKEN; "
            "or train without --hub.repo_id and push the finished run with `hfpolicy push --run=DIR`"
        ) from None
    except Exception as e:
        cause = describe_push_error(e, repo_id)
        if cause is None:
            raise
        raise PushError(f"{flag}: {cause}") from e
    role = ((info.get("auth") or {}).get("accessToken") or {}).get("role")
    if role == "read":
        raise PushError(f"{flag}: the Hub token is read-only: create one with write access and log in with it")
    namespace = repo_id.split("/")[0] if "/" in repo_id else info["name"]
    writable = [info["name"], *(org.get("name") for org in info.get("orgs") or [])]
    if namespace not in writable:
        raise PushError(
            f"{flag}: the token belongs to {info['name']!r}, which cannot create repos in {namespace!r} (it can in "
            f"{', '.join(map(repr, writable))}): choose a repo id in one of those"
        )


def push_run(
    run_dir: str | Path,
    repo_id: str | None = None,
    *,
    policy=None,
    private: bool | None = None,
    branch: str | None = None,
    train_command: str | None = None,
    up_to_step: int | None = None,
    check_access: bool = True,
    online_data_repo_id: str | None = None,
) -> str:
    """Pushes a run folder; returns the commit URL. `policy` (default: the last checkpoint's) lets a live training push
    its EMA weights; `up_to_step` ignores later evaluations. Hub and network failures raise PushError."""
    run_dir = Path(run_dir)
    run = RunFolder(run_dir)
    if not run.config_file.is_file():
        raise PushError(f"{run_dir} is not a training run folder (it has no {TRAIN_CONFIG_FILE})")
    train_config = json.loads(run.config_file.read_text())
    hub = train_config.get("hub") or {}
    repo_id = repo_id or hub.get("repo_id")
    if not repo_id:
        raise PushError(f"the run in {run_dir} was trained without --hub.repo_id: pass --repo_id=user/name")
    if check_access:
        check_push_access(repo_id, flag="--repo_id")
    if policy is None:
        checkpoint = run.latest_checkpoint()
        if checkpoint is None:
            raise PushError(f"{run_dir} holds no checkpoint to push (the run stopped before its first one)")
        policy = Policy.from_pretrained(checkpoint / PRETRAINED_DIR)
    artifacts = run_artifacts(run, train_config, up_to_step, train_command)
    artifacts.online_episodes = online_episode_count(run.root)
    artifacts.online_data_repo_id = online_data_repo_id
    private = hub.get("private") if private is None else private
    branch = hub.get("branch") if branch is None else branch
    try:
        if online_data_repo_id:
            push_online_data(run_dir, online_data_repo_id, private=bool(private))
        return policy.push_to_hub(repo_id, artifacts=artifacts, private=private, branch=branch)
    except Exception as e:
        cause = describe_push_error(e, repo_id)
        if cause is None:
            raise
        raise PushError(f"{cause}; the run is saved in {run_dir}: push it with `hfpolicy push --run={run_dir}`") from e


def run_artifacts(run: RunFolder, train_config: dict, up_to_step: int | None, train_command: str | None):
    """What goes with the policy: the latest evaluation (at or before `up_to_step`) with its videos, the training
    curve, train_config.json, and the command that reproduces the run."""
    eval_dir = run.latest_eval_dir(up_to_step)
    videos: list[Path] = []
    if eval_dir is not None:  # what is uploaded is checked to lie inside the run folder (no link to elsewhere)
        eval_dir = contained_path(run.root, eval_dir.relative_to(run.root), what="the run's evaluation")
        contained_path(eval_dir, EVAL_INFO_FILE, what=f"the evaluation's {EVAL_INFO_FILE}")
        for video in episode_videos((eval_dir / "videos").glob("*.mp4")):
            videos.append(contained_path(eval_dir, video.relative_to(eval_dir), what=f"the eval video {video.name}"))
    dataset, online = train_config.get("dataset") or {}, train_config.get("online") or {}
    pure_online = bool(online.get("every") and online.get("seed_episodes"))  # no dataset: its own rollouts only
    return PolicyArtifacts(
        eval_info=eval_dir / EVAL_INFO_FILE if eval_dir is not None else None,
        videos=videos,
        train_config=train_config,
        training_curve=draw_training_curve(run.metrics_file, run.curve_file),
        env_type=(train_config.get("env") or {}).get("type"),
        dataset_repo_id=dataset.get("repo_id") if not (dataset.get("root") or pure_online) else None,  # local: card
        train_command=train_command or f"hfpolicy train --config_path={run.config_file}",
        eval_page=eval_page_for_hub(eval_dir) if eval_dir is not None else None,
    )


def eval_page_for_hub(eval_dir: Path) -> Path:
    """The evaluation's page with its videos inside (one file that works once downloaded): eval_dir/view.html."""
    return view(eval_dir, embed_videos=True)


def online_episode_count(run_dir: Path) -> int | None:
    """Online episodes in the run's online data (None for an offline run)."""
    meta = run_dir / "online_data" / ONLINE_META_PATH
    if not meta.is_file():
        return None
    return sum(len(r["kept"]) for r in json.loads(meta.read_text())["rounds"])


def push_online_data(run_dir: Path, repo_id: str, private: bool = False) -> str:
    """Publishes the run's online_data/ as a Hub dataset repo (PushError when the run has none)."""
    root = run_dir / "online_data"
    if not (root / "meta" / "info.json").is_file():
        raise PushError(
            f"{run_dir} has no online data to publish (it trained without --online.every, or no round kept an episode)"
        )
    truncate_dataset(root)  # a run killed mid-round: the files of its unfinished append are not published
    return push_dataset_to_hub(
        root, repo_id, private=private, tags=["hfpolicy", "online-training"],
        description=f"The online training data of the hfpolicy run {run_dir.name}: the policy's own rollouts, "
        "as meta/hfpolicy_online.json describes (rounds, seeds, labels).",
    )  # fmt: skip


def push_dataset_folder(root: Path, repo_id: str, private: bool = False, branch: str | None = None) -> str:
    """Pushes the dataset folder `root` (LeRobot v3.0 or v2.1) with its card; returns the line to print. Problems are
    one-line PushErrors, found before anything is created but for Hub failures."""
    if not (root / INFO_PATH).is_file():
        what = "does not exist" if not root.exists() else "is not a folder" if not root.is_dir() else None
        raise PushError(
            f"--dataset={root} {what or f'is not a LeRobot dataset (it has no {INFO_PATH})'}: pass the folder that "
            f"holds {INFO_PATH} (a LeRobot v3.0 or v2.1 dataset)"
        )
    try:
        meta = DatasetMeta.load(root, repo_id)
    except ValueError as e:  # DatasetFormatError, UnsupportedVersionError: said as they are
        raise PushError(f"--dataset={root}: {e}") from None
    check_push_access(repo_id, flag="--repo_id")
    try:
        url = push_dataset_to_hub(root, repo_id, private=private, branch=branch)
    except ValueError as e:  # a data or video file missing (checked before anything is created)
        raise PushError(f"--dataset={root}: {e}") from None
    except Exception as e:
        cause = describe_push_error(e, repo_id)
        if cause is None:
            raise
        raise PushError(f"{cause}; nothing of {root} was changed: push it again") from e
    version = meta.codebase_version
    return (
        f"pushed the dataset {root} ({counted(meta.total_episodes, 'episode')}, {counted(meta.total_frames, 'frame')}, "
        f"LeRobot {version}, tagged {version}): {url}\nlook at it: hfpolicy view {repo_id}"
    )


def push_command(cfg: PushConfig) -> str:
    """`hfpolicy push --run=DIR [--repo_id=user/name]` or `--dataset=DIR --repo_id=user/name`."""
    if cfg.run is not None and cfg.dataset is not None:
        raise PushError("--run and --dataset both given: push a training run or a dataset folder, one at a time")
    if cfg.dataset is not None:
        if not cfg.repo_id:
            raise PushError(f"--dataset={cfg.dataset} needs --repo_id=user/name: the Hub dataset repo to push it to")
        if cfg.online_data_repo_id:
            raise PushError("--online_data_repo_id publishes a run's online data: it goes with --run, not --dataset")
        return push_dataset_folder(Path(cfg.dataset), cfg.repo_id, bool(cfg.private), cfg.branch)
    if cfg.run is None:
        raise PushError(
            "--run=DIR or --dataset=DIR is needed: the folder of the training run, or of the dataset, to push"
        )
    run_dir = Path(cfg.run)
    try:  # the run's lock, held for the push (no folder: push_run says what is wrong)
        with RunLock(run_dir) if run_dir.is_dir() else contextlib.nullcontext():
            url = push_run(
                run_dir,
                cfg.repo_id,
                private=cfg.private,
                branch=cfg.branch,
                online_data_repo_id=cfg.online_data_repo_id,
            )
    except RunLockedError as e:
        holder = re.search(r"\((pid [^)]*)\)", str(e))
        raise PushError(
            f"--run={run_dir} is still training{f' ({holder.group(1)})' if holder else ''}: its checkpoints are "
            "still changing; push it once it has stopped, or let the training push itself at its end with "
            "--hub.repo_id"
        ) from None
    return f"pushed {cfg.run}: {url}"


def main(argv: list[str] | None = None) -> int:
    return run_command("push", argv)
