"""Fine-tuning (`--policy.path=SOURCE`): a run that starts from a saved policy (hfpolicy's or LeRobot's, a folder, a
run folder or a Hub repo id), whose config is the base of the `--policy.*` flags and whose weights and stats load
strictly. A run folder is fixed to its last checkpoint now, and refused while a live run holds it
(docs/robustness.md#fine-tuning-says-what-it-starts-from).
"""

import json
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

from hfpolicy.io.run_lock import RunLock, RunLockedError
from hfpolicy.policies.base import Policy
from hfpolicy.policies.errors import PolicyLoadError
from hfpolicy.policies.loading import saved_policy_folder
from hfpolicy.training.config import PATH_FLAG

_STEP_FOLDER = re.compile(r"step_(\d+)")


def pretrained_checkpoint(source: str) -> str:
    """`source`, or, for a training run's folder or a path through its `last` link, the checkpoint's policy folder
    it means now (`<run>/checkpoints/step_N/pretrained_model`, the link resolved); PolicyLoadError for such a moving
    target while a live run holds that run folder. A checkpoint named by its step is taken as it is."""
    given = Path(source)
    if not given.is_dir():
        return source  # a Hub repo id (or a missing path: the loader says so)
    fixed = Path(saved_policy_folder(source, say=False)).resolve()
    run_root = fixed.parent.parent.parent  # <run>/checkpoints/step_N/pretrained_model
    if not (_STEP_FOLDER.fullmatch(fixed.parent.name) and fixed.parent.parent.name == "checkpoints"):
        return source  # a saved policy outside any run's checkpoints
    named = "last" not in given.parts and any(_STEP_FOLDER.fullmatch(part) for part in given.absolute().parts)
    if not named:
        try:
            RunLock(run_root).acquire().release()
        except RunLockedError:
            raise PolicyLoadError(
                f"{PATH_FLAG}={source} is a run still training ({run_root} is held by a live run): its last "
                f"checkpoint changes as it trains; name the checkpoint to start from, e.g. {PATH_FLAG}={fixed}, "
                "or wait for the run to end"
            ) from None
    return str(fixed)


def describe_pretrained(source: str) -> str:
    """ "fine-tuning from PATH (step N)" for the run's first line (the step when PATH is a run's checkpoint)."""
    step = _STEP_FOLDER.fullmatch(Path(source).parent.name)
    return f"fine-tuning from {source}" + (f" (step {int(step.group(1))})" if step else "")


def check_policy_type(source: str, saved_type: str, argv: list[str]) -> None:
    """PolicyLoadError when the user's `--policy.type` contradicts the saved policy's type."""
    typed = [arg.split("=", 1)[1] for arg in argv if arg.startswith("--policy.type=")]
    if typed and typed[-1] != saved_type:
        raise PolicyLoadError(
            f"{PATH_FLAG}={source} is a saved {saved_type} policy, and --policy.type={typed[-1]} contradicts it: "
            f"drop --policy.type (fine-tuning keeps the saved policy's type), or train a {typed[-1]} policy from "
            f"scratch without {PATH_FLAG}"
        )


def pretrained_config_file(source: str, folder: Path, argv: Sequence[str] = ()) -> Path:
    """A train config file in `folder` whose `policy` is the saved policy's config, with `pretrained_path=source`:
    the base that the flags `argv` override. Loading the policy here checks `source` (and that a `--policy.type`
    in `argv` agrees with it) before the run starts."""
    policy = Policy.from_pretrained(source)
    check_policy_type(source, policy.config.type, list(argv))
    config = policy.config.to_dict()
    config.update(pretrained_path=source, device=None, converted_from=None)  # a run setting; and not a conversion
    path = Path(folder) / "pretrained_policy_config.json"
    path.write_text(json.dumps({"policy": config}))
    return path


def parse_with_pretrained_policy(parse, source: str, argv: list[str]):
    """`parse(argv, config_path)` with the saved policy's config as the base of the flags; a run folder `source` is
    fixed to its checkpoint first (`pretrained_checkpoint`)."""
    source = pretrained_checkpoint(source)
    with tempfile.TemporaryDirectory(prefix="hfpolicy-finetune-") as folder:
        return parse(argv, pretrained_config_file(source, Path(folder), argv))


def load_pretrained_weights(policy: Policy, source: str) -> None:
    """Loads the weights and normalization stats of the policy saved at `source` into `policy` (built from the run's
    config), strictly; PolicyLoadError naming --policy.path and the mismatch otherwise."""
    pretrained = Policy.from_pretrained(source)
    if type(pretrained) is not type(policy):
        raise PolicyLoadError(
            f"{PATH_FLAG}={source} holds a {pretrained.config.type} policy; the run builds a {policy.config.type} "
            f"one: drop --policy.type"
        )
    try:
        policy.load_strict(pretrained.state_dict(), source=source)
    except PolicyLoadError as e:
        raise PolicyLoadError(
            f"{PATH_FLAG}={source}: the run's --policy.* flags change the architecture of the saved policy ({e}); "
            "only the fields that do not change what the weights mean may differ when fine-tuning"
        ) from e
