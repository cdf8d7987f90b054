"""delta_timestamps windows: values at offsets, the edge frame repeated outside an episode, exact is_pad flags."""

import numpy as np
import torch
from dataset_helpers import FPS

from hfpolicy.datasets import EpisodeAwareSampler, PolicyDataset

OBS_DELTAS = [-0.2, -0.1, 0.0]
ACTION_DELTAS = [0.0, 0.1, 0.2, 0.3]


def _reference_window(episode_frames: list[int], position: int, offsets: list[int]) -> tuple[list[int], list[bool]]:
    """Frames (dataset positions) and pad flags of a window, by explicit search: the slow, obvious way."""
    rows, pads = [], []
    for offset in offsets:
        target = position + offset
        if target in episode_frames:
            rows.append(target)
            pads.append(False)
        else:
            rows.append(episode_frames[0] if target < episode_frames[0] else episode_frames[-1])
            pads.append(True)
    return rows, pads


def test_windows_pad_both_episode_edges(tiny_dataset):
    deltas = {"observation.image": OBS_DELTAS, "observation.state": OBS_DELTAS, "action": ACTION_DELTAS}
    ds = PolicyDataset(tiny_dataset.repo_id, root=tiny_dataset.root, delta_timestamps=deltas)
    assert ds.delta_indices == {
        "observation.image": [-2, -1, 0],
        "observation.state": [-2, -1, 0],
        "action": [0, 1, 2, 3],
    }
    states, actions = np.stack(tiny_dataset.states), np.stack(tiny_dataset.actions)
    plain = PolicyDataset(tiny_dataset.repo_id, root=tiny_dataset.root).get_batch(range(37))["observation.image"]
    episode_of = np.array(tiny_dataset.episode_of_frame)
    for position in range(len(ds)):
        item = ds[position]
        frames = np.flatnonzero(episode_of == episode_of[position]).tolist()
        obs_rows, obs_pad = _reference_window(frames, position, [-2, -1, 0])
        act_rows, act_pad = _reference_window(frames, position, [0, 1, 2, 3])
        assert item["observation.state_is_pad"].tolist() == obs_pad
        assert item["observation.image_is_pad"].tolist() == obs_pad
        assert item["action_is_pad"].tolist() == act_pad
        assert torch.equal(item["observation.state"], torch.from_numpy(states[obs_rows]))
        assert torch.equal(item["action"], torch.from_numpy(actions[act_rows]))
        assert torch.equal(item["observation.image"], plain[obs_rows])
        assert item["observation.image"].shape == (3, 3, 32, 32)
        assert item["next.reward"].shape == ()  # keys without a window: the frame itself

    # The edges spelled out: episode 1 holds positions 12..16.
    first, last = ds[12], ds[16]
    assert first["observation.state_is_pad"].tolist() == [True, True, False]
    assert torch.equal(first["observation.state"], torch.from_numpy(states[[12, 12, 12]]))
    assert last["action_is_pad"].tolist() == [False, True, True, True]
    assert torch.equal(last["action"], torch.from_numpy(actions[[16, 16, 16, 16]]))
    assert ds[13]["observation.state_is_pad"].tolist() == [True, False, False]
    assert ds[14]["action_is_pad"].tolist() == [False, False, False, True]


def test_window_keys_can_be_any_numeric_feature_and_negative_only(tiny_dataset):
    ds = PolicyDataset(
        tiny_dataset.repo_id, root=tiny_dataset.root, delta_timestamps={"next.reward": [-1.0, -0.5], "index": [0.1]}
    )
    item = ds[17]  # first frame of episode 2
    assert item["next.reward_is_pad"].tolist() == [True, True]
    assert item["next.reward"].tolist() == [tiny_dataset.rewards[17]] * 2
    assert item["index"].tolist() == [18] and item["index_is_pad"].tolist() == [False]
    assert ds[36]["index_is_pad"].tolist() == [True]


def test_databatch_for_loaderes_with_workers_and_sampler(tiny_dataset):
    deltas = {"observation.image": [-0.1, 0.0], "action": [t / FPS for t in range(4)]}
    ds = PolicyDataset(tiny_dataset.repo_id, root=tiny_dataset.root, delta_timestamps=deltas)
    sampler = EpisodeAwareSampler(ds, drop_last_frames=2, seed=3)
    expected = {i: ds[i] for i in list(sampler)}  # decodes every episode in this process
    fresh = PolicyDataset(tiny_dataset.repo_id, root=tiny_dataset.root, delta_timestamps=deltas)
    loader = torch.utils.data.DataLoader(fresh, batch_size=8, sampler=sampler, num_workers=2)
    seen = 0
    for batch in loader:
        assert batch["observation.image"].shape[1:] == (2, 3, 32, 32)
        assert batch["action"].shape[1:] == (4, 2) and batch["action_is_pad"].dtype == torch.bool
        for b, index in enumerate(batch["index"].tolist()):
            assert torch.equal(batch["action"][b], expected[index]["action"])
            assert torch.equal(batch["action_is_pad"][b], expected[index]["action_is_pad"])
            assert torch.equal(batch["observation.image"][b], expected[index]["observation.image"])
            assert batch["task"][b] == expected[index]["task"]
        seen += len(batch["index"])
    assert seen == len(sampler) == 37 - 3 * 2
    # The workers decoded into the cache they share with this process (anonymous shared memory).
    assert fresh._caches["observation.image"].filled_episodes == 3


def test_batched_fetch_equals_the_items_and_applies_transforms_per_sample(tiny_dataset):
    deltas = {"observation.image": [-0.1, 0.0], "observation.state": [-0.1, 0.0], "action": [0.0, 0.1, 0.2]}
    plain = PolicyDataset(tiny_dataset.repo_id, root=tiny_dataset.root, delta_timestamps=deltas)
    flipped = PolicyDataset(
        tiny_dataset.repo_id, root=tiny_dataset.root, delta_timestamps=deltas, image_transforms=lambda x: x.flip(-1)
    )
    sampler = EpisodeAwareSampler(flipped, seed=1)
    batches = torch.utils.data.BatchSampler(sampler, batch_size=8, drop_last=False)
    loader = torch.utils.data.DataLoader(flipped, sampler=batches, batch_size=None)  # whole batches per fetch
    seen = 0
    for batch in loader:
        assert batch["observation.image"].shape[1:] == (2, 3, 32, 32)
        for b, index in enumerate(batch["index"].tolist()):
            item = plain[index]
            assert torch.equal(batch["observation.image"][b], item["observation.image"].flip(-1))
            for key in ("action", "action_is_pad", "observation.state", "observation.state_is_pad", "next.reward"):
                assert torch.equal(batch[key][b], item[key]), key
            assert batch["task"][b] == item["task"]
        seen += len(batch["index"])
    assert seen == 37
    assert torch.equal(flipped[5]["observation.image"], plain[5]["observation.image"].flip(-1))
