"""A policy's model card and the files that go with it to the Hub (`PolicyArtifacts`), staged in one folder: config.json
and model.safetensors, README.md (the card), train_config.json, eval_info.json, replay.mp4 (the first eval episode),
eval/episode_<i>.mp4, eval.html (hfpolicy view's page) and training_curve.png. Training and evaluation build the
`PolicyArtifacts` and hand them to `Policy.push_to_hub`."""

import json
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, HfApi, ModelCard, ModelCardData, constants

from hfpolicy.constants import EVAL_INFO_FILE, REPLAY_VIDEO_FILE, TRAIN_CONFIG_FILE, TRAINING_CURVE_FILE
from hfpolicy.io.episode_videos import episode_index_of
from hfpolicy.io.hub_errors import describe_push_error
from hfpolicy.policies.errors import PolicyPushError

LEROBOT_VERSION = "0.6.1"  # the LeRobot release whose loading code a LeRobot-layout card shows (lerobot_format's)


@dataclass
class PolicyArtifacts:
    """What accompanies a policy's weights on the Hub; every field optional."""

    eval_info: str | Path | dict[str, Any] | None = None  # an eval_info.json (path or dict): card metrics + the file
    videos: Sequence[str | Path] = field(default_factory=tuple)  # eval mp4s: eval/episode_<i>.mp4, the first replay.mp4
    train_config: dict[str, Any] | None = None  # train_config.json's dict: uploaded, and the card names the data
    training_curve: str | Path | None = None  # a PNG of loss (and success) over steps
    env_type: str | None = None  # the simulator the eval ran in (default pusht)
    dataset_repo_id: str | None = None  # the Hub dataset trained on (card metadata and link)
    train_command: str | None = None  # the command that trained the policy (the card's "Reproduce" block)
    eval_page: str | Path | None = None  # the evaluation's page (`hfpolicy view`, videos inside): uploaded as eval.html
    online_episodes: int | None = None  # online training: episodes of the policy's own rollouts it trained on
    online_data_repo_id: str | None = None  # online training: the Hub dataset those episodes were published as

    def eval_info_dict(self) -> dict[str, Any] | None:
        """eval_info read (from its file if a path); ValueError unless it has eval_info.json's 'aggregated' entry."""
        if self.eval_info is None:
            return None
        info = self.eval_info if isinstance(self.eval_info, dict) else json.loads(Path(self.eval_info).read_text())
        if "aggregated" not in info:
            raise ValueError("eval_info must be an eval_info.json (or its dict) with an 'aggregated' entry")
        return info


EVAL_VIDEOS_DIR = "eval"
EVAL_PAGE_FILE = "eval.html"  # the evaluation's page (hfpolicy.viewer), linked from the card
POLICY_TAGS = {"diffusion": "diffusion-policy", "act": "act", "tdmpc": "tdmpc"}  # Hub tags of the policy types
ENV_NAMES = {"pusht": "PushT (gym-pusht)"}  # readable names of the simulators in eval results
CARD_METRICS = (  # (eval_info key, model-index metric name)
    ("avg_max_reward", "Average max reward"),
    ("pc_success", "Success rate (%)"),
    ("n_episodes", "Episodes"),
)

LEROBOT_CLASSES = {  # policy type -> (LeRobot module, class) that loads an export
    "diffusion": ("lerobot.policies.diffusion.modeling_diffusion", "DiffusionPolicy"),
    "act": ("lerobot.policies.act.modeling_act", "ACTPolicy"),
    "tdmpc": ("lerobot.policies.tdmpc.modeling_tdmpc", "TDMPCPolicy"),
}

CARD_TEMPLATE = (Path(__file__).parent / "model_card.md.jinja").read_text()  # Jinja, filled by make_model_card


def make_model_card(
    repo_id: str,
    policy: Any,
    artifacts: PolicyArtifacts | None = None,
    *,
    provenance: str | None = None,
    library_name: str = "hfpolicy",
) -> ModelCard:
    """The model card (YAML metadata with eval results, metrics, replay video, usage, data, training command);
    `library_name` "lerobot" (an export in LeRobot's layout) also shows LeRobot's way to load it."""
    artifacts = artifacts or PolicyArtifacts()
    info = artifacts.eval_info_dict()
    eval_summary = info["aggregated"] if info is not None else None
    config, train_config = policy.config, artifacts.train_config or {}
    env_type = artifacts.env_type or "pusht"
    if provenance is None and config.converted_from:
        provenance = f"converted by hfpolicy from {config.converted_from}, with the same weights and normalization."
    lerobot_module, lerobot_class = LEROBOT_CLASSES[config.type] if library_name == "lerobot" else (None, None)
    return ModelCard.from_template(
        card_metadata(repo_id, config, artifacts, eval_summary, library_name=library_name),
        template_str=CARD_TEMPLATE,
        repo_id=repo_id,
        policy_name=POLICY_TAGS.get(config.type, config.type).replace("-", " ").title(),
        env_name=ENV_NAMES.get(env_type, env_type),
        env_type=env_type,
        dataset_repo_ids=_dataset_names(artifacts.dataset_repo_id),
        inputs=", ".join(f"`{key}` {tuple(f.shape)}" for key, f in config.input_features.items()),
        action_shape=tuple(config.action_feature.shape),
        metrics_table=_metrics_table(eval_summary) if eval_summary else None,
        video_url=f"{constants.ENDPOINT}/{repo_id}/resolve/main/{REPLAY_VIDEO_FILE}" if artifacts.videos else None,
        n_videos=len(artifacts.videos),
        has_eval_page=artifacts.eval_page is not None,
        train_command=artifacts.train_command,
        config_dir=repo_id.split("/")[-1],
        has_curve=artifacts.training_curve is not None,
        local_dataset=_local_dataset(train_config.get("dataset") or {}),
        scripted=bool((train_config.get("dataset") or {}).get("scripted_episodes")),
        finetuned_from=config.pretrained_path,
        recipe=train_config.get("recipe"),
        recipe_reason=train_config.get("recipe_reason"),
        online=_online_summary(train_config.get("online") or {}, artifacts),
        provenance=provenance,
        lerobot_module=lerobot_module,
        lerobot_class=lerobot_class,
        lerobot_version=LEROBOT_VERSION,
    )


def card_metadata(
    repo_id: str,
    config: Any,
    artifacts: PolicyArtifacts,
    eval_summary: dict[str, Any] | None,
    library_name: str,
) -> ModelCardData:
    """The card's YAML: library, licence, tags, datasets, and the eval results as model-index."""
    env_type = artifacts.env_type or "pusht"
    env_name = ENV_NAMES.get(env_type, env_type)
    tags = ["robotics", "hfpolicy", POLICY_TAGS.get(config.type, config.type), env_type]
    if library_name == "lerobot" or (config.converted_from or "").startswith("LeRobot"):
        tags.append("lerobot")
    eval_results = None
    if eval_summary is not None:
        eval_results = [
            EvalResult(
                task_type="robotics",
                task_name="Robotics",
                dataset_type=env_type,
                dataset_name=env_name,
                metric_type=key,
                metric_name=name,
                metric_value=float(eval_summary[key]) if key != "n_episodes" else int(eval_summary[key]),
            )
            for key, name in CARD_METRICS
        ]
    return ModelCardData(
        library_name=library_name,
        license="apache-2.0",
        pipeline_tag="robotics",
        tags=tags,
        datasets=_dataset_names(artifacts.dataset_repo_id) or None,  # '[a,b]': a run on several datasets
        model_name=repo_id,
        eval_results=eval_results,
    )


def _local_dataset(dataset_cfg: dict[str, Any]) -> str | None:
    """train_config.json's local dataset, as the card names it (None: a Hub dataset)."""
    if not dataset_cfg.get("root"):
        return None
    text = f"`{dataset_cfg['root']}`"
    if dataset_cfg.get("scripted_episodes"):
        text += f", {dataset_cfg['scripted_episodes']} demonstrations recorded by hfpolicy's scripted expert"
    return text


def portable_train_config(train_config: dict[str, Any]) -> dict[str, Any]:
    """train_config.json as it travels with the model, for `hfpolicy train --config_path=` anywhere: without the run's
    folder, resume, push targets and the folder of a scripted recording."""
    portable = json.loads(json.dumps(train_config))
    portable.update(output_dir=None, resume=False)
    portable["hub"] = {**(portable.get("hub") or {}), "repo_id": None, "online_data_repo_id": None}
    dataset = portable.get("dataset") or {}
    if dataset.get("scripted_episodes"):
        portable["dataset"] = {**dataset, "root": None}
    return portable


def _online_summary(online: dict[str, Any], artifacts: PolicyArtifacts) -> str | None:
    """One sentence on the run's online training (train_config.json's `online`), or None for an offline run."""
    if not online.get("every"):
        return None
    labels = {
        "expert": "labelled by the scripted expert (DAgger)",
        "recovery": "failures replaced by the scripted expert's demonstrations from where they ended",
        "policy": "successful episodes only, own actions",
        "reward": "every episode with its actions and the env's rewards: reinforcement learning",
    }
    pure = bool(online.get("seed_episodes"))
    ratio = online.get("ratio")
    ratio = (1.0 if pure else 0.5) if ratio is None else ratio
    every = f"every {online['every']} steps"
    if online.get("updates_per_env_step"):
        every = f"every max({online['every']}, {online['updates_per_env_step']} x the last round's env steps) steps"
    text = (
        f"from step {online.get('start_step') or online['every']} on, {every}, "
        f"{online['n_episodes']} episodes of the policy ({labels.get(online['labels'], online['labels'])}) joined "
        f"its data, {100 * ratio:.0f}% of every batch"
    )  # fmt: skip
    if pure:
        text = (
            f"pure online, without demonstrations: {online['seed_episodes']} episodes of random actions first, then "
            + text
        )
    if artifacts.online_episodes is not None:
        text += f"; it trained on {artifacts.online_episodes} online episodes"
    if artifacts.online_data_repo_id:
        repo = artifacts.online_data_repo_id
        text += f", published as [{repo}](https://huggingface.co/datasets/{repo})"
    return text


def _metrics_table(summary: dict[str, Any]) -> str:
    low, high = summary.get("pc_success_ci95", (float("nan"), float("nan")))
    rows = [
        ("Success rate", f"{summary['pc_success']:.1f}% (95% CI {low:.1f}–{high:.1f}%)"),
        ("Average max reward", f"{summary['avg_max_reward']:.3f}"),
        ("Average sum of rewards", f"{summary['avg_sum_reward']:.2f}"),
        ("Episodes", f"{summary['n_episodes']}"),
    ]
    return "\n".join(["| Metric | Value |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows)])


def stage_policy_repo(policy: Any, folder: str | Path, repo_id: str, artifacts: PolicyArtifacts | None = None) -> Path:
    """Writes the whole repository into `folder` and returns it; missing videos or a malformed eval_info fail here."""
    folder, artifacts = Path(folder), artifacts or PolicyArtifacts()
    videos = [Path(video) for video in artifacts.videos]
    missing = [str(video) for video in videos if not video.is_file()]
    if missing:
        raise FileNotFoundError(f"eval video {', '.join(missing)} does not exist")
    info = artifacts.eval_info_dict()
    folder.mkdir(parents=True, exist_ok=True)
    make_model_card(repo_id, policy, artifacts).save(folder / "README.md")
    policy.save_pretrained(folder)  # config.json, model.safetensors; it keeps the README.md written above
    if info is not None:
        (folder / EVAL_INFO_FILE).write_text(json.dumps(info, indent=2))
    if artifacts.train_config is not None:
        (folder / TRAIN_CONFIG_FILE).write_text(json.dumps(portable_train_config(artifacts.train_config), indent=2))
    for i, video in enumerate(videos):
        if i == 0:
            shutil.copyfile(video, folder / REPLAY_VIDEO_FILE)
        (folder / EVAL_VIDEOS_DIR).mkdir(exist_ok=True)
        index = episode_index_of(video)
        shutil.copyfile(video, folder / EVAL_VIDEOS_DIR / f"episode_{i if index is None else index}.mp4")
    if artifacts.training_curve is not None:
        shutil.copyfile(artifacts.training_curve, folder / TRAINING_CURVE_FILE)
    if artifacts.eval_page is not None:
        shutil.copyfile(artifacts.eval_page, folder / EVAL_PAGE_FILE)
    return folder


def upload_policy_repo(
    policy: Any,
    repo_id: str,
    artifacts: PolicyArtifacts,
    *,
    private: bool | None = None,
    token: str | None = None,
    branch: str | None = None,
    commit_message: str = "Upload policy with hfpolicy",
) -> str:
    """Stages the policy's repository, creates the repo (and branch) and uploads it in one commit; returns its URL."""
    api = HfApi(token=token)
    with tempfile.TemporaryDirectory(prefix="hfpolicy-push-") as tmp:
        folder = stage_policy_repo(policy, Path(tmp), repo_id, artifacts)
        try:
            repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
            if branch is not None:
                api.create_branch(repo_id, branch=branch, exist_ok=True)
            commit = api.upload_folder(
                repo_id=repo_id, folder_path=folder, revision=branch, commit_message=commit_message, repo_type="model"
            )
        except Exception as e:
            cause = describe_push_error(e, repo_id)  # None: not a Hub or network failure (a bug), shown as it is
            if cause is None:
                raise
            raise PolicyPushError(cause) from e
    return str(commit)


def _dataset_names(repo_id: str | None) -> list[str]:
    """'user/a', '[user/a,user/b]' or "['user/a', 'user/b']" (a run on several datasets) -> the Hub repo ids."""
    parts = (part.strip().strip("'\"") for part in (repo_id or "").strip().strip("[]").split(","))
    return [part for part in parts if part]
