"""The training curve PNG of a run (loss, and eval success when evaluated, over steps), drawn from metrics.jsonl."""

import io
from pathlib import Path

from hfpolicy.io.atomic import write_atomically
from hfpolicy.runs.metrics_log import read_metrics


def draw_training_curve(metrics_path: Path, png_path: Path) -> Path | None:
    """Writes the PNG and returns its path; None when there is no loss logged yet."""
    entries = read_metrics(metrics_path)
    losses = [(e["step"], e["loss"]) for e in entries if e.get("loss") is not None]
    evals = [(e["step"], e["eval/pc_success"]) for e in entries if e.get("eval/pc_success") is not None]
    if not losses:
        return None
    import matplotlib  # imported here: only runs that draw a curve pay for it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, loss_ax = plt.subplots(figsize=(7, 3.5), dpi=100)
    loss_ax.plot(*zip(*losses, strict=True), color="tab:blue", label="training loss")
    loss_ax.set_yscale("log")
    loss_ax.set_xlabel("step")
    loss_ax.set_ylabel("loss", color="tab:blue")
    if evals:
        success_ax = loss_ax.twinx()
        success_ax.plot(*zip(*evals, strict=True), "o-", color="tab:green", label="eval success", clip_on=False)
        success_ax.set_ylabel("eval success (%)", color="tab:green")
        success_ax.set_ylim(-5, 105)  # a margin: markers at 0% and 100% are drawn whole, not cut by the frame
        success_ax.set_yticks(range(0, 101, 20))
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return write_atomically(png_path, buffer.getvalue())
