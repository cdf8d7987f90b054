"""Publishing policies: the names a user reaches for. The card and staged repository are the policies' own
(hfpolicy.policies.card); a training run is pushed by hfpolicy.hub.push."""

from hfpolicy.policies.card import PolicyArtifacts, make_model_card, stage_policy_repo

__all__ = ["PolicyArtifacts", "make_model_card", "stage_policy_repo"]
