"""The training run's configuration (TrainConfig and its parts): what `hfpolicy train` parses, validates, saves as
train_config.json and reads back on `--resume`."""

import contextlib
import io
import json
import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import draccus

from hfpolicy.cli.flags import parse_flags
from hfpolicy.constants import TRAIN_CONFIG_FILE
from hfpolicy.envs.configs import EnvConfig, PushTEnvConfig
from hfpolicy.eval.config import TrainEvalConfig
from hfpolicy.io.paths import OutputOverlapsSourceError, check_apart
from hfpolicy.policies.config import PolicyConfig
from hfpolicy.policies.diffusion.configuration import DiffusionConfig
from hfpolicy.record.scripted_cache import scripted_dataset_root, scripted_task_label
from hfpolicy.training.policy_path import split_policy_path
from hfpolicy.words import counted

TRACKERS = ("tensorboard", "wandb", "none")


class TrainConfigError(ValueError):
    """The run cannot start as configured (raised before any training step)."""


@dataclass
class DatasetConfig:
    """The LeRobot v3.0 dataset to train on."""

    repo_id: str = "lerobot/pusht"  # Hub dataset repo id; ignored when `root` or `scripted_episodes` is set;
    # '[a,b]' trains on the union of several datasets
    root: str | None = None  # local dataset directory (meta/, data/, videos/); when set nothing is downloaded;
    # '[dir_a,dir_b]' trains on several (their names: a repo_id list of the same length, else the folders)
    weights: list[float] | None = None  # several datasets: each one's share of the samples (default: its frames')
    rename_features: list[str] | None = None  # several datasets: [OLD=NEW,...] renames a feature wherever it exists
    scripted_episodes: int = 0  # > 0: train on this many demos of --env's scripted expert (state-only), recorded once
    # into `root` (default: <cache>/datasets/<task>_scripted_<n>) and reused by later runs; no network
    revision: str | None = None  # Hub branch, tag or commit of the dataset
    episodes: list[int] | None = None  # train on these episodes only (default: all)
    input_features: list[str] | None = None  # features the policy reads (default: every image and observation.* vector)
    streaming: bool = False  # read the Hub dataset (--dataset.repo_id, one or '[a,b]') as training goes, within bounded
    # caches, instead of downloading it first
    shuffle_buffer_episodes: int = 16  # streaming: episodes open at once (per dataset) that samples are drawn from
    shuffle_buffer_shards: int = 1  # streaming: groups of the open episodes, batch k drawn from group k mod this (a
    # multiple of --num_workers > 1: each worker decodes its own episodes); part of the data order, as the seed is
    stream_video: str = "auto"  # streaming: "range" (byte ranges of the Hub file, nothing on disk), "download" (whole
    # files into the disk cache), "auto" (download when the episodes' video files fit --dataset.stream_disk_gb)
    stream_ram_gb: float = 2.0  # streaming: decoded frames kept in memory per process, over its --num_workers workers
    stream_disk_gb: float = 10.0  # streaming: fetched files kept on disk per process, over its --num_workers workers
    stream_retries: int = 4  # streaming: attempts per file (exponential backoff) before the run stops, naming it


ONLINE_LABELS = ("expert", "recovery", "policy", "reward")
DEFAULT_ONLINE_RATIO = 0.5  # FOWM's balanced sampling


@dataclass
class OnlineConfig:
    """Online training: rounds of rollouts of the policy being trained (EMA weights) join its training data."""

    every: int = 0  # steps between rounds of online rollouts (at least, with updates_per_env_step); 0: offline only
    start_step: int | None = None  # the first round runs after this step (default: `every`)
    n_episodes: int = 50  # episodes per round, over all processes (each process steps its share in lockstep)
    labels: str = "expert"  # expert: the scripted expert labels every visited state (DAgger); policy: the successful
    # episodes' own actions; recovery: the expert's demos from where failed episodes ended; reward: every episode with
    # its actions and the env's rewards (online RL, TD-MPC)
    expert_drive_prob: float = 0.0  # expert labels: the fraction of steps the expert's action drives, not the policy's
    ratio: float | None = None  # the share of every batch drawn from the online data, in [0, 1] (default 0.5; pure: 1)
    start_seed: int = 1_000_000  # online episode j of round r is seeded start_seed + seed_episodes + r * n_episodes + j
    seed_episodes: int = 0  # > 0: pure online (reward labels, no demonstrations), starting from this many seeded
    # random-action episodes (TD-MPC's seed steps), which give the normalization stats
    updates_per_env_step: float = 0.0  # > 0: the next round starts after max(every, this x the last round's env steps)
    exploration_std: float = 0.0  # reward labels: the planner's std floor and the executed action's noise (normalized
    # actions), annealed linearly to exploration_std_end over exploration_steps online env steps
    exploration_std_end: float | None = None  # ... down to this (default: exploration_std: constant)
    exploration_steps: int = 25_000  # online env steps over which the exploration std anneals (TD-MPC's 25000)
    capacity: int = 0  # > 0: sample only the newest whole online episodes within this many frames (files kept); 0: all

    @property
    def batch_ratio(self) -> float:
        """--online.ratio, its default, or 1 in pure online."""
        if self.ratio is not None:
            return self.ratio
        return 1.0 if self.seed_episodes > 0 else DEFAULT_ONLINE_RATIO

    @property
    def pure(self) -> bool:
        """Pure online: no offline data; the run starts from --online.seed_episodes random-action episodes."""
        return self.every > 0 and self.seed_episodes > 0

    def exploration_at(self, env_steps: int) -> float:
        """The exploration std after `env_steps` online env steps."""
        end = self.exploration_std if self.exploration_std_end is None else self.exploration_std_end
        mix = min(env_steps / self.exploration_steps, 1.0) if self.exploration_steps > 0 else 1.0
        return (1.0 - mix) * self.exploration_std + mix * end


@dataclass
class HubConfig:
    """Where the trained policy is shared."""

    repo_id: str | None = None  # push the policy here at the end (e.g. user/pusht-diffusion); None: no push
    private: bool = False  # create the repo as private
    push_after_eval: bool = False  # also push after every periodic evaluation
    branch: str | None = None  # push to this branch instead of main
    online_data_repo_id: str | None = None  # also publish the run's online data (--online.*) as this dataset repo


@dataclass
class BudgetConfig:
    """A run that fits a time budget: its steps chosen from the step time it measures (hfpolicy.training.budget)."""

    minutes: float | None = None  # the run's wall time, recording, compiling and evaluations included: after its
    # first 25 steps it chooses the --steps that fit; None: --steps as given
    min_steps: int | None = None  # the fewest steps the budget may choose (default: 40% of --steps)
    chosen_steps: int | None = None  # the steps chosen, recorded (a resume or --config_path reuses the choice)
    planned_steps: int | None = None  # the --steps planned before the choice (the lr schedule of the steps before it)
    chosen_at_step: int | None = None  # the step after which it was chosen
    step_s: float | None = None  # seconds per step measured
    eval_s_per_episode: float | None = None  # seconds per evaluation episode estimated
    spent_s: float | None = None  # seconds spent when it was chosen (recording, set-up, compiling, first steps)

    def problems(self) -> list[str]:
        """What is out of range, in the flags' words."""
        problems = []
        if self.minutes is not None and not (math.isfinite(self.minutes) and self.minutes > 0):
            problems.append(
                f"--budget.minutes must be a number of minutes > 0, got {self.minutes:g}; leave it out (or null) to "
                "train --steps steps"
            )
        if self.min_steps is not None and self.min_steps < 1:
            problems.append(f"--budget.min_steps must be >= 1 (or null: 40% of --steps), got {self.min_steps}")
        incomplete = self.planned_steps is None or self.chosen_at_step is None
        if self.chosen_steps is not None and (incomplete or self.chosen_steps < 1):
            problems.append(
                "--budget.chosen_steps needs --budget.planned_steps and --budget.chosen_at_step (a budget's choice is "
                "recorded whole in train_config.json): set --budget.chosen_steps=null to choose again"
            )
        return problems


@dataclass
class TrainConfig:
    """Everything a training run needs; saved as train_config.json beside every checkpoint."""

    policy: PolicyConfig = field(default_factory=DiffusionConfig)  # --policy.type=diffusion and the policy's fields
    dataset: DatasetConfig = field(default_factory=DatasetConfig)  # --dataset.repo_id / --dataset.root
    env: EnvConfig = field(default_factory=PushTEnvConfig)  # simulator of the periodic evaluation (--env.type=pusht)
    eval: TrainEvalConfig = field(default_factory=TrainEvalConfig)  # --eval.freq, --eval.n_episodes, ...
    hub: HubConfig = field(default_factory=HubConfig)  # --hub.repo_id=user/name pushes the trained policy
    online: OnlineConfig = field(default_factory=OnlineConfig)  # --online.every=N: the policy's rollouts join its data
    budget: BudgetConfig = field(default_factory=BudgetConfig)  # --budget.minutes=M: the steps that fit M minutes
    output_dir: str | None = None  # run folder (checkpoints, logs, evals); default outputs/train/<date>_<time>_<policy>
    resume: bool = False  # continue the run in output_dir from its last checkpoint (its train_config.json is reused)
    steps: int = 200_000  # optimizer steps in total (with --budget.minutes: planned, until the budget chooses)
    batch_size: int = 64  # samples per process per forward pass
    gradient_accumulation_steps: int = 1  # forward/backward passes per optimizer step
    grad_clip_norm: float = 10.0  # clip the gradient's global norm to this (0 disables clipping)
    mixed_precision: str | None = None  # no / fp16 / bf16 (GPU); None: what `accelerate launch` was given
    compile: bool = False  # torch.compile the training forward (~3x faster state-input Diffusion Policy steps on CPU,
    # after 1-2 min of compiling)
    num_threads: int | None = None  # torch threads per process on CPU; default: the cores available / processes
    num_workers: int = 0  # DataLoader worker processes (frames are decoded once and cached, so 0 is usually enough)
    seed: int = 1000  # seeds data order, weights init, crops and noise (each process adds its rank)
    save_freq: int = 20_000  # steps between checkpoints (and one at the end); 0: only at the end
    save_every_minutes: float = 10.0  # also a checkpoint once this much wall time passed since the last one (a hard
    # kill loses at most that); 0: by --save_freq only
    keep_last_checkpoints: int = 3  # older checkpoints are deleted; 0 keeps all
    log_freq: int = 100  # steps between log entries (trackers, metrics.jsonl, progress bar)
    tracker: str = "tensorboard"  # experiment tracker: tensorboard, wandb or none
    progress: bool = True  # show progress bars
    recipe: str | None = None  # the preset that chose these defaults (examples/train_pusht.py --recipe), if any
    recipe_reason: str | None = None  # why that preset was chosen (printed first, kept in the model card)


def validate_train_config(cfg: TrainConfig) -> None:
    """TrainConfigError naming every flag out of range, before anything is created."""
    if cfg.resume and not cfg.output_dir:
        raise TrainConfigError("--resume=true needs --output_dir=DIR: the folder of the run to continue")
    at_least_1 = ("steps", "batch_size", "gradient_accumulation_steps", "log_freq")
    problems = [f"--{name} must be >= 1, got {getattr(cfg, name)}" for name in at_least_1 if getattr(cfg, name) < 1]
    if cfg.num_threads is not None and cfg.num_threads < 1:
        problems.append(f"--num_threads must be >= 1 (or null: the cores per process), got {cfg.num_threads}")
    at_least_0 = ("save_freq", "save_every_minutes", "num_workers", "keep_last_checkpoints")
    problems += [f"--{name} must be >= 0, got {getattr(cfg, name)}" for name in at_least_0 if getattr(cfg, name) < 0]
    problems += [problem.flags("eval.") for problem in cfg.eval.problems()]
    if cfg.dataset.scripted_episodes < 0:
        problems.append(f"--dataset.scripted_episodes must be >= 0, got {cfg.dataset.scripted_episodes}")
    problems += online_config_problems(cfg)
    problems += cfg.budget.problems()
    if cfg.output_dir and cfg.dataset.root:  # the run folder (checkpoints rotate, online_data/ is replaced) apart
        try:
            check_apart(
                cfg.output_dir, cfg.dataset.root, output_words=f"--output_dir={cfg.output_dir}",
                source_words=f"--dataset.root={cfg.dataset.root}",
            )  # fmt: skip
        except OutputOverlapsSourceError as e:
            problems.append(str(e))
    from hfpolicy.policies.device import accelerator_device_options  # lazy: torch, not imported by --help

    try:
        accelerator_device_options(cfg.policy.device)
    except ValueError as e:
        problems.append(str(e))
    if cfg.tracker not in TRACKERS:
        problems.append(f"--tracker={cfg.tracker!r} is not one of {', '.join(TRACKERS)}")
    if problems:
        raise TrainConfigError("; ".join(problems))


def online_config_problems(cfg: "TrainConfig") -> list[str]:
    """What is wrong with the --online.* flags."""
    online = cfg.online
    if online.every == 0:
        if online.labels == "reward" or online.seed_episodes:
            return ["--online.labels=reward and --online.seed_episodes need --online.every=N (steps between rounds)"]
        return []
    problems = []
    if online.every < 0 or online.n_episodes < 1:
        problems.append("--online.every must be >= 0 and --online.n_episodes >= 1")
    if online.start_step is not None and online.start_step < 1:
        problems.append(f"--online.start_step must be >= 1 (or null), got {online.start_step}")
    if online.labels not in ONLINE_LABELS:
        problems.append(f"--online.labels={online.labels!r} is not one of {', '.join(ONLINE_LABELS)}")
    if online.ratio is not None and not 0.0 <= online.ratio <= 1.0:
        problems.append(f"--online.ratio must be in [0, 1], got {online.ratio}")
    if not 0.0 <= online.expert_drive_prob <= 1.0 or (online.expert_drive_prob > 0 and online.labels != "expert"):
        problems.append("--online.expert_drive_prob must be in [0, 1], and > 0 only with --online.labels=expert")
    if online.labels in ("expert", "recovery") and cfg.env.type != "pusht":
        problems.append(f"--online.labels={online.labels} needs a scripted expert, which only --env.type=pusht has")
    if online.updates_per_env_step < 0:
        problems.append(f"--online.updates_per_env_step must be >= 0 (0: a round every --online.every steps), got "
                        f"{online.updates_per_env_step}")  # fmt: skip
    if online.capacity < 0:
        problems.append(f"--online.capacity must be >= 0 frames (0: no bound), got {online.capacity}")
    elif 0 < online.capacity < cfg.env.max_episode_steps:
        problems.append(
            f"--online.capacity={online.capacity} frames is smaller than one episode (--env.episode_length="
            f"{cfg.env.max_episode_steps}): raise it to >= {cfg.env.max_episode_steps}, or 0 for no bound"
        )
    problems += reward_label_problems(cfg)
    # the online episodes must never be the evaluation's nor the scripted recording's
    n_eval = max(cfg.eval.n_episodes, cfg.eval.final_n_episodes or 0)
    n_online = max(online.seed_episodes, 0) + online.n_episodes * max(cfg.steps // max(online.every, 1), 1)
    online_seeds = range(online.start_seed, online.start_seed + n_online)
    eval_seeds = range(cfg.eval.start_seed, cfg.eval.start_seed + n_eval)
    recorded = range(0, cfg.dataset.scripted_episodes)
    for name, seeds in (("the evaluation's", eval_seeds), ("the scripted recording's", recorded)):
        if seeds and online_seeds and max(seeds.start, online_seeds.start) < min(seeds.stop, online_seeds.stop):
            problems.append(
                f"the online seeds {online_seeds.start}..{online_seeds.stop - 1} overlap {name} seeds "
                f"{seeds.start}..{seeds.stop - 1}: choose another --online.start_seed"
            )
    return problems


def reward_label_problems(cfg: "TrainConfig") -> list[str]:
    """What is wrong with online reinforcement learning's flags."""
    online, problems = cfg.online, []
    if online.labels == "reward" and cfg.policy.reward_delta_indices is None:
        problems.append(
            f"--online.labels=reward trains on the env's rewards, which the {cfg.policy.type} policy does not learn "
            "from: use --policy.type=tdmpc, or --online.labels=expert, recovery or policy (imitation)"
        )
    end = online.exploration_std if online.exploration_std_end is None else online.exploration_std_end
    max_std = getattr(cfg.policy, "max_std", None)  # the planner's largest std (TD-MPC)
    if online.exploration_std < 0 or end < 0:
        problems.append("--online.exploration_std and --online.exploration_std_end must be >= 0")
    elif end > online.exploration_std:
        problems.append(
            f"--online.exploration_std_end={end} is above --online.exploration_std={online.exploration_std}: "
            "the exploration std only decreases; lower the end or raise the start"
        )
    elif online.exploration_std > 0 and online.labels != "reward":
        problems.append("--online.exploration_std explores for --online.labels=reward: leave it out (or 0) for "
                        f"--online.labels={online.labels}")  # fmt: skip
    elif max_std is not None and online.exploration_std > max_std:
        problems.append(f"--online.exploration_std={online.exploration_std} is above the planner's --policy.max_std="
                        f"{max_std}: lower it, or raise --policy.max_std")  # fmt: skip
    if online.exploration_steps < 1:
        problems.append(f"--online.exploration_steps must be >= 1, got {online.exploration_steps}")
    if online.seed_episodes < 0:
        problems.append(f"--online.seed_episodes must be >= 0 (0: start from the offline data), got "
                        f"{online.seed_episodes}")  # fmt: skip
    elif online.seed_episodes > 0:
        problems += pure_online_problems(cfg)
    return problems


def pure_online_problems(cfg: "TrainConfig") -> list[str]:
    """Pure online (--online.seed_episodes > 0) has no offline data: the flags that would give it some."""
    online, dataset, problems = cfg.online, cfg.dataset, []
    if online.labels != "reward":
        problems.append(
            f"--online.seed_episodes (pure online: random-action episodes, no demonstrations) needs "
            f"--online.labels=reward, got --online.labels={online.labels}"
        )
    offline = ("root", "episodes", "weights", "rename_features", "scripted_episodes", "streaming")
    given = [f"--dataset.{name}" for name in offline if getattr(dataset, name)]
    given += ["--dataset.repo_id"] if dataset.repo_id != DatasetConfig.repo_id else []
    if given:
        problems.append(
            f"--online.seed_episodes={online.seed_episodes} starts without demonstrations (pure online), but "
            f"{', '.join(given)} name offline data: leave them out (--dataset.scripted_episodes=0), or set "
            "--online.seed_episodes=0 to fine-tune from that data"
        )
    if online.ratio is not None and online.ratio != 1.0:
        problems.append(
            f"--online.ratio={online.ratio}: pure online (--online.seed_episodes) has no offline data, so every "
            "batch is online data; leave --online.ratio out (or 1)"
        )
    return problems


def describe_dataset(dataset: DatasetConfig, env: EnvConfig | None = None, online: OnlineConfig | None = None) -> str:
    """Where a run's data comes from, for its first line."""
    if online is not None and online.pure:
        return (
            f"none: pure online, {counted(online.seed_episodes, 'episode')} of random actions first, then the "
            "policy's own"
        )
    if dataset.scripted_episodes > 0:
        root = dataset.root or scripted_dataset_root(dataset.scripted_episodes, env)
        state = "reused" if Path(root).exists() else "recorded now, reused by later runs"
        label = scripted_task_label(env)
        return f"{counted(dataset.scripted_episodes, f'scripted-expert {label} demonstration')} in {root} ({state})"
    if dataset.root is not None:
        return f"the local dataset {dataset.root}"
    return f"{dataset.repo_id} from the Hub"


def dataset_label(dataset: DatasetConfig) -> str:
    """What a run trained on, as its logs and model card name it: the local folder or the repo id."""
    return dataset.repo_id if dataset.root is None else str(dataset.root)


def train_config_to_dict(cfg: TrainConfig) -> dict[str, Any]:
    """JSON-ready, with the policy as its own to_dict (its `type` first) so Policy configs round-trip."""
    with draccus.config_type("json"):
        stream = io.StringIO()
        draccus.dump(cfg, stream)
    data = json.loads(stream.getvalue())
    data["policy"] = cfg.policy.to_dict()
    data["env"] = {"type": cfg.env.type, **data.get("env", {})}
    return data


def parse_dataset_list(value: str | Sequence[str] | None) -> list[str] | None:
    """'[a,b]' (as --dataset.repo_id / --dataset.root give several datasets), a list, or one name -> the names."""
    if value is None:
        return None
    if not isinstance(value, str):
        return [str(v) for v in value]
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        return [part.strip().strip("'\"") for part in text[1:-1].split(",") if part.strip()]
    return [text]


def parse_train_config(
    argv: list[str], config_class: type[TrainConfig] = TrainConfig, prog: str = "hfpolicy train"
) -> TrainConfig:
    """Flags → config (FlagError for a bad flag), over the run's train_config.json with --resume=true, over the saved
    policy's config with --policy.path (hfpolicy.training.finetune)."""
    pretrained, argv = split_policy_path(argv)
    if pretrained is None:
        cfg = parse_flags(config_class, argv, prog)
    else:
        from hfpolicy.training.finetune import parse_with_pretrained_policy  # lazy: torch, only with --policy.path

        cfg = parse_with_pretrained_policy(
            lambda flags, base: parse_flags(config_class, flags, prog, config_path=base), pretrained, argv
        )
    if cfg.resume and cfg.output_dir and (Path(cfg.output_dir) / TRAIN_CONFIG_FILE).is_file():
        saved = Path(cfg.output_dir) / TRAIN_CONFIG_FILE
        check_resumed_policy_type(argv, cfg.policy.type, saved)
        with draccus.config_type("json"), without_retired_fields(saved) as current:
            cfg = parse_flags(config_class, argv, prog, config_path=current)
    for name in ("repo_id", "root"):  # a list of one dataset ('[dir]') is that dataset
        names = parse_dataset_list(getattr(cfg.dataset, name))
        if names is not None and len(names) == 1:
            setattr(cfg.dataset, name, names[0])
    return cfg


# Fields a saved train_config.json may hold that no longer exist; they changed how, not what, a run trains.
RETIRED_FIELDS = {"dataset": ("stream_read_ahead",)}  # read-ahead, retired in favour of DataLoader workers


@contextlib.contextmanager
def without_retired_fields(saved: Path):
    """`saved`, or a copy of it without RETIRED_FIELDS."""
    data = json.loads(saved.read_text())
    retired = [(part, name) for part, names in RETIRED_FIELDS.items() for name in names if name in data.get(part, {})]
    if not retired:
        yield saved
        return
    for part, name in retired:
        del data[part][name]
    with tempfile.TemporaryDirectory(prefix="hfpolicy-resume-") as folder:
        current = Path(folder) / TRAIN_CONFIG_FILE
        current.write_text(json.dumps(data))
        yield current


def check_resumed_policy_type(argv: list[str], policy_type: str, saved: Path) -> None:
    """TrainConfigError when --policy.type in `argv` names another policy than the resumed run's."""
    given = any(arg == "--policy.type" or arg.startswith("--policy.type=") for arg in argv)
    run_type = (json.loads(saved.read_text()).get("policy") or {}).get("type")
    if given and run_type is not None and policy_type != run_type:
        raise TrainConfigError(
            f"--resume=true continues the {run_type} policy of the run in {saved.parent}, and --policy.type="
            f"{policy_type} (the run has {run_type}) would change it: drop --policy.type to resume, or train the "
            f"{policy_type} policy as a new run in another --output_dir"
        )
