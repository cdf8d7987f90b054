"""train_config.json flattened, as trackers and the run's page show it."""

import math
from typing import Any


def flat_hparams(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config → flat {"a.b": scalar} for trackers (lists and None as strings)."""
    flat = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flat_hparams(value, prefix=f"{name}."))
        elif isinstance(value, bool | int | float | str) and not (isinstance(value, float) and math.isnan(value)):
            flat[name] = value
        else:
            flat[name] = str(value)
    return flat
