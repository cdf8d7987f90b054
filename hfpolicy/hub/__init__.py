"""Publishing policies: the names a user reaches for. The card and staged repository are the policies' own
(hfpolicy.policies.card); a training run is pushed by hfpolicy.hub.push."""

from hfpolicy.policies.card import (
    CARD_METRICS,
    ENV_NAMES,
    EVAL_VIDEOS_DIR,
    POLICY_TAGS,
    PolicyArtifacts,
    make_model_card,
    stage_policy_repo,
)

__all__ = [
    "CARD_METRICS",
    "ENV_NAMES",
    "EVAL_VIDEOS_DIR",
    "POLICY_TAGS",
    "PolicyArtifacts",
    "make_model_card",
    "stage_policy_repo",
]
