"""Fault cases of LeRobot checkpoints: they get the checks hfpolicy's own get (finite weights and stats, files read
only from the checkpoint's folder) and errors that name the file and the field."""

import json
import math

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_lerobot_format import copy_fixture, edit_config, needs_fixtures

from hfpolicy.eval import main as eval_main
from hfpolicy.hub.export import main as export_main
from hfpolicy.policies import Policy, PolicyLoadError

pytestmark = needs_fixtures
STATE_FILE = "policy_preprocessor_step_3_normalizer_processor.safetensors"


def set_nan(path, pick) -> str:
    tensors = load_file(str(path))
    name = pick(tensors)
    tensors[name] = torch.full_like(tensors[name], math.nan)
    save_file(tensors, str(path))
    return name


def test_nan_weights_are_refused_and_never_exported(tmp_path, capsys):
    folder = copy_fixture("lerobot_act_state", tmp_path)
    set_nan(folder / "model.safetensors", lambda t: max(t, key=lambda k: t[k].numel()))
    with pytest.raises(PolicyLoadError, match=r"model.safetensors holds NaN or inf"):
        Policy.from_pretrained(folder)
    assert export_main([f"--policy.path={folder}", f"--output_dir={tmp_path / 'export'}"]) == 2
    assert "NaN or inf" in capsys.readouterr().err and not (tmp_path / "export").exists()


def test_nan_normalizer_stats_are_refused_at_load_naming_the_file(tmp_path):
    folder = copy_fixture("lerobot_act_state", tmp_path)
    set_nan(folder / STATE_FILE, lambda t: "observation.state.mean")
    with pytest.raises(PolicyLoadError, match=rf"{STATE_FILE} holds NaN or inf in \['observation.state.mean'\]"):
        Policy.from_pretrained(folder)


def edit_preprocessor(folder, edit) -> None:
    path = folder / "policy_preprocessor.json"
    pipeline = json.loads(path.read_text())
    edit(pipeline)
    path.write_text(json.dumps(pipeline))


def test_a_state_file_outside_the_checkpoint_is_never_read(tmp_path):
    folder = copy_fixture("lerobot_act_state", tmp_path)
    outside = tmp_path / "outside.safetensors"
    (folder / STATE_FILE).rename(outside)
    for name in ("../outside.safetensors", str(outside)):
        edit_preprocessor(folder, lambda p, name=name: p["steps"][3].update(state_file=name))
        with pytest.raises(PolicyLoadError, match="points outside the checkpoint folder"):
            Policy.from_pretrained(folder)


@pytest.mark.parametrize(
    "edit, named",
    [
        (lambda p: p.update(steps=[1, 2]), "AttributeError"),
        (lambda p: p["steps"][3].update(config="x"), "AttributeError"),
        (lambda p: p["steps"][3].update(state_file=5), "state_file is 5"),
        (lambda p: p["steps"][3]["config"].update(eps="tiny"), "ValueError"),
    ],
)
def test_wrong_types_in_processor_json_name_the_file(tmp_path, edit, named):
    folder = copy_fixture("lerobot_act_state", tmp_path)
    edit_preprocessor(folder, edit)
    with pytest.raises(PolicyLoadError, match=r"policy_preprocessor.json is not a LeRobot processor pipeline") as e:
        Policy.from_pretrained(folder)
    assert named in str(e.value)


def test_a_nan_config_field_is_named_not_blamed_on_the_stats(tmp_path):
    folder = copy_fixture("lerobot_act_state", tmp_path)
    edit_config(folder, kl_weight=math.nan)
    with pytest.raises(PolicyLoadError, match=r"config.json: kl_weight is nan: set it to a finite number"):
        Policy.from_pretrained(folder)


def test_a_missing_processor_file_gets_a_hint_about_processor_files(tmp_path):
    folder = copy_fixture("lerobot_act_state", tmp_path)
    (folder / STATE_FILE).unlink()
    with pytest.raises(PolicyLoadError, match=rf"{STATE_FILE} does not exist: config.json there names it") as e:
        Policy.from_pretrained(folder)
    assert "holds config.json and model.safetensors" not in str(e.value)


def test_an_n_action_steps_flag_that_does_not_fit_names_the_flag(tmp_path, capsys):
    folder = copy_fixture("lerobot_act_state", tmp_path)
    edit_config(folder, temporal_ensemble_coeff=0.01, n_action_steps=1)
    argv = [f"--policy.path={folder}", "--policy.n_action_steps=4", f"--output_dir={tmp_path / 'eval'}"]
    assert eval_main(argv) == 2
    err = capsys.readouterr().err
    assert "--policy.n_action_steps=1 (got 4)" in err and "config_overrides" not in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "edit, named",
    [
        (
            lambda c: c["input_features"]["observation.state"].update(shape=["x"]),
            "['observation.state'].shape is [\"x\"]",
        ),
        (
            lambda c: c["input_features"]["observation.state"].update(shape=[2.5]),
            "['observation.state'].shape is [2.5]",
        ),
        (lambda c: c["input_features"]["observation.state"].pop("shape"), "['observation.state'].shape is null"),
        (lambda c: c["input_features"].update({"observation.state": "STATE"}), "['observation.state'] is \"STATE\""),
        (lambda c: c.update(input_features=["observation.state"]), 'input_features is ["observation.state"]'),
    ],
)
def test_a_feature_field_of_the_wrong_kind_is_named(tmp_path, capsys, edit, named):
    folder = copy_fixture("lerobot_act_state", tmp_path)
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(PolicyLoadError, match="config.json input_features") as e:
        Policy.from_pretrained(folder)
    assert named in str(e.value) and "fix that field" in str(e.value)
    assert export_main([f"--policy.path={folder}", f"--output_dir={tmp_path / 'export'}"]) == 2
    err = capsys.readouterr().err
    assert named in err and err.count("\n") == 1
