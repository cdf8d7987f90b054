"""`hfpolicy train` (and examples/train_pusht.py): the run function of the command table's "train" row."""

from collections.abc import Callable

from hfpolicy.cli.commands import run_command
from hfpolicy.runs.run_folder import PRETRAINED_DIR
from hfpolicy.training.config import TrainConfig
from hfpolicy.training.launch import is_launch_main_process


def run(cfg: TrainConfig) -> str | None:
    """Trains; the last lines the main process prints (None elsewhere): where the policy is, how to view the run."""
    from accelerate import PartialState

    from hfpolicy.training.loop import train  # lazy: torch, not imported by --help (examples/train_pusht.py --help)

    result = train(cfg)
    if not PartialState().is_main_process:
        return None
    summary, checkpoint = result.eval_summary, result.last_checkpoint
    return (
        f"done: {checkpoint / PRETRAINED_DIR if checkpoint is not None else f'no checkpoint in {result.output_dir}'}"
        + (f"; final eval success {summary['pc_success']:.1f}%" if summary else "")
        + (f"; on the Hub: {result.hub_commit}" if result.hub_commit else "")
        + f"\nlook at the run (curves, evaluations, videos): hfpolicy view {result.output_dir}"
    )


def main(
    argv: list[str] | None = None,
    config_class: type[TrainConfig] = TrainConfig,
    announce: Callable[[TrainConfig], str] | None = None,
    prog: str = "hfpolicy train",
) -> int:
    """`hfpolicy train` (exit 2: bad input, 1: a failed run); `announce(cfg)`: the main process's first line."""

    def before_run(cfg: TrainConfig) -> None:
        if announce is not None and is_launch_main_process():
            print(announce(cfg), flush=True)

    return run_command("train", argv, prog=prog, config_class=config_class, before_run=before_run)
