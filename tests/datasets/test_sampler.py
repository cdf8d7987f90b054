"""The episode-aware sampler and the episode-level train/val split."""

import numpy as np
import pytest

from hfpolicy.datasets import EpisodeAwareSampler, PolicyDataset, split_episodes


def test_sampler_drops_exactly_the_last_frames_of_each_episode(tiny_dataset):
    ds = PolicyDataset(tiny_dataset.repo_id, root=tiny_dataset.root)  # episodes of 12, 5, 20 frames
    sampler = EpisodeAwareSampler(ds, drop_last_frames=3)
    expected = [*range(0, 9), *range(12, 14), *range(17, 34)]
    assert sorted(sampler) == expected and len(sampler) == len(expected) and list(sampler) != expected
    frame_index = ds.get_batch(list(sampler))["frame_index"].numpy()
    episode = ds.get_batch(list(sampler))["episode_index"].numpy()
    lengths = np.array([12, 5, 20])
    assert (frame_index < lengths[episode] - 3).all()  # nothing from the last 3 frames of any episode
    assert len(EpisodeAwareSampler(ds)) == 37
    with pytest.raises(ValueError, match="episodes are too short"):
        EpisodeAwareSampler([(0, 3), (3, 5)], drop_last_frames=3)


def test_sampler_shuffles_deterministically_per_epoch_and_shards():
    bounds = [(0, 50), (50, 80)]
    a, b = EpisodeAwareSampler(bounds, seed=7), EpisodeAwareSampler(bounds, seed=7)
    first = list(a)
    assert first == list(b) and sorted(first) == list(range(80)) and first != list(range(80))
    assert list(a) == first  # the same epoch gives the same order
    a.set_epoch(1)
    assert list(a) != first and sorted(a) == list(range(80))
    b.set_epoch(1)
    assert list(a) == list(b)
    assert list(EpisodeAwareSampler(bounds, seed=8)) != first

    shards = [EpisodeAwareSampler(bounds, drop_last_frames=1, seed=7, num_replicas=3, rank=r) for r in range(3)]
    parts = [list(s) for s in shards]
    assert [len(p) for p in parts] == [len(s) for s in shards] == [26, 26, 26]
    assert set().union(*parts) == set(range(49)) | set(range(50, 79))  # 78 frames, no padding needed


def test_split_is_episode_level_disjoint_and_reproducible():
    train, val = split_episodes(206, val_fraction=0.1, seed=0)
    assert len(val) == 21 and len(train) == 185
    assert set(train).isdisjoint(val) and sorted(train + val) == list(range(206))
    assert (train, val) == split_episodes(206, val_fraction=0.1, seed=0)
    assert val != split_episodes(206, val_fraction=0.1, seed=1)[1]
    assert split_episodes([3, 5, 9, 11], 0.25, seed=0)[1][0] in {3, 5, 9, 11}
    assert split_episodes(5, 0.0) == ([0, 1, 2, 3, 4], [])
    assert len(split_episodes(3, 0.01)[1]) == 1  # a validation split is never empty when asked for
    with pytest.raises(ValueError, match="val_fraction"):
        split_episodes(10, 1.0)


def test_split_datasets_share_no_frame(tiny_dataset):
    train, val = split_episodes(3, val_fraction=0.34, seed=0)
    train_ds = PolicyDataset(tiny_dataset.repo_id, root=tiny_dataset.root, episodes=train)
    val_ds = PolicyDataset(tiny_dataset.repo_id, root=tiny_dataset.root, episodes=val)
    train_index = set(train_ds.get_batch(range(len(train_ds)))["index"].tolist())
    val_index = set(val_ds.get_batch(range(len(val_ds)))["index"].tolist())
    assert train_index.isdisjoint(val_index) and len(train_index | val_index) == 37
    assert set(train_ds.get_batch(range(len(train_ds)))["episode_index"].tolist()) == set(train)
