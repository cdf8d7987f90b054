import dataclasses
import re
import subprocess
import sys

import draccus
import pytest

from hfpolicy.cli import SUBCOMMANDS, main
from hfpolicy.cli.flags import error_in_flags
from hfpolicy.datasets.convert import PushTZarrConfig
from hfpolicy.envs import EnvConfig
from hfpolicy.eval.cli import EvalPipelineConfig
from hfpolicy.features import FeatureType, PolicyFeature
from hfpolicy.field_errors import ConfigFieldError
from hfpolicy.hub.export import ExportConfig
from hfpolicy.hub.push_config import PushConfig
from hfpolicy.policies import DiffusionConfig, PolicyConfig
from hfpolicy.record import RecordConfig
from hfpolicy.training.config import TrainConfig
from hfpolicy.viewer.view import ViewConfig


def test_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in SUBCOMMANDS:
        assert name in out


def test_unknown_command_names_the_valid_ones(capsys):
    assert main(["trian"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'trian'" in err and "train" in err


def test_console_entry_point_runs():
    result = subprocess.run(
        [sys.executable, "-m", "hfpolicy.cli", "--help"], capture_output=True, text=True, check=True
    )
    assert "usage: hfpolicy" in result.stdout


def test_each_command_help_names_itself(capsys):
    for name in ("eval", "record", "export", "push", "view"):
        with pytest.raises(SystemExit) as exit_info:  # argparse's --help exits 0
            main([name, "--help"])
        assert exit_info.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: hfpolicy {name} ")
    with pytest.raises(SystemExit):
        main(["convert", "pusht-zarr", "--help"])
    assert capsys.readouterr().out.startswith("usage: hfpolicy convert pusht-zarr ")


def test_a_mistyped_flag_is_one_line_in_cli_words(capsys):
    for name, flag in (("train", "--stepz=3"), ("eval", "--eval.n_episode=3"), ("push", "--runn=x")):
        assert main([name, flag]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "usage:" not in err  # no usage dump before it
        assert f"unrecognized arguments: {flag}" in err and f"`hfpolicy {name} --help` lists the flags" in err
    assert main(["train", "--steps=abc"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hfpolicy train: error: --steps: Couldn't parse 'abc' into an int") and err.count("\n") == 1


# --- --help content ----------------------------------------------------------------------------------------------
HELP_ROW = re.compile(r"^  (--[\w.]+)(?: (\S.*?))?(?: {2,}(.*))?$")


def help_rows(argv: list[str], capsys) -> dict[str, tuple[str, str]]:
    """{flag: (type words, help)} from the --help text of `hfpolicy <argv> --help`; a flag listed twice fails."""
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code == 0
    rows: dict[str, tuple[str, str]] = {}
    current = None
    for line in capsys.readouterr().out.splitlines():
        match = HELP_ROW.match(line)
        if match:
            flag, words, doc = match.groups()
            assert flag not in rows, f"{argv}: {flag} is listed twice"
            rows[flag] = (words or "", doc or "")
            current = flag
        elif current and line.startswith(" " * 20):
            words, doc = rows[current]
            rows[current] = (words, f"{doc} {line.strip()}".strip())
        else:
            current = None
    return rows


def leaf_defaults(instance, prefix="--") -> dict[str, object]:
    """{flag: default value} of every leaf field of a config instance."""
    out = {}
    for f in dataclasses.fields(instance):
        value = getattr(instance, f.name)
        if dataclasses.is_dataclass(value):
            out.update(leaf_defaults(value, f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = value
    return out


def draccus_flags(config_class) -> set[str]:
    """Every option draccus's parser accepts, less its `--group FILE` options for nested configs."""
    parser = draccus.argparsing.ArgumentParser(config_class=config_class).parser
    flags = {option for action in parser._actions for option in action.option_strings if option.startswith("--")}
    groups = {flag.rsplit(".", 1)[0] for flag in flags if "." in flag}
    return flags - groups - {"--help"}


HELP_CASES = [
    (["train"], TrainConfig(), "other policy types"),
    (["eval"], EvalPipelineConfig(), []),
    (["record"], RecordConfig(), []),
    (["export"], ExportConfig(), []),
    (["push"], PushConfig(), []),
    (["view"], ViewConfig(), []),
    (["convert", "pusht-zarr"], PushTZarrConfig(), []),
]


@pytest.mark.parametrize(("argv", "config", "more"), HELP_CASES, ids=[" ".join(c[0]) for c in HELP_CASES])
def test_every_flag_is_listed_once_with_its_type_default_and_what_it_does(argv, config, more, capsys):
    rows = help_rows(argv, capsys)
    defaults = leaf_defaults(config)
    for flag, (words, doc) in rows.items():
        assert doc and not doc.startswith("-"), f"{argv}: {flag} has no help of its own: {doc!r}"
        assert doc.count("(default:") <= 1, f"{argv}: {flag}: {doc!r}"
        assert "None" not in doc and "True" not in doc, f"{argv}: {flag} speaks Python, not the CLI: {doc!r}"
        value = defaults.get(flag)
        if isinstance(value, int) and not isinstance(value, bool):
            assert words == "int", f"{argv}: the int flag {flag} is shown as {words!r}"
        if isinstance(value, bool):
            assert words == "bool", f"{argv}: {flag} is shown as {words!r}"
    listed = set(rows)
    if more == "other policy types":  # every registered type (tests may register more, e.g. "toy")
        more = [["train", f"--policy.type={name}"] for name in PolicyConfig.get_known_choices() if name != "diffusion"]
    if hasattr(config, "env"):  # and every other registered env type's flags
        more = [*more, *([*argv, f"--env.type={name}"] for name in EnvConfig.get_known_choices() if name != "pusht")]
    for other in more:  # the other policy types' flags, each with its own help too
        other_rows = help_rows(other, capsys)
        assert all(doc and not doc.startswith("-") for _, doc in other_rows.values()), other
        listed |= set(other_rows)
    assert listed - {"--config_path"} >= set(defaults) - {"--policy.type", "--env.type"}
    assert listed == draccus_flags(type(config))  # every flag the parser takes, and only those


def test_train_help_names_the_chosen_policy_types_flags(capsys):
    diffusion, act = help_rows(["train"], capsys), help_rows(["train", "--policy.type=act"], capsys)
    assert "--policy.horizon" in diffusion and "--policy.horizon" not in act
    assert "--policy.chunk_size" in act and "--policy.chunk_size" not in diffusion
    assert diffusion["--policy.down_dims"] == ("'[int,...]'", diffusion["--policy.down_dims"][1])
    assert "(default: [512,1024,2048])" in diffusion["--policy.down_dims"][1]
    assert "(default: 1)" in act["--policy.n_obs_steps"][1] and "(default: 2)" in diffusion["--policy.n_obs_steps"][1]
    assert diffusion["--dataset.episodes"][1].endswith("(default: all)")  # the field's own default words, once


def test_train_help_does_not_import_torch():
    code = (
        "import sys\nfrom hfpolicy.cli import main\ntry:\n    main(['train', '--help'])\nexcept SystemExit:\n    pass\n"
        "print('torch' in sys.modules, 'accelerate' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines()[-1] == "False False"
    assert "--policy.horizon int" in result.stdout


# --- messages in the command line's words ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["train", "--policy.n_action_steps=20"], "--policy.n_action_steps=20 does not fit"),
        (
            ["train", "--policy.down_dims=[64,127]"],
            "--policy.n_groups=8 must divide every entry of --policy.down_dims=[64,127]",
        ),
        (
            ["train", "--policy.pretrained_backbone_weights=IMAGENET1K_V1"],
            "set --policy.use_group_norm=false to use pretrained weights, or --policy.pretrained_backbone_weights=null",
        ),
        (
            ["train", "--policy.type=act", "--policy.n_vae_encoder_layers=0"],
            "--policy.n_vae_encoder_layers=0 must be >= 1",
        ),
        (["train", "--policy.kernel_size=4"], "--policy.kernel_size=4 must be odd"),
        (["record", "--env.obs_type=bogus", "--output_dir=x"], "unknown --env.obs_type=bogus for env 'pusht'"),
        (["record", "--env.episode_length=0", "--output_dir=x"], "--env.episode_length=0 must be >= 1"),
        (["eval", "--env.type=aloha", "--env.task=Aloha"], "unknown ALOHA --env.task=Aloha; valid tasks: "),
    ],
)
def test_config_errors_name_flags_not_python(argv, expected, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hfpolicy {argv[0]}: error: ") and expected in err and err.count("\n") == 1
    assert not re.search(r"\w=(True|False|None)\b|Couldn't instantiate", err), err


def test_error_in_flags_writes_fields_as_flags_and_values_in_cli_words():
    """From the error's fields, not its text: a tuple becomes [200,200], None null, True true; a field the config
    class does not have (no flag there) stays in Python's words."""
    inputs = {"observation.image": PolicyFeature(FeatureType.IMAGE, (3, 96, 96))}
    outputs = {"action": PolicyFeature(FeatureType.ACTION, (2,))}
    with pytest.raises(ConfigFieldError) as caught:
        DiffusionConfig(crop_shape=(200, 200), input_features=inputs, output_features=outputs).validate_features()
    assert str(caught.value).startswith("crop_shape=(200, 200) is larger than image feature 'observation.image'")
    assert error_in_flags(caught.value, DiffusionConfig, "policy.") == (
        "--policy.crop_shape=[200,200] is larger than image feature 'observation.image' (H, W)=(96, 96); "
        "choose a smaller crop_shape or --policy.crop_shape=null"
    )
    with pytest.raises(ConfigFieldError) as caught:
        DiffusionConfig(pretrained_backbone_weights="IMAGENET1K_V1")
    assert "set use_group_norm=False to use" in str(caught.value)
    assert "set --policy.use_group_norm=false to use" in error_in_flags(caught.value, DiffusionConfig, "policy.")
    in_eval = error_in_flags(caught.value, EvalPipelineConfig, "policy.")  # eval has no --policy.use_group_norm
    assert "set use_group_norm=False to use" in in_eval and "--policy." not in in_eval
    assert error_in_flags(ValueError("n_groups=3 is not a field error"), DiffusionConfig, "policy.") == (
        "n_groups=3 is not a field error"  # a plain message is said as it is: no text is rewritten
    )


def test_an_existing_output_dir_names_the_overwrite_flag(tmp_path, capsys):
    """convert and record both say `--overwrite=true`, not the Python `overwrite=True`."""
    (tmp_path / "notes.txt").write_text("mine")  # a folder holding files (an empty one is taken as new)
    for argv in (
        ["convert", "pusht-zarr", f"--zarr_path={tmp_path / 'in.zarr'}", f"--output_dir={tmp_path}"],
        ["record", f"--output_dir={tmp_path}"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"--output_dir={tmp_path} exists" in err and "add --overwrite=true" in err and err.count("\n") == 1


def test_train_dataset_root_without_info_json_names_the_flag_and_the_subfolder(tmp_path, capsys):
    (tmp_path / "data" / "mine" / "meta").mkdir(parents=True)
    (tmp_path / "data" / "mine" / "meta" / "info.json").write_text("{}")
    argv = ["train", f"--dataset.root={tmp_path / 'data'}", "--steps=1", f"--output_dir={tmp_path / 'run'}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"--dataset.root={tmp_path / 'data'} has no meta/info.json" in err and err.count("\n") == 1
    assert f"its subfolder is one: --dataset.root={tmp_path / 'data' / 'mine'}" in err and "root=None" not in err


def test_a_mistyped_flag_is_answered_with_the_closest_flags(capsys):
    assert main(["train", "--stesp=3"]) == 2
    assert "unrecognized arguments: --stesp=3 (did you mean --steps?)" in capsys.readouterr().err
    assert main(["train", "--policy.type=act", "--policy.chunk_siz=3"]) == 2  # the chosen policy type's flags
    assert "(did you mean --policy.chunk_size?)" in capsys.readouterr().err
    assert main(["eval", "--zzzz=1"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --zzzz=1;" in err and "did you mean" not in err  # nothing close: no guess


def test_a_field_error_names_its_fields_in_python_and_in_flags():
    from hfpolicy.field_errors import ConfigFieldError
    from hfpolicy.policies.act.configuration import ACTConfig

    with pytest.raises(ConfigFieldError) as caught:
        ACTConfig(temporal_ensemble_coeff=0.01, n_action_steps=5)
    error = caught.value
    assert error.fields == ["temporal_ensemble_coeff", "n_action_steps"] and type(error.config) is ACTConfig
    assert "(temporal_ensemble_coeff=0.01)" in str(error) and "set n_action_steps=1 (got 5)" in str(error)
    assert "(--policy.temporal_ensemble_coeff=0.01)" in error.flags("policy.")
    assert "set --policy.n_action_steps=1 (got 5)" in error.flags("policy.")
    assert "set --policy.n_action_steps=1" in error.flags("policy.", only={"n_action_steps"})
    assert "(temporal_ensemble_coeff=0.01)" in error.flags("policy.", only={"n_action_steps"})


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        ("--eval.n_episodes=0", "--eval.n_episodes=0 must be >= 1"),
        ("--eval.n_videos=-1", "--eval.n_videos=-1 must be >= 0"),
        ("--eval.start_seed=-1", "--eval.start_seed=-1: seeds are >= 0"),
    ],
)
def test_train_and_eval_check_their_eval_settings_alike(tmp_path, flag, expected, capsys):
    """One definition (EvalConfig; TrainEvalConfig adds when) and one check, said the same by both commands."""
    from hfpolicy.eval.config import EvalConfig, TrainEvalConfig

    assert issubclass(TrainEvalConfig, EvalConfig)
    assert main(["train", flag, f"--output_dir={tmp_path / 'run'}"]) == 2
    train_err = capsys.readouterr().err
    assert main(["eval", flag, f"--policy.path={tmp_path / 'none'}"]) == 2
    eval_err = capsys.readouterr().err
    assert expected in train_err and expected in eval_err, (train_err, eval_err)


def test_every_flag_of_every_command_has_its_doc():
    """Field docs come from draccus's docstring reader (beside the field, a docstring under it, the comment lines
    below it): a field whose doc it cannot find shows up here, not as a bare `(default: ...)` in --help."""
    from hfpolicy.cli.commands import COMMANDS, load
    from hfpolicy.cli.flags import field_docs, help_sections
    from hfpolicy.policies.config import PolicyConfig

    undocumented = []
    for name, command in COMMANDS.items():
        for argv in ([], ["--policy.type=act"]) if name == "train" else ([],):
            for _, rows in help_sections(load(command.config), argv, f"hfpolicy {name}"):
                undocumented += [f"{name} {flag}" for flag, _, doc in rows if not doc or doc.startswith("(default")]
    assert not undocumented, undocumented
    docs = field_docs(PolicyConfig)  # a docstring under the field; below, an inline comment continued under it
    assert (
        docs["converted_from"] == "where the weights came from when converted (e.g. a LeRobot checkpoint); on the card"
    )
    from hfpolicy.training.config import DatasetConfig

    scripted = field_docs(DatasetConfig)["scripted_episodes"]
    assert scripted.startswith("> 0: train on this many demos of --env's scripted expert")
    assert scripted.endswith("by later runs; no network")


def test_python_dash_m_hfpolicy_runs_the_command():
    result = subprocess.run([sys.executable, "-m", "hfpolicy", "--help"], capture_output=True, text=True, check=True)
    assert "usage: hfpolicy" in result.stdout


def test_version_says_what_it_is_and_the_libraries_it_runs_on(capsys):
    import importlib.metadata

    import torch

    import hfpolicy

    for argv in (["--version"], ["info"]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"hfpolicy {hfpolicy.__version__} (")
        assert f"torch {torch.__version__} (" in out
        for name in ("accelerate", "huggingface_hub", "diffusers", "gym-pusht"):
            assert f"{name} {importlib.metadata.version(name)}" in out
