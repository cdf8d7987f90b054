"""The errors of policies."""


class PolicyLoadError(RuntimeError):
    """A saved policy (config.json / model.safetensors) cannot be loaded as it is."""


class UnknownOverrideError(PolicyLoadError):
    """`config_overrides` names fields the saved policy's type does not have (`fields`)."""

    def __init__(self, message: str, fields: list[str]):
        super().__init__(message)
        self.fields = fields


class LeRobotConversionError(PolicyLoadError):
    """A LeRobot checkpoint (or an hfpolicy policy to export) uses something the other library cannot reproduce."""


class PolicyPushError(RuntimeError):
    """`push_to_hub` failed on the Hub's side or the network's (the message names the cause and the fix)."""


class MissingStatsError(RuntimeError):
    """A policy was used for training or acting before it received dataset statistics."""
