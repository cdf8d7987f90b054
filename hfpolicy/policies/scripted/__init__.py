"""Scripted (non-learned) policies that demonstrate tasks from the simulator's privileged state.

`PushTExpert` solves gym-pusht's PushT by planning pushes on a private copy of the simulator; `run_expert_episode`
drives one episode with it (with hooks for a recorder), and `target_motion_stats` measures how imitable its
commanded targets are.
"""

from hfpolicy.policies.scripted.pusht_expert import (
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
