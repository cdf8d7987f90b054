"""LeRobot v3.0 datasets: read them (`PolicyDataset`, or streamed from the Hub: `StreamingPolicyDataset`; several
as one: `MixtureDataset`, in the order of `EpisodeAwareSampler`), write them (`DatasetWriter`), share them (`push_dataset_to_hub`), and convert the diffusion_policy PushT zarr
(`convert_pusht_zarr`)."""

from hfpolicy.datasets.dataset import PolicyDataset
from hfpolicy.datasets.features import dataset_to_policy_features
from hfpolicy.datasets.format import (
    CODEBASE_VERSION,
    DatasetFormatError,
    TimestampError,
    UnsupportedVersionError,
)
from hfpolicy.datasets.hub import download_dataset, make_dataset_card, push_dataset_to_hub
from hfpolicy.datasets.metadata import DatasetMeta
from hfpolicy.datasets.mixture import MixtureDataset
from hfpolicy.datasets.remote_files import StreamingError
from hfpolicy.datasets.sampler import EpisodeAwareSampler, EpochBatchSampler, split_episodes
from hfpolicy.datasets.streaming import StreamingPolicyDataset
from hfpolicy.datasets.writer import DatasetWriter

__all__ = [
    "CODEBASE_VERSION",
    "DatasetFormatError",
    "DatasetMeta",
    "DatasetWriter",
    "EpisodeAwareSampler",
    "EpochBatchSampler",
    "MixtureDataset",
    "PolicyDataset",
    "StreamingError",
    "StreamingPolicyDataset",
    "TimestampError",
    "UnsupportedVersionError",
    "convert_pusht_zarr",
    "dataset_to_policy_features",
    "download_dataset",
    "make_dataset_card",
    "push_dataset_to_hub",
    "split_episodes",
]


def __getattr__(name: str):
    if name == "convert_pusht_zarr":
        from hfpolicy.datasets.pusht_zarr import convert_pusht_zarr  # lazy: gym-pusht (pygame, pymunk, shapely)

        return convert_pusht_zarr
    raise AttributeError(f"module 'hfpolicy.datasets' has no attribute {name!r}")
