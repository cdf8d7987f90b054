"""`hfpolicy export`: a saved policy in another library's checkpoint layout (`--format=lerobot`: LeRobot 0.6's, with a
model card), staged and renamed into a new directory (docs/lerobot.md)."""

from dataclasses import dataclass, field
from pathlib import Path

from hfpolicy.cli.commands import run_command
from hfpolicy.io.atomic import output_path_problem
from hfpolicy.io.paths import check_apart
from hfpolicy.io.staging import Staging
from hfpolicy.policies.base import Policy
from hfpolicy.policies.card import make_model_card
from hfpolicy.policies.lerobot_format import LEROBOT_VERSION, write_lerobot_checkpoint

STAGING_TAG = "partial"  # an export is staged in .<output_dir name>.partial-<pid>-<random>/
FORMATS = ("lerobot",)


@dataclass
class ExportPolicyConfig:
    """Which saved policy to export."""

    path: str | None = None  # local directory or Hub repo id of a saved policy
    revision: str | None = None  # Hub branch, tag or commit when `path` is a repo id


@dataclass
class ExportConfig:
    """`hfpolicy export` flags."""

    policy: ExportPolicyConfig = field(default_factory=ExportPolicyConfig)  # the policy to export
    format: str = "lerobot"  # the checkpoint layout to write: lerobot (LeRobot 0.6)
    output_dir: Path | None = None  # the directory to create; it must not exist yet


def export_policy(
    policy: Policy, output_dir: str | Path, *, format: str = "lerobot", source: str | None = None
) -> Path:
    """Writes `policy` in `format`'s layout into the new directory `output_dir`, with a model card naming `source` as
    its origin; leaves nothing behind on an error (a `PolicyLoadError` when the format cannot express the policy)."""
    if format not in FORMATS:
        raise ValueError(f"unknown export format {format!r}; formats: {', '.join(FORMATS)}")
    output_dir = Path(output_dir)
    if output_dir.exists():
        raise FileExistsError(f"{output_dir} already exists; choose a new --output_dir (export never overwrites)")
    staging_folder = Staging.create(output_dir, STAGING_TAG)
    staging = staging_folder.path
    try:
        write_lerobot_checkpoint(policy, staging)
        origin = source or policy.config.converted_from or "an hfpolicy policy"
        provenance = (
            f"Exported by hfpolicy from {origin} to the checkpoint layout of LeRobot {LEROBOT_VERSION} "
            "(`hfpolicy export --format=lerobot`)."
        )
        if policy.config.converted_from and source:
            provenance += f" That policy was itself converted from {policy.config.converted_from}."
        # The card loads the export from where it is written (the path as given: from where the command ran).
        card = make_model_card(str(output_dir), policy, provenance=provenance, library_name="lerobot")
        card.save(staging / "README.md")
        try:
            staging_folder.publish(output_dir)  # fails rather than replace a directory created meanwhile
        except OSError as e:
            if output_dir.exists():
                raise FileExistsError(
                    f"{output_dir} was created while this export ran (another export?); choose a new --output_dir"
                ) from e
            raise
    except BaseException:
        staging_folder.discard()
        raise
    return output_dir


class ExportWriteError(RuntimeError):
    """The export could not be written where --output_dir points."""


def export_command(config: ExportConfig) -> str:
    """`hfpolicy export`: checks the flags before loading the policy (which may take a while), then writes it."""
    if not config.policy.path:
        raise ValueError("--policy.path is required: a local directory or a Hub repo id of a saved policy")
    if config.output_dir is None:
        raise ValueError("--output_dir is required: the directory to create")
    if config.format not in FORMATS:
        raise ValueError(f"unknown --format={config.format!r}; formats: {', '.join(FORMATS)}")
    policy_dir = Path(config.policy.path).expanduser()
    if policy_dir.is_dir():  # a local policy: the export is never written into its folder
        check_apart(
            config.output_dir, policy_dir, output_words=f"--output_dir={config.output_dir}",
            source_words=f"--policy.path={config.policy.path}", replaces_output=False,
        )  # fmt: skip
    if Path(config.output_dir).exists():
        raise FileExistsError(f"{config.output_dir} already exists; choose a new --output_dir")
    problem = output_path_problem(config.output_dir, folder=True)
    if problem is not None:
        raise ValueError(f"--output_dir={config.output_dir} cannot be made ({problem}): choose another --output_dir")
    policy = Policy.from_pretrained(config.policy.path, revision=config.policy.revision)
    try:
        output_dir = export_policy(policy, config.output_dir, format=config.format, source=config.policy.path)
    except OSError as e:
        if e.errno is None:
            raise
        where = f": {e.filename}" if e.filename else ""  # a read-only folder, a file where a folder is, a full disk
        raise ExportWriteError(
            f"cannot write --output_dir={config.output_dir} ({e.strerror}{where}): choose a writable --output_dir"
        ) from e
    return f"exported {config.policy.path} to {output_dir} ({config.format} layout)"


def main(argv: list[str] | None = None) -> int:
    return run_command("export", argv)
