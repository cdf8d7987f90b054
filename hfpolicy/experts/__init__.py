"""Scripted experts: demonstrators that plan from the simulator's privileged state (object poses, contacts, the
physics itself), so they are not policies a robot could run; `hfpolicy record` plays them to make datasets.

`PushTExpert` solves gym-pusht's PushT by planning pushes on a private copy of the simulator; `run_expert_episode`
drives one episode with it (with hooks for a recorder), and `target_motion_stats` measures how imitable its
commanded targets are.
"""

from hfpolicy.experts.pusht_expert import (
    ExpertEpisode,
    NotPushTEnvError,
    PushTExpert,
    PushTExpertConfig,
    run_expert_episode,
    target_motion_stats,
)

__all__ = [
    "ExpertEpisode",
    "NotPushTEnvError",
    "PushTExpert",
    "PushTExpertConfig",
    "run_expert_episode",
    "target_motion_stats",
]
