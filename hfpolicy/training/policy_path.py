"""`--policy.path=SOURCE`, the flag that fine-tunes a saved policy (hfpolicy.training.finetune): taken out of the
flags before they are parsed, since the saved policy's config is the base the other flags override."""

from hfpolicy.policies.errors import PolicyLoadError

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
        raise PolicyLoadError(f"{PATH_FLAG} needs a value: a saved policy's directory or Hub repo id")
    return path, rest
