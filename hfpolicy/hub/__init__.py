"""Publishing policies: the names a user reaches for, in one place.

Publishing depends on policies, never the reverse: the card and the staged repository are the policies' own
(hfpolicy.policies.card), `Policy.push_to_hub(repo_id, artifacts=PolicyArtifacts(...))` uploads them, and a
training run is pushed by hfpolicy.hub.push (`hfpolicy push --run=DIR`), which gathers its PolicyArtifacts.
"""

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
