"""The training data of a run, one path for every kind: `load_training_data` reads the N >= 1 datasets the flags name
(local, recorded, downloaded or streamed from the Hub) as one MixtureDataset, in the order of one EpisodeAwareSampler,
batched by an EpochBatchSampler that a resumed run starts mid-epoch."""

import contextlib
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import torch
from accelerate import Accelerator

from hfpolicy.cli.flags import error_in_flags
from hfpolicy.constants import REWARD
from hfpolicy.datasets import DatasetMeta, PolicyDataset, StreamingPolicyDataset, dataset_to_policy_features
from hfpolicy.datasets.format import INFO_PATH
from hfpolicy.datasets.hub import download_dataset, download_meta
from hfpolicy.datasets.loader_transfer import identity_collate
from hfpolicy.datasets.mixture import MixtureDataset, common_features, parse_renames, renamed_view
from hfpolicy.datasets.remote_files import StreamingError
from hfpolicy.datasets.sampler import EpisodeAwareSampler, EpochBatchSampler
from hfpolicy.datasets.streaming import GB, STREAM_VIDEO_CHOICES
from hfpolicy.envs import EnvConfig
from hfpolicy.io.termination import ignore_sigterm
from hfpolicy.policies import PolicyConfig
from hfpolicy.training.config import DatasetConfig, TrainConfig, TrainConfigError, dataset_label, parse_dataset_list


@dataclasses.dataclass
class TrainingData:
    """The data a run reads and how: its name, the dataset, its sampler and the DataLoader over them."""

    name: str  # the Hub repo id, the local folder, or '[a,b]' for several: what the run really read
    dataset: MixtureDataset
    sampler: EpisodeAwareSampler
    batch_sampler: EpochBatchSampler
    dataloader: torch.utils.data.DataLoader


def load_training_data(cfg: TrainConfig, accelerator: Accelerator) -> tuple[TrainConfig, TrainingData]:
    """(the config with the dataset's root and the policy's features filled in, the data)."""
    dataset_cfg, progress = cfg.dataset, accelerator.is_main_process and cfg.progress
    if dataset_cfg.streaming:
        problems = streaming_problems(cfg)
        if problems:
            raise TrainConfigError("; ".join(problems))
    members = dataset_members(dataset_cfg)
    if dataset_cfg.streaming:
        with dataset_errors_as_config_errors(dataset_cfg):
            metas = [open_streaming_meta(member) for member in members]
    else:
        with accelerator.main_process_first():  # one process downloads or records, the others then read it
            roots = [resolve_dataset_root(m, recipe=cfg.recipe, progress=progress, env=cfg.env) for m in members]
        if dataset_cfg.scripted_episodes > 0:  # train_config.json and the card name the recording's folder
            cfg = dataclasses.replace(cfg, dataset=dataclasses.replace(dataset_cfg, root=str(roots[0])))
            members = [cfg.dataset]
        with dataset_errors_as_config_errors(dataset_cfg):
            metas = [DatasetMeta.load(root, dataset_label(m)) for root, m in zip(roots, members, strict=True)]
    names = [dataset_label(member) for member in members]
    policy_cfg, renames = shared_policy_config(cfg, metas, names, accelerator.is_main_process)
    with dataset_errors_as_config_errors(dataset_cfg):
        parts = [
            open_member(cfg, member, meta, member_deltas(meta, renames, policy_cfg), policy_cfg)
            for member, meta in zip(members, metas, strict=True)
        ]  # a streamed one after the other: each reads its columns within the whole budgets, then holds nothing
        dataset = MixtureDataset(parts, names, renames)
        buffer: int | None = None
        if dataset_cfg.streaming:
            buffer = dataset_cfg.shuffle_buffer_episodes
            ram, disk = round(dataset_cfg.stream_ram_gb * GB), round(dataset_cfg.stream_disk_gb * GB)
            dataset.split_budgets(ram, disk, buffer, cfg.num_workers, dataset_cfg.shuffle_buffer_shards)
        sampler = EpisodeAwareSampler(
            dataset,
            drop_last_frames=policy_cfg.drop_n_last_frames,
            seed=cfg.seed,
            weights=dataset_cfg.weights,
            buffer_episodes=buffer,
            num_replicas=accelerator.num_processes,
            rank=accelerator.process_index,
            shards=dataset_cfg.shuffle_buffer_shards if dataset_cfg.streaming else 1,
            batch_size=cfg.batch_size,
        )  # each process reads its own part of one shared (seed, epoch) order, its workers their own shards
        batch_sampler = EpochBatchSampler(sampler, cfg.batch_size)  # a resumed run starts mid-epoch
    dataset.prefetch_frames(progress=progress)  # in-memory members: decode the videos once, up front
    dataloader = make_dataloader(dataset, batch_sampler, cfg, accelerator)
    data = TrainingData(dataset.repo_id, dataset, sampler, batch_sampler, dataloader)
    return dataclasses.replace(cfg, policy=policy_cfg), data


def endless_batches(dataloader, batch_sampler: EpochBatchSampler, start_batch: int, seed: int):
    """Batches forever from batch `start_batch` of the run on (the sampler starts mid-epoch). Each epoch's order and
    worker seeds are functions of (seed, epoch) alone, so a resumed run reads what the uninterrupted one would have."""
    epoch, skip = divmod(start_batch, len(batch_sampler))
    while True:
        batch_sampler.set_epoch(epoch, start_batch=skip)
        dataloader.generator.manual_seed(seed * 100_003 + epoch)  # seeds of the worker processes of this epoch
        yield from dataloader
        epoch, skip = epoch + 1, 0


def dataset_members(dataset: DatasetConfig) -> list[DatasetConfig]:
    """One DatasetConfig per dataset the flags name ('[a,b]' in --dataset.repo_id / --dataset.root)."""
    repo_ids, roots = parse_dataset_list(dataset.repo_id) or [], parse_dataset_list(dataset.root) or []
    if len(repo_ids) <= 1 and len(roots) <= 1:
        if dataset.weights is not None or dataset.rename_features is not None:
            raise TrainConfigError(
                "--dataset.weights and --dataset.rename_features need several datasets: --dataset.repo_id='[a,b]' "
                "(or --dataset.root='[dir_a,dir_b]')"
            )
        return [dataset]
    if dataset.scripted_episodes > 0 or dataset.episodes is not None:
        raise TrainConfigError(
            "--dataset.scripted_episodes and --dataset.episodes pick from one dataset: leave them out when "
            "--dataset.repo_id / --dataset.root list several"
        )
    if len(roots) > 1:
        names = repo_ids if len(repo_ids) == len(roots) else roots
        members = [
            dataclasses.replace(dataset, repo_id=n, root=r, weights=None) for n, r in zip(names, roots, strict=True)
        ]
    else:
        members = [dataclasses.replace(dataset, repo_id=r, root=None, weights=None) for r in repo_ids]
    if dataset.weights is not None and len(dataset.weights) != len(members):
        raise TrainConfigError(
            f"--dataset.weights has {len(dataset.weights)} numbers for {len(members)} datasets: give one per dataset"
        )
    return members


def open_member(cfg: TrainConfig, member: DatasetConfig, meta: DatasetMeta, deltas, policy_cfg) -> PolicyDataset:
    """One dataset of the run: its local folder, or streamed from the Hub at the commit its `meta` was read at."""
    videos = bool(policy_cfg.image_features)  # a state-only policy never decodes a frame
    common: dict[str, Any] = dict(episodes=member.episodes, delta_timestamps=deltas, download_videos=videos)
    if not cfg.dataset.streaming:
        return PolicyDataset(dataset_label(member), root=meta.root, **common)
    try:
        return StreamingPolicyDataset(
            member.repo_id,
            revision=meta.root.name,  # the commit meta/ was read at
            stream_ram_gb=member.stream_ram_gb,
            stream_disk_gb=member.stream_disk_gb,
            stream_retries=member.stream_retries,
            stream_video=member.stream_video,
            **common,
        )
    except StreamingError as e:
        raise TrainConfigError(str(e)) from e


def resolve_dataset_root(
    dataset: DatasetConfig, recipe: str | None = None, progress: bool = True, env: EnvConfig | None = None
) -> Path:
    """The local folder of the dataset: `--dataset.root`, the scripted recording, or the Hub dataset downloaded."""
    if dataset.scripted_episodes > 0:
        return record_scripted_dataset(dataset, progress, env)
    if dataset.root is not None:
        root = Path(dataset.root)
        if not root.is_dir():
            raise TrainConfigError(
                f"--dataset.root={root} is not a directory (a LeRobot v3.0 dataset: meta/, data/, videos/)"
            )
        if not (root / INFO_PATH).is_file():
            nested = next(root.glob(f"*/{INFO_PATH}"), None)
            hint = f"; its subfolder is one: --dataset.root={nested.parents[1]}" if nested is not None else ""
            raise TrainConfigError(
                f"--dataset.root={root} has no {INFO_PATH}, so it is not a LeRobot v3.0 dataset{hint}; or drop "
                "--dataset.root to download --dataset.repo_id from the Hub (`hfpolicy convert` and `hfpolicy record` "
                "write local datasets)"
            )
        return root
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        return download_dataset(dataset.repo_id, revision=dataset.revision, episodes=dataset.episodes)
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError) as e:
        offline = " or --recipe=cpu, which trains offline on recorded scripted demonstrations" if recipe else ""
        raise TrainConfigError(
            f"could not download the dataset {dataset.repo_id!r} from the Hub ({type(e).__name__}: "
            f"{str(e).splitlines()[0]}); check the repo id and the network, or train on a local copy with "
            f"--dataset.root=DIR (`hfpolicy convert` and `hfpolicy record` write one){offline}"
        ) from e


def record_scripted_dataset(dataset: DatasetConfig, progress: bool, env: EnvConfig | None = None) -> Path:
    """The scripted recording `--dataset.scripted_episodes` asks for, of `env`'s task (made or reused)."""
    from hfpolicy.record import scripted_recording  # lazy: optional heavy dependency (gym-pusht, mujoco envs)

    try:
        return scripted_recording(dataset.scripted_episodes, dataset.root, progress, env)
    except ValueError as e:
        raise TrainConfigError(str(e)) from e


def open_streaming_meta(dataset: DatasetConfig) -> DatasetMeta:
    """meta/ of the Hub dataset, downloaded now (it is small)."""
    try:
        meta_root = download_meta(dataset.repo_id, revision=dataset.revision)
    except OSError as e:  # huggingface_hub's errors, DatasetDownloadError
        raise TrainConfigError(
            f"could not read meta/ of the dataset {dataset.repo_id!r} from the Hub ({type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}); check --dataset.repo_id, --dataset.revision and the network"
        ) from e
    return DatasetMeta.load(meta_root, dataset.repo_id)


@contextlib.contextmanager
def dataset_errors_as_config_errors(dataset: DatasetConfig):
    """A dataset that cannot be read or windowed as asked is bad input: one clear line, no traceback."""
    try:
        yield
    except ValueError as e:
        where = dataset.root or dataset.repo_id
        raise TrainConfigError(f"dataset {where}: {e}") from e


def shared_policy_config(cfg: TrainConfig, metas: list[DatasetMeta], names: list[str], is_main: bool):
    """(the policy config with the features every dataset shares, the renames)."""
    with dataset_errors_as_config_errors(cfg.dataset):
        renames = parse_renames(cfg.dataset.rename_features)
        features, dropped = common_features([renamed_view(meta, renames) for meta in metas], names)
    asked = [key for key in cfg.dataset.input_features or [] if key in dropped]
    if asked:
        lacking = {key: [n for m, n in zip(metas, names, strict=True) if key not in m.features] for key in asked}
        raise TrainConfigError(f"--dataset.input_features asks for features some datasets lack: {lacking}")
    policy_cfg = configure_policy_features(cfg.policy, features, cfg.dataset.input_features)
    with dataset_errors_as_config_errors(cfg.dataset):
        for meta in metas:
            policy_cfg.check_window_fits(meta.episodes["length"].tolist())  # names the flags, not delta_timestamps
    if is_main and dropped:
        print(f"hfpolicy train: features not in every dataset are left out: {dropped}")
    return policy_cfg, renames


def member_deltas(meta: DatasetMeta, renames: dict[str, str], policy_cfg: PolicyConfig) -> dict[str, list[float]]:
    """The policy's windows under one dataset's own feature names (the mixture's names renamed back)."""
    source = {new: old for old, new in renames.items() if old in meta.features}
    return {source.get(key, key): offsets for key, offsets in policy_cfg.delta_timestamps(meta.fps).items()}


def configure_policy_features(
    policy_cfg: PolicyConfig, dataset_features: dict[str, Any], input_keys: list[str] | None
) -> PolicyConfig:
    """The policy config with its features taken from the dataset (unless set), checked against it."""
    inputs, outputs = dataset_to_policy_features(dataset_features)
    if input_keys is not None:
        missing = [key for key in input_keys if key not in inputs]
        if missing:
            raise TrainConfigError(
                f"--dataset.input_features asks for {missing}, which the dataset does not have as policy inputs; "
                f"it has {sorted(inputs)}"
            )
        inputs = {key: inputs[key] for key in input_keys}
    if policy_cfg.reward_delta_indices is not None and REWARD not in dataset_features:
        raise TrainConfigError(
            f"the {policy_cfg.type} policy trains on rewards, but the dataset has no {REWARD!r} feature; train on a "
            "recording with rewards: `hfpolicy record` (scripted PushT; --environment_state=true adds the keypoints), "
            "`hfpolicy convert` (the PushT zarr) or `hfpolicy eval --dataset_dir=DIR` (rollouts) write it"
        )
    chosen_inputs = policy_cfg.input_features or inputs
    chosen_outputs = policy_cfg.output_features or outputs
    for key, feature in {**chosen_inputs, **chosen_outputs}.items():
        offered = inputs.get(key) or outputs.get(key)
        if offered is None:
            raise TrainConfigError(
                f"the policy needs feature {key!r}, which the dataset does not have; its features: "
                f"{sorted(dataset_features)}"
            )
        if tuple(offered.shape) != tuple(feature.shape):
            raise TrainConfigError(
                f"the policy expects {key!r} of shape {tuple(feature.shape)}, the dataset has {offered.shape}"
            )
    try:
        configured = dataclasses.replace(
            policy_cfg, input_features=dict(chosen_inputs), output_features=dict(chosen_outputs)
        )
        configured.validate_features()
    except ValueError as e:
        problem = error_in_flags(e, type(policy_cfg), "policy.")
        raise TrainConfigError(f"the {policy_cfg.type} policy cannot be built from this dataset: {problem}") from e
    return configured


def streaming_problems(cfg: TrainConfig) -> list[str]:
    """What in the flags cannot stream, in the flags' words."""
    dataset, problems = cfg.dataset, []
    if dataset.root is not None or dataset.scripted_episodes > 0:
        problems.append(
            "--dataset.streaming=true reads a Hub dataset (--dataset.repo_id): leave out --dataset.root and "
            "--dataset.scripted_episodes, or set --dataset.streaming=false to read a local one"
        )
    for name in ("shuffle_buffer_episodes", "shuffle_buffer_shards", "stream_retries"):
        if getattr(dataset, name) < 1:
            problems.append(f"--dataset.{name} must be >= 1, got {getattr(dataset, name)}")
    shards, buffer, workers = dataset.shuffle_buffer_shards, dataset.shuffle_buffer_episodes, cfg.num_workers
    if shards > buffer >= 1:
        problems.append(
            f"--dataset.shuffle_buffer_shards={shards} is more than --dataset.shuffle_buffer_episodes={buffer}: each "
            "shard needs an open episode; lower the shards or raise the buffer"
        )
    elif workers > 1 and shards >= 1 and buffer >= 1 and shards % workers:
        problems.append(
            f"--num_workers={workers} with --dataset.shuffle_buffer_shards={shards}: the workers would decode the "
            f"same episodes; set --dataset.shuffle_buffer_shards to a multiple of {workers} (each worker then reads "
            "only its own shards' episodes), or use --num_workers=0"
        )
    if dataset.stream_video not in STREAM_VIDEO_CHOICES:
        problems.append(
            f"--dataset.stream_video must be one of {', '.join(STREAM_VIDEO_CHOICES)}, got {dataset.stream_video!r}"
        )
    for name in ("stream_ram_gb", "stream_disk_gb"):
        if not getattr(dataset, name) > 0:
            problems.append(f"--dataset.{name} must be > 0, got {getattr(dataset, name)}")
    return problems


def make_dataloader(dataset, batch_sampler: EpochBatchSampler, cfg: TrainConfig, accelerator: Accelerator):
    """The run's DataLoader: whole batches in the batch sampler's order, frames uint8 (float on the device)."""
    dataset.uint8_images = True
    return torch.utils.data.DataLoader(
        dataset,
        sampler=batch_sampler,
        batch_size=None,  # the dataset fetches whole batches (one index list per item)
        # torch types collate_fn for lists of items; with batch_size=None it gets each (whole-batch) item
        collate_fn=cast(Callable[[list[Any]], Any], identity_collate),
        num_workers=cfg.num_workers,
        pin_memory=accelerator.device.type == "cuda",
        persistent_workers=cfg.num_workers > 0,
        worker_init_fn=ignore_sigterm,
        generator=torch.Generator(),  # its own: starting an epoch must not draw from the global RNG (exact resume)
    )
