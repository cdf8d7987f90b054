"""The flags of `hfpolicy push`, apart from hfpolicy.hub.push so that `--help` imports nothing heavy."""

from dataclasses import dataclass


@dataclass
class PushConfig:
    """`hfpolicy push`: upload a training run's policy, evaluation, curve and card, or a dataset folder, to the Hub."""

    run: str | None = None  # the run folder (the --output_dir of `hfpolicy train`)
    dataset: str | None = None  # or a LeRobot dataset folder (v3.0 or v2.1: it holds meta/info.json), with --repo_id
    repo_id: str | None = None  # the Hub repo (default for a run: its --hub.repo_id)
    private: bool | None = None  # create the repo as private (default: the run's --hub.private)
    branch: str | None = None  # push to this branch (default: the run's --hub.branch, else main)
    online_data_repo_id: str | None = None  # also publish the run's online_data/ as this Hub dataset repo
