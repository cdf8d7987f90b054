"""The training data of a run that streams its Hub dataset (`--dataset.streaming=true`): a StreamingPolicyDataset
within `--dataset.stream_ram_gb` / `--dataset.stream_disk_gb`, in the epoch order of a ShuffleBufferSampler that
keeps `--dataset.shuffle_buffer_episodes` episodes open (a function of seed and epoch: a resume is exact)."""

import dataclasses

from accelerate import Accelerator

from hfpolicy.datasets import DatasetMeta
from hfpolicy.datasets.sampler import EpochBatchSampler
from hfpolicy.datasets.shuffle_buffer import ShuffleBufferSampler
from hfpolicy.training.config import DatasetConfig, TrainConfig, TrainConfigError


def streaming_problems(cfg: TrainConfig) -> list[str]:
    """What in the flags cannot stream, in the flags' words."""
    dataset, problems = cfg.dataset, []
    if dataset.root is not None or dataset.scripted_episodes > 0:
        problems.append(
            "--dataset.streaming=true reads a Hub dataset (--dataset.repo_id): leave out --dataset.root and "
            "--dataset.scripted_episodes, or set --dataset.streaming=false to read a local one"
        )
    if dataset.repo_id.strip().startswith("["):
        problems.append("--dataset.streaming=true streams one dataset: give one --dataset.repo_id, not a list")
    if cfg.online.every > 0:
        problems.append("--online.every does not work with --dataset.streaming=true yet: leave one of them out")
    for name in ("shuffle_buffer_episodes", "stream_retries"):
        if getattr(dataset, name) < 1:
            problems.append(f"--dataset.{name} must be >= 1, got {getattr(dataset, name)}")
    for name in ("stream_ram_gb", "stream_disk_gb"):
        if not getattr(dataset, name) > 0:
            problems.append(f"--dataset.{name} must be > 0, got {getattr(dataset, name)}")
    return problems


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


def load_streaming_data(cfg: TrainConfig, accelerator: Accelerator):
    """(the config with the policy's features filled in, the TrainingData of the streamed dataset)."""
    from hfpolicy.datasets.remote_files import StreamingError
    from hfpolicy.datasets.streaming import StreamingPolicyDataset
    from hfpolicy.training.setup import (
        TrainingData,
        configure_policy_features,
        dataset_errors_as_config_errors,
        make_dataloader,
    )

    problems = streaming_problems(cfg)
    if problems:
        raise TrainConfigError("; ".join(problems))
    dataset_cfg = cfg.dataset
    with dataset_errors_as_config_errors(dataset_cfg):
        meta = open_streaming_meta(dataset_cfg)
    policy_cfg = configure_policy_features(cfg.policy, meta.features, dataset_cfg.input_features)
    with dataset_errors_as_config_errors(dataset_cfg):
        policy_cfg.check_window_fits(meta.episodes["length"].tolist())
        try:
            dataset = StreamingPolicyDataset(
                dataset_cfg.repo_id,
                revision=meta.root.name,  # the commit meta/ was read at
                episodes=dataset_cfg.episodes,
                delta_timestamps=policy_cfg.delta_timestamps(meta.fps),
                stream_ram_gb=dataset_cfg.stream_ram_gb,
                stream_disk_gb=dataset_cfg.stream_disk_gb,
                stream_retries=dataset_cfg.stream_retries,
                download_videos=bool(policy_cfg.image_features),
            )
        except StreamingError as e:
            raise TrainConfigError(str(e)) from e
        dataset.check_buffer_fits(dataset_cfg.shuffle_buffer_episodes, cfg.num_workers)
        sampler = ShuffleBufferSampler(
            dataset,
            buffer_episodes=dataset_cfg.shuffle_buffer_episodes,
            drop_last_frames=policy_cfg.drop_n_last_frames,
            seed=cfg.seed,
            num_replicas=accelerator.num_processes,
            rank=accelerator.process_index,
        )  # each process reads its own shard of one shared (seed, epoch) order
        batch_sampler = EpochBatchSampler(sampler, cfg.batch_size)  # a resumed run starts mid-epoch
    dataloader = make_dataloader(dataset, batch_sampler, cfg, accelerator)
    data = TrainingData(dataset_cfg.repo_id, dataset, sampler, batch_sampler, dataloader)
    return dataclasses.replace(cfg, policy=policy_cfg), data
