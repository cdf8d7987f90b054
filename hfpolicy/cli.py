"""The `hfpolicy` command. Each subcommand lives in its own module and parses its own dataclass config with draccus,
so flags read like LeRobot's: `hfpolicy train --policy.type=diffusion --dataset.repo_id=lerobot/pusht --steps=1000`.
"""

import importlib
import sys

# subcommand -> (module:function taking the remaining argv, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "train": ("hfpolicy.train:main", "train a policy on a dataset (the main job; also `accelerate launch ...`)"),
    "eval": ("hfpolicy.eval:main", "evaluate a policy (local dir or Hub repo id) in batched simulation"),
    "convert": ("hfpolicy.datasets.convert:main", "convert other dataset formats to LeRobot v3.0 (pusht-zarr)"),
    "record": ("hfpolicy.record:main", "record demonstrations with a scripted expert into a LeRobot v3.0 dataset"),
    "push": ("hfpolicy.push:main", "push a training run (policy, evaluation, curve, card) to the Hub"),
    "export": ("hfpolicy.export:main", "write a saved policy in another library's layout (--format=lerobot)"),
    "view": ("hfpolicy.viewer.view:main", "write one HTML page (offline) to look at a dataset, an evaluation or a run"),
}


# subcommand -> module:config class whose --help is printed without importing the command (and torch) at all
HELP_CONFIGS = {"train": ("hfpolicy.train_config:TrainConfig", "hfpolicy train")}


def usage() -> str:
    lines = ["usage: hfpolicy <command> [--flag=value ...]", "", "commands:"]
    lines += [f"  {name:<9} {help_line}" for name, (_, help_line) in SUBCOMMANDS.items()]
    lines += ["", "`hfpolicy <command> --help` lists a command's flags."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if argv[0] in ("-V", "--version"):
        from hfpolicy import __version__

        print(__version__)
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"hfpolicy: unknown command {name!r}; valid commands: {', '.join(SUBCOMMANDS)}\n", file=sys.stderr)
        print(usage(), file=sys.stderr)
        return 2
    if name in HELP_CONFIGS and any(arg in ("-h", "--help") for arg in rest):
        from hfpolicy.flags import print_help

        (module_name, class_name), prog = HELP_CONFIGS[name][0].split(":"), HELP_CONFIGS[name][1]
        print_help(getattr(importlib.import_module(module_name), class_name), rest, prog)
    module_name, function_name = SUBCOMMANDS[name][0].split(":")
    function = getattr(importlib.import_module(module_name), function_name)
    result = function(rest)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
