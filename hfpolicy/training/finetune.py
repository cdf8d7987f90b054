"""Fine-tuning: a run that starts from a saved policy (hfpolicy's or LeRobot's, a directory or a Hub repo id).

    hfpolicy train --policy.path=user/pusht-diffusion --dataset.root=data/more_demos --steps=2000

`--policy.path=SOURCE` (LeRobot's flag) makes the saved policy's config the base of `--policy.*` (the other
`--policy.*` flags override fields that do not change what the weights mean, such as the learning rate or
n_action_steps) and records SOURCE as `policy.pretrained_path` in train_config.json and on the model card. The run's
policy then starts from the saved weights and normalization stats (`load_pretrained_weights`), strictly: a flag
that changes the architecture is refused, naming the mismatch. A resumed fine-tuning run reloads nothing from SOURCE
but its checkpoint.
"""

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported when a policy is loaded, not for `hfpolicy train --help`
    from hfpolicy.policies import Policy

PATH_FLAG = "--policy.path"


def split_policy_path(argv: list[str]) -> tuple[str | None, list[str]]:
    """(the value of --policy.path, the other flags); `--policy.path=X` and `--policy.path X` are both accepted."""
    path, rest, args = None, [], iter(argv)
    for arg in args:
        if arg == PATH_FLAG:
            path = next(args, None)
        elif arg.startswith(f"{PATH_FLAG}="):
            path = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    if path is not None and not path:
        from hfpolicy.policies.registry import PolicyLoadError

        raise PolicyLoadError(f"{PATH_FLAG} needs a value: a saved policy's directory or Hub repo id")
    return path, rest


def pretrained_config_file(source: str, folder: Path) -> Path:
    """A train config file in `folder` whose `policy` is the saved policy's config, with `pretrained_path=source`:
    the base that the flags override. Loading the policy here checks `source` before the run starts."""
    from hfpolicy.policies import Policy

    policy = Policy.from_pretrained(source)
    config = policy.config.to_dict()
    config.update(pretrained_path=source, device=None, converted_from=None)  # a run setting; and not a conversion
    path = Path(folder) / "pretrained_policy_config.json"
    path.write_text(json.dumps({"policy": config}))
    return path


def parse_with_pretrained_policy(parse, source: str, argv: list[str]):
    """`parse(argv, config_path)` with the saved policy's config as the base of the flags."""
    with tempfile.TemporaryDirectory(prefix="hfpolicy-finetune-") as folder:
        return parse(argv, pretrained_config_file(source, Path(folder)))


def load_pretrained_weights(policy: "Policy", source: str) -> None:
    """Loads the weights and normalization stats of the policy saved at `source` into `policy` (built from the run's
    config), strictly; PolicyLoadError naming --policy.path and the mismatch otherwise."""
    from hfpolicy.policies import Policy, PolicyLoadError

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
