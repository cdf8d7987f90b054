"""Fine-tuning (`--policy.path=SOURCE`): a run that starts from a saved policy (hfpolicy's or LeRobot's, a folder, a
run folder or a Hub repo id), whose config is the base of the `--policy.*` flags and whose weights and stats load
strictly. A run folder is fixed to its last checkpoint now, and refused while a live run holds it
(docs/robustness.md#fine-tuning-says-what-it-starts-from).
"""

import json
import re
import tempfile
from pathlib import Path

from hfpolicy.io.run_lock import RunLock, RunLockedError
from hfpolicy.policies.base import Policy
from hfpolicy.policies.errors import PolicyLoadError
from hfpolicy.policies.loading import saved_policy_folder
from hfpolicy.training.policy_path import PATH_FLAG

_STEP_FOLDER = re.compile(r"step_(\d+)")


def pretrained_checkpoint(source: str) -> str:
    """`source`, or, for a run folder or a path through its `last` link, the checkpoint's policy folder it means now;
    PolicyLoadError for such a moving target while a live run holds the run folder."""
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


def parse_with_pretrained_policy(parse, source: str, argv: list[str]):
    """`parse(argv, config_path)` over the saved policy's config (`pretrained_path=source`, a run folder fixed to its
    checkpoint); a `--policy.type` in `argv` must agree with the saved policy's."""
    source = pretrained_checkpoint(source)
    policy = Policy.from_pretrained(source)
    typed = [arg.split("=", 1)[1] for arg in argv if arg.startswith("--policy.type=")]
    if typed and typed[-1] != policy.config.type:
        raise PolicyLoadError(
            f"{PATH_FLAG}={source} is a saved {policy.config.type} policy, and --policy.type={typed[-1]} contradicts "
            f"it: drop --policy.type (fine-tuning keeps the saved policy's type), or train a {typed[-1]} policy from "
            f"scratch without {PATH_FLAG}"
        )
    config = policy.config.to_dict()
    config.update(pretrained_path=source, device=None, converted_from=None)  # a run setting; and not a conversion
    with tempfile.TemporaryDirectory(prefix="hfpolicy-finetune-") as folder:
        path = Path(folder) / "pretrained_policy_config.json"
        path.write_text(json.dumps({"policy": config}))
        return parse(argv, path)


def load_pretrained_weights(policy: Policy, source: str) -> None:
    """Loads the weights and normalization stats of the policy saved at `source` into `policy`, strictly."""
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
