"""The training data of a run that streams its Hub dataset (`--dataset.streaming=true`): a StreamingPolicyDataset
within `--dataset.stream_ram_gb` / `--dataset.stream_disk_gb`, in the epoch order of a ShuffleBufferSampler that
keeps `--dataset.shuffle_buffer_episodes` episodes open, split into `--dataset.shuffle_buffer_shards` groups that the
DataLoader workers read apart (a function of seed, epoch and shards, not of --num_workers: a resume is exact). With
`--dataset.repo_id='[a,b]'` a streamed mixture: a StreamingMixtureDataset of them, the budgets split among them, in
the order of a MixtureShuffleSampler (one shuffle buffer per dataset, each sample from one at --dataset.weights)."""

import dataclasses

from accelerate import Accelerator

from hfpolicy.datasets import DatasetMeta
from hfpolicy.datasets.sampler import EpochBatchSampler
from hfpolicy.datasets.shuffle_buffer import ShuffleBufferSampler
from hfpolicy.datasets.streaming import GB, STREAM_VIDEO_CHOICES
from hfpolicy.datasets.streaming_mixture import MixtureShuffleSampler, StreamingMixtureDataset
from hfpolicy.training.config import DatasetConfig, TrainConfig, TrainConfigError


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
    if dataset.stream_read_ahead is not None and dataset.stream_read_ahead < 0:
        problems.append(f"--dataset.stream_read_ahead must be >= 0 (0: no read-ahead), got {dataset.stream_read_ahead}")
    problems += shard_problems(dataset.shuffle_buffer_episodes, dataset.shuffle_buffer_shards, cfg.num_workers)
    if dataset.stream_video not in STREAM_VIDEO_CHOICES:
        problems.append(
            f"--dataset.stream_video must be one of {', '.join(STREAM_VIDEO_CHOICES)}, got {dataset.stream_video!r}"
        )
    for name in ("stream_ram_gb", "stream_disk_gb"):
        if not getattr(dataset, name) > 0:
            problems.append(f"--dataset.{name} must be > 0, got {getattr(dataset, name)}")
    return problems


def shard_problems(buffer_episodes: int, shards: int, num_workers: int) -> list[str]:
    """Shards that cannot be filled, or that leave DataLoader workers decoding the same episodes."""
    if shards < 1 or buffer_episodes < 1:
        return []  # said above
    if shards > buffer_episodes:
        return [
            f"--dataset.shuffle_buffer_shards={shards} is more than --dataset.shuffle_buffer_episodes="
            f"{buffer_episodes}: each shard needs an open episode; lower the shards or raise the buffer"
        ]
    if num_workers > 1 and shards % num_workers:
        return [
            f"--num_workers={num_workers} with --dataset.shuffle_buffer_shards={shards}: the workers would decode the "
            f"same episodes; set --dataset.shuffle_buffer_shards to a multiple of {num_workers} (each worker then "
            "reads only its own shards' episodes), or use --num_workers=0"
        ]
    return []


STREAM_READ_AHEAD_GPU = 16  # batches; why: docs/streaming.md#streaming-measured


def read_ahead(dataset: DatasetConfig, accelerator: Accelerator) -> int:
    """--dataset.stream_read_ahead, or its default: on while the main thread waits on a GPU, off on a CPU."""
    if dataset.stream_read_ahead is not None:
        return dataset.stream_read_ahead
    return 0 if accelerator.device.type == "cpu" else STREAM_READ_AHEAD_GPU


def uses_decode_process(cfg: TrainConfig, accelerator: Accelerator) -> bool:
    """Whether the streamed readers decode ahead in a decoding process of their own: with read-ahead and 0 workers
    (with workers, each decodes ahead in a thread)."""
    return read_ahead(cfg.dataset, accelerator) > 0 and cfg.num_workers == 0


def open_streaming_meta(dataset: DatasetConfig) -> DatasetMeta:
    """meta/ of the Hub dataset (downloaded now: it is small); TrainConfigError naming the flag when it cannot be."""
    from hfpolicy.datasets.hub import download_meta

    try:
        meta_root = download_meta(dataset.repo_id, revision=dataset.revision)
    except OSError as e:  # huggingface_hub's errors, DatasetDownloadError
        raise TrainConfigError(
            f"could not read meta/ of the dataset {dataset.repo_id!r} from the Hub ({type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}); check --dataset.repo_id, --dataset.revision and the network"
        ) from e
    return DatasetMeta.load(meta_root, dataset.repo_id)


def open_streamed(
    dataset_cfg: DatasetConfig, name: str, meta: DatasetMeta, deltas: dict, policy_cfg, decode_process: bool
):
    """The StreamingPolicyDataset of one Hub dataset at the commit its `meta` was read at, within the flags'
    budgets (a mixture then splits them), with its decoding process when `decode_process` (uses_decode_process);
    TrainConfigError naming the file when one cannot be fetched."""
    from hfpolicy.datasets.remote_files import StreamingError
    from hfpolicy.datasets.streaming import StreamingPolicyDataset

    try:
        return StreamingPolicyDataset(
            name,
            revision=meta.root.name,  # the commit meta/ was read at
            episodes=dataset_cfg.episodes,
            delta_timestamps=deltas,
            stream_ram_gb=dataset_cfg.stream_ram_gb,
            stream_disk_gb=dataset_cfg.stream_disk_gb,
            stream_retries=dataset_cfg.stream_retries,
            download_videos=bool(policy_cfg.image_features),
            stream_video=dataset_cfg.stream_video,
            decode_process=decode_process,
        )
    except StreamingError as e:
        raise TrainConfigError(str(e)) from e


def order_options(cfg: TrainConfig, policy_cfg, accelerator: Accelerator) -> dict:
    """The streamed epoch order's options besides its buffer: what it drops, its seed, this process's part of it,
    and the shards its workers read apart."""
    return {
        "drop_last_frames": policy_cfg.drop_n_last_frames,
        "seed": cfg.seed,
        "num_replicas": accelerator.num_processes,
        "rank": accelerator.process_index,
        "shards": cfg.dataset.shuffle_buffer_shards,
        "batch_size": cfg.batch_size,
    }


def load_streaming_data(cfg: TrainConfig, accelerator: Accelerator):
    """(the config with the policy's features filled in, the TrainingData of the streamed dataset, or of the
    streamed mixture when --dataset.repo_id lists several)."""
    from hfpolicy.training.mixture_data import mixture_members
    from hfpolicy.training.setup import (
        TrainingData,
        configure_policy_features,
        dataset_errors_as_config_errors,
        make_dataloader,
    )

    problems = streaming_problems(cfg)
    if problems:
        raise TrainConfigError("; ".join(problems))
    members = mixture_members(cfg.dataset)
    if members is not None:
        return load_streaming_mixture(cfg, accelerator, members)
    dataset_cfg = cfg.dataset
    with dataset_errors_as_config_errors(dataset_cfg):
        meta = open_streaming_meta(dataset_cfg)
    policy_cfg = configure_policy_features(cfg.policy, meta.features, dataset_cfg.input_features)
    with dataset_errors_as_config_errors(dataset_cfg):
        policy_cfg.check_window_fits(meta.episodes["length"].tolist())
        deltas, decode_process = policy_cfg.delta_timestamps(meta.fps), uses_decode_process(cfg, accelerator)
        dataset = open_streamed(dataset_cfg, dataset_cfg.repo_id, meta, deltas, policy_cfg, decode_process)
        shards = dataset_cfg.shuffle_buffer_shards
        dataset.check_buffer_fits(dataset_cfg.shuffle_buffer_episodes, cfg.num_workers, shards)
        sampler = ShuffleBufferSampler(
            dataset, buffer_episodes=dataset_cfg.shuffle_buffer_episodes, **order_options(cfg, policy_cfg, accelerator)
        )  # each process reads its own part of one shared (seed, epoch) order, its workers their own shards
        # a resumed run starts mid-epoch; each batch names the coming ones, whose episodes are decoded ahead
        batch_sampler = EpochBatchSampler(sampler, cfg.batch_size, read_ahead=read_ahead(dataset_cfg, accelerator))
    dataloader = make_dataloader(dataset, batch_sampler, cfg, accelerator)
    data = TrainingData(dataset_cfg.repo_id, dataset, sampler, batch_sampler, dataloader)
    return dataclasses.replace(cfg, policy=policy_cfg), data


def load_streaming_mixture(cfg: TrainConfig, accelerator: Accelerator, members: list[DatasetConfig]):
    """(the config with the policy's features filled in, the TrainingData of the union of the streamed datasets):
    the features, their checks and the stats as for an in-memory mixture, one shuffle buffer per dataset, the
    memory and disk budgets split among them (streaming_mixture.py)."""
    from hfpolicy.training.mixture_data import member_deltas, mixture_policy_config
    from hfpolicy.training.setup import TrainingData, dataset_errors_as_config_errors, make_dataloader

    dataset_cfg, names = cfg.dataset, [member.repo_id for member in members]
    with dataset_errors_as_config_errors(dataset_cfg):
        metas = [open_streaming_meta(member) for member in members]
    policy_cfg, renames = mixture_policy_config(cfg, metas, names, accelerator.is_main_process)
    with dataset_errors_as_config_errors(dataset_cfg):
        parts = [
            # no decoding processes: they would be forked before split_budgets gives each dataset its share
            open_streamed(member, member.repo_id, meta, member_deltas(meta, renames, policy_cfg), policy_cfg, False)
            for member, meta in zip(members, metas, strict=True)
        ]  # one after the other: each reads its columns within the whole budgets, then holds nothing
        dataset = StreamingMixtureDataset(parts, names, renames)
        buffer, shards = dataset_cfg.shuffle_buffer_episodes, dataset_cfg.shuffle_buffer_shards
        ram, disk = round(dataset_cfg.stream_ram_gb * GB), round(dataset_cfg.stream_disk_gb * GB)
        dataset.split_budgets(ram, disk, buffer, cfg.num_workers, shards)
        sampler = MixtureShuffleSampler(
            dataset, buffer_episodes=buffer, weights=dataset_cfg.weights, **order_options(cfg, policy_cfg, accelerator)
        )
        batch_sampler = EpochBatchSampler(sampler, cfg.batch_size, read_ahead=read_ahead(dataset_cfg, accelerator))
    dataloader = make_dataloader(dataset, batch_sampler, cfg, accelerator)
    data = TrainingData(dataset.repo_id, dataset, sampler, batch_sampler, dataloader)
    return dataclasses.replace(cfg, policy=policy_cfg), data
