"""The training data of a run on several datasets (`--dataset.repo_id='[a,b]'` or `--dataset.root='[dir_a,dir_b]'`,
with `--dataset.weights='[0.7,0.3]'`): each dataset read as a PolicyDataset, their union as a MixtureDataset,
sampled by a MixtureSampler at the given weights."""

import dataclasses

from accelerate import Accelerator

from hfpolicy.datasets import DatasetMeta, PolicyDataset
from hfpolicy.datasets.mixture import (
    MixtureDataset,
    MixtureSampler,
    common_features,
    parse_renames,
    renamed_view,
)
from hfpolicy.datasets.sampler import EpochBatchSampler
from hfpolicy.training.config import DatasetConfig, TrainConfig, TrainConfigError, parse_dataset_list


def mixture_members(dataset: DatasetConfig) -> list[DatasetConfig] | None:
    """One DatasetConfig per dataset when --dataset.repo_id or --dataset.root lists several, else None."""
    repo_ids, roots = parse_dataset_list(dataset.repo_id) or [], parse_dataset_list(dataset.root) or []
    if len(repo_ids) <= 1 and len(roots) <= 1:
        if dataset.weights is not None or dataset.rename_features is not None:
            raise TrainConfigError(
                "--dataset.weights and --dataset.rename_features need several datasets: --dataset.repo_id='[a,b]' "
                "(or --dataset.root='[dir_a,dir_b]')"
            )
        return None
    if dataset.scripted_episodes > 0 or dataset.episodes is not None:
        raise TrainConfigError(
            "--dataset.scripted_episodes and --dataset.episodes pick from one dataset: leave them out when "
            "--dataset.repo_id / --dataset.root list several"
        )
    if roots and len(roots) > 1:
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


def member_deltas(meta, renames: dict[str, str], policy_cfg) -> dict[str, list[float]]:
    """The policy's windows under one dataset's own feature names (the mixture's names renamed back)."""
    source = {new: old for old, new in renames.items() if old in meta.features}
    return {source.get(key, key): offsets for key, offsets in policy_cfg.delta_timestamps(meta.fps).items()}


def open_members(roots, names, metas, renames: dict[str, str], policy_cfg) -> list[PolicyDataset]:
    """Each dataset as a PolicyDataset, its windows asked for under its own feature names."""
    return [
        PolicyDataset(
            name,
            root=root,
            delta_timestamps=member_deltas(meta, renames, policy_cfg),
            download_videos=bool(policy_cfg.image_features),
        )
        for root, name, meta in zip(roots, names, metas, strict=True)
    ]


def mixture_policy_config(cfg: TrainConfig, metas: list[DatasetMeta], names: list[str], is_main: bool):
    """(the policy config with the features every dataset shares, the renames): datasets that disagree on a
    feature or fps, a dropped feature asked for, or a window longer than an episode are refused naming them. The
    main process (`is_main`) says which features are left out, with or without --progress."""
    from hfpolicy.training.setup import configure_policy_features, dataset_errors_as_config_errors

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
            policy_cfg.check_window_fits(meta.episodes["length"].tolist())
    if is_main and dropped:
        print(f"hfpolicy train: features not in every dataset are left out: {dropped}")
    return policy_cfg, renames


def load_mixture_data(cfg: TrainConfig, accelerator: Accelerator, members: list[DatasetConfig]):
    """(the config with the policy's features filled in, the TrainingData of the union)."""
    from hfpolicy.training.setup import (
        TrainingData,
        dataset_errors_as_config_errors,
        make_dataloader,
        resolve_dataset_root,
    )

    progress = accelerator.is_main_process and cfg.progress
    with accelerator.main_process_first():
        roots = [resolve_dataset_root(member, recipe=cfg.recipe, progress=progress) for member in members]
    names = [member.repo_id if member.root is None else str(member.root) for member in members]
    with dataset_errors_as_config_errors(cfg.dataset):
        metas = [DatasetMeta.load(root, name) for root, name in zip(roots, names, strict=True)]
    policy_cfg, renames = mixture_policy_config(cfg, metas, names, accelerator.is_main_process)
    with dataset_errors_as_config_errors(cfg.dataset):
        parts = open_members(roots, names, metas, renames, policy_cfg)
        dataset = MixtureDataset(parts, names, renames)
        sampler = MixtureSampler(
            dataset,
            weights=cfg.dataset.weights,
            drop_last_frames=policy_cfg.drop_n_last_frames,
            seed=cfg.seed,
            num_replicas=accelerator.num_processes,
            rank=accelerator.process_index,
        )
        batch_sampler = EpochBatchSampler(sampler, cfg.batch_size)
    dataset.prefetch_frames(progress=progress)
    dataloader = make_dataloader(dataset, batch_sampler, cfg, accelerator)
    data = TrainingData(dataset.repo_id, dataset, sampler, batch_sampler, dataloader)
    return dataclasses.replace(cfg, policy=policy_cfg), data
