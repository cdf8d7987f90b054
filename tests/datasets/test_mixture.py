"""Several datasets in one run: the union's items, each dataset sampled at its weight, pooled stats, features."""

from pathlib import Path

import numpy as np
import pytest
import torch
from dataset_helpers import write_tiny_dataset

from hfpolicy.datasets import DatasetFormatError, DatasetWriter, PolicyDataset
from hfpolicy.datasets.mixture import DATASET_INDEX, MixtureDataset
from hfpolicy.datasets.sampler import EpisodeAwareSampler
from hfpolicy.datasets.stats import array_stats
from hfpolicy.training.config import parse_dataset_list

FEATURES = {
    "observation.state": {"dtype": "float32", "shape": [2], "names": None},
    "action": {"dtype": "float32", "shape": [2], "names": None},
}


def write_state_dataset(root: Path, lengths: list[int], loc: float, scale: float, seed: int, extra: bool = False):
    """A state-only dataset whose values come from N(loc, scale): returns (root, every state in order)."""
    rng = np.random.default_rng(seed)
    features = dict(FEATURES)
    if extra:
        features["observation.velocity"] = {"dtype": "float32", "shape": [1], "names": None}
    states = []
    with DatasetWriter.create(root, root.name, 10, features) as writer:
        for n in lengths:
            for _ in range(n):
                frame = {
                    "observation.state": (loc + scale * rng.normal(size=2)).astype(np.float32),
                    "action": rng.normal(size=2).astype(np.float32),
                }
                if extra:
                    frame["observation.velocity"] = np.zeros(1, dtype=np.float32)
                writer.add_frame(frame, task="t")
                states.append(frame["observation.state"])
            writer.save_episode()
    return root, np.stack(states)


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    base = tmp_path_factory.mktemp("mix")
    a = write_state_dataset(base / "a", [20, 30, 10], loc=0.0, scale=1.0, seed=1)
    b = write_state_dataset(base / "b", [50, 70, 80, 40], loc=5.0, scale=3.0, seed=2, extra=True)
    return a, b


def open_mixture(two, deltas=None) -> MixtureDataset:
    (a, _), (b, _) = two
    parts = [PolicyDataset(root.name, root=root, delta_timestamps=deltas) for root in (a, b)]
    return MixtureDataset(parts)


def test_stats_are_pooled_exactly_from_counts(two):
    mixture = open_mixture(two)
    union = np.concatenate([two[0][1], two[1][1]])
    want = array_stats(union)
    got = {name: value.numpy() for name, value in mixture.stats["observation.state"].items()}
    for name in ("mean", "std", "min", "max"):
        assert np.allclose(got[name], want[name], rtol=1e-6, atol=1e-6), name
    assert int(got["count"][0]) == len(union) == 300
    averaged_std = (two[0][1].std(0) + two[1][1].std(0)) / 2  # what a careless mixture would store
    assert not np.allclose(got["std"], averaged_std, atol=0.1)


def test_items_are_each_datasets_own(two):
    deltas = {"action": [-0.1, 0.0, 0.1], "observation.state": [-0.1, 0.0]}
    mixture = open_mixture(two, deltas)
    assert mixture.num_frames == 300 and mixture.num_episodes == 7
    assert mixture.dropped_features == ["observation.velocity"]
    positions = np.random.default_rng(0).permutation(300)[:64]
    batch = mixture[positions]
    assert "observation.velocity" not in batch
    for row, position in enumerate(positions.tolist()):
        d = int(position >= 60)
        own = mixture.datasets[d].get_batch([position - 60 * d])
        assert batch[DATASET_INDEX][row] == d
        for key in ("action", "action_is_pad", "observation.state", "observation.state_is_pad", "index"):
            assert torch.equal(batch[key][row], own[key][0]), key


def test_each_dataset_is_sampled_at_its_weight(two):
    mixture = open_mixture(two)
    sampler = EpisodeAwareSampler(mixture, weights=[0.8, 0.2], drop_last_frames=2, seed=3, num_samples=5000)
    order = np.array(list(sampler))
    share_a = float(np.mean(order < 60))
    assert abs(share_a - 0.8) < 4 * np.sqrt(0.8 * 0.2 / 5000), share_a  # 4 sigma of the binomial
    # within a dataset every eligible frame is drawn before any repeats (cycles of permutations)
    eligible_a = {p for s, e in mixture.datasets[0].episode_bounds for p in range(s, e - 2)}
    first = order[order < 60][: len(eligible_a)]
    assert set(first.tolist()) == eligible_a
    # the default weights are the datasets' shares of the frames: the plain union
    default = np.array(list(EpisodeAwareSampler(mixture, seed=4, num_samples=6000)))
    assert abs(float(np.mean(default < 60)) - 0.2) < 4 * np.sqrt(0.2 * 0.8 / 6000)
    # a pure function of (seed, epoch), and shards that together give the epoch
    again = EpisodeAwareSampler(mixture, weights=[0.8, 0.2], drop_last_frames=2, seed=3, num_samples=5000)
    assert np.array_equal(order, list(again))
    again.set_epoch(1)
    assert not np.array_equal(order, list(again))
    shards = [
        list(EpisodeAwareSampler(mixture, weights=[1, 1], seed=5, num_samples=100, num_replicas=2, rank=r))
        for r in (0, 1)
    ]
    whole = list(EpisodeAwareSampler(mixture, weights=[1, 1], seed=5, num_samples=100))
    assert sorted(shards[0] + shards[1]) == sorted(whole)


def test_bad_weights_and_conflicting_features_are_named(two, tmp_path):
    mixture = open_mixture(two)
    with pytest.raises(ValueError, match="2 non-negative numbers"):
        EpisodeAwareSampler(mixture, weights=[1.0])
    with pytest.raises(ValueError, match="2 non-negative numbers"):
        EpisodeAwareSampler(mixture, weights=[-1.0, 2.0])
    other = tmp_path / "wide"
    with DatasetWriter.create(other, "wide", 10, {**FEATURES, "action": {"dtype": "float32", "shape": [3]}}) as w:
        for _ in range(5):
            w.add_frame({"observation.state": np.zeros(2, np.float32), "action": np.zeros(3, np.float32)}, task="t")
        w.save_episode()
    with pytest.raises(DatasetFormatError, match=r"'action': a has float32 \[2\], wide has float32 \[3\]"):
        MixtureDataset([mixture.datasets[0], PolicyDataset("wide", root=other)])


def test_a_video_dataset_and_the_list_syntax(tmp_path):
    a = write_tiny_dataset(tmp_path / "va", [6, 8], seed=0)
    b = write_tiny_dataset(tmp_path / "vb", [9], seed=1)
    parts = [PolicyDataset(d.repo_id, root=d.root, delta_timestamps={"observation.image": [-0.1, 0.0]}) for d in (a, b)]
    mixture = MixtureDataset(parts, names=["va", "vb"])
    batch = mixture[[0, 13, 14, 22]]
    assert batch["observation.image"].shape == (4, 2, 3, 32, 32)
    assert torch.equal(batch["observation.image"][2], parts[1].get_batch([0])["observation.image"][0])
    assert batch[DATASET_INDEX].tolist() == [0, 0, 1, 1]
    assert parse_dataset_list("[user/a, user/b]") == ["user/a", "user/b"]
    assert parse_dataset_list("user/a") == ["user/a"] and parse_dataset_list(None) is None


def test_the_model_card_names_every_dataset():
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from policies.toy_policy import make_toy_policy

    from hfpolicy.hub import PolicyArtifacts, make_model_card

    artifacts = PolicyArtifacts(dataset_repo_id="[user/pusht-a,user/pusht-b]", env_type="pusht")
    card = make_model_card("user/x", make_toy_policy(), artifacts)
    assert card.data.datasets == ["user/pusht-a", "user/pusht-b"]
    assert (
        "(https://huggingface.co/datasets/user/pusht-a), [user/pusht-b](https://huggingface.co/datasets/user/pusht-b)"
        in card.text
    )
    one = make_model_card("user/y", make_toy_policy(), PolicyArtifacts(dataset_repo_id="user/pusht", env_type="pusht"))
    assert (
        one.data.datasets == ["user/pusht"]
        and "on [user/pusht](https://huggingface.co/datasets/user/pusht)" in one.text
    )


def test_a_feature_named_differently_is_mapped_by_renames(two, tmp_path):
    from hfpolicy.datasets.mixture import parse_renames

    (a, states_a), _ = two
    other = tmp_path / "c"
    rng = np.random.default_rng(9)
    features = {"observation.pos": FEATURES["observation.state"], "action": FEATURES["action"]}
    with DatasetWriter.create(other, "c", 10, features) as writer:
        for _ in range(25):
            writer.add_frame(
                {"observation.pos": rng.normal(size=2).astype(np.float32), "action": np.zeros(2, np.float32)}, task="t"
            )
        writer.save_episode()
    first = PolicyDataset("a", root=a, delta_timestamps={"observation.state": [-0.1, 0.0]})
    second = PolicyDataset("c", root=other, delta_timestamps={"observation.pos": [-0.1, 0.0]})
    plain = MixtureDataset([first, second])
    assert "observation.state" not in plain.features and "observation.pos" in plain.dropped_features
    renames = parse_renames(["observation.pos=observation.state"])
    mixture = MixtureDataset([first, second], renames=renames)
    assert "observation.state" in mixture.features and mixture.dropped_features == []
    batch = mixture[[0, 60, 61]]
    own = second.get_batch([0, 1])
    assert torch.equal(batch["observation.state"][1:], own["observation.pos"])
    assert torch.equal(batch["observation.state_is_pad"][1:], own["observation.pos_is_pad"])
    union = np.concatenate([states_a, second.get_batch(range(25))["observation.pos"][:, 1].numpy()])
    assert np.allclose(mixture.stats["observation.state"]["mean"].numpy(), union.mean(0), atol=1e-6)
    with pytest.raises(ValueError, match="OLD=NEW"):
        parse_renames(["observation.pos"])
