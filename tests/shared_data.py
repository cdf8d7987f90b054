"""Where the tests find the data that is too big for git: `$HFPOLICY_SHARED_DIR`, by default `../shared` beside the
clone (CI and the dev machines put it there). It holds

    data/pusht_cchi_v7_replay.zarr     the diffusion_policy PushT zarr (206 human demos): the zarr converter's tests
                                       and the tests that learn from human demos
    fixtures/lerobot-0.6.1/            checkpoints saved by LeRobot 0.6.1 with its reference outputs: the parity tests

Tests that need one of them skip, naming the path they looked at, where it is absent; every other test (training,
resuming, pushing, ...) records its own tiny dataset with the scripted expert.
"""

import os
from pathlib import Path

SHARED_DIR = Path(os.environ.get("HFPOLICY_SHARED_DIR") or Path(__file__).resolve().parents[2] / "shared")
PUSHT_ZARR = SHARED_DIR / "data" / "pusht_cchi_v7_replay.zarr"
LEROBOT_FIXTURES = SHARED_DIR / "fixtures" / "lerobot-0.6.1"
