"""What `hfpolicy record` is told (`RecordConfig`)."""

from dataclasses import dataclass, field

from hfpolicy.envs import EnvConfig, PushTEnvConfig

DEMONSTRATORS = ("scripted",)  # --policy.type values `hfpolicy record` knows


@dataclass
class DemonstratorConfig:
    """Who acts while recording."""

    type: str = "scripted"
    """"scripted": the env's expert planning on the simulator's state (PushT, ALOHA, xArm)"""


@dataclass
class RecordConfig:
    """`hfpolicy record` flags."""

    env: EnvConfig = field(default_factory=PushTEnvConfig)  # the simulator (--env.type=pusht)
    policy: DemonstratorConfig = field(default_factory=DemonstratorConfig)  # the demonstrator (--policy.type=scripted)
    n_episodes: int = 50  # episodes to record
    start_seed: int = 0  # episode i is seeded start_seed + i
    max_steps: int | None = None  # steps after which an episode is cut (default: PushT 300, ALOHA 400, xArm 200)
    output_dir: str | None = None  # where the dataset is written (must not exist, unless --overwrite=true); required
    overwrite: bool = False  # replace the dataset at output_dir, once the new one is complete (a re-run of a recipe)
    repo_id: str | None = None  # the dataset's name in its metadata (default: local/<output_dir name>)
    push_to: str | None = None  # Hub dataset repo id to upload the finished dataset to
    environment_state: bool = False  # also record observation.environment_state (PushT keypoints; ALOHA, xArm poses)
    images: bool = True  # record the camera (PushT 96x96, ALOHA 480x640, xArm 84x84 video); false: state-only
    discard_failures: bool = False  # leave out episodes that did not succeed within max_steps
    progress: bool = True  # show a progress bar
