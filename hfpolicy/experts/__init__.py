"""Scripted experts: demonstrators that plan from the simulator's privileged state (object poses, contacts, the
physics itself), so they are not policies a robot could run; `hfpolicy record` plays them to make datasets."""

from hfpolicy.experts.episodes import ExpertEpisode, run_episode
from hfpolicy.experts.pusht_expert import (
    NotPushTEnvError,
    PushTEpisode,
    PushTExpert,
    PushTExpertConfig,
    run_expert_episode,
    target_motion_stats,
)

__all__ = [
    "ExpertEpisode",
    "NotPushTEnvError",
    "PushTEpisode",
    "PushTExpert",
    "PushTExpertConfig",
    "run_episode",
    "run_expert_episode",
    "target_motion_stats",
]
