"""The frame cache: filled one episode at a time, in RAM or in a memory-mapped file, shared with copies."""

import gc
import pickle

import torch

from hfpolicy.datasets import PolicyDataset
from hfpolicy.datasets.frame_cache import frame_cache_dir


def test_a_cold_item_decodes_only_its_episode(tiny_dataset):
    ds = PolicyDataset(tiny_dataset.repo_id, root=tiny_dataset.root, delta_timestamps={"observation.image": [-0.1, 0]})
    cache = ds._caches["observation.image"]
    assert cache.filled_episodes == 0
    ds[14]  # episode 1
    assert cache.filled_episodes == 1 and cache.is_filled(1)
    ds[16]
    assert cache.filled_episodes == 1  # warm: no more decoding
    ds.prefetch_frames(progress=False)
    assert cache.filled_episodes == 3


def test_disk_cache_past_the_ram_cap_is_shared_and_removed(tiny_dataset, hf_cache):
    ram = PolicyDataset(tiny_dataset.repo_id, root=tiny_dataset.root)
    disk = PolicyDataset(tiny_dataset.repo_id, root=tiny_dataset.root, frame_cache_max_ram_gb=0.0)
    assert (ram.frame_cache_storage, disk.frame_cache_storage) == ("ram", "disk")
    files = list(frame_cache_dir().iterdir())
    assert len(files) == 1 and frame_cache_dir().is_relative_to(hf_cache)
    assert torch.equal(disk.get_batch(range(37))["observation.image"], ram.get_batch(range(37))["observation.image"])

    # A copy made by pickling (a DataLoader worker started with spawn) reopens the same file: what it decodes,
    # the original sees. A RAM cache cannot be shared that way: the copy starts empty.
    fresh = PolicyDataset(tiny_dataset.repo_id, root=tiny_dataset.root, frame_cache_max_ram_gb=0.0)
    copy = pickle.loads(pickle.dumps(fresh))
    copy[20]
    assert fresh._caches["observation.image"].is_filled(2)
    assert torch.equal(fresh._caches["observation.image"].frames[17:37], ram._caches["observation.image"].frames[17:37])
    ram_copy = pickle.loads(pickle.dumps(ram))
    assert ram_copy._caches["observation.image"].filled_episodes == 0
    assert torch.equal(ram_copy[3]["observation.image"], ram[3]["observation.image"])

    del disk, fresh, copy
    gc.collect()
    assert list(frame_cache_dir().iterdir()) == []  # the cache files go with their datasets
