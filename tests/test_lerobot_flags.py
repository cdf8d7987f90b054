"""LeRobot 0.6.1's train/eval flags (hfpolicy.cli.lerobot_flags): each row of the table, through `hfpolicy train` or
`hfpolicy eval` as a LeRobot user would type it. A flag hfpolicy spells otherwise stops the command at its flags
(exit 2, one line naming hfpolicy's equivalent, which itself parses); a flag hfpolicy takes as it is, or a value that
changes nothing, parses. docs/lerobot.md lists the same table."""

import dataclasses
import re
from pathlib import Path

import pytest

from hfpolicy.cli import main
from hfpolicy.cli.commands import COMMANDS, load
from hfpolicy.cli.lerobot_flags import ACCEPTED, LEROBOT_FLAGS, lerobot_equivalent

ROOT = Path(__file__).resolve().parents[1]

# table row -> (the command a LeRobot user types it to, its flags: the row's flag last, as the user would write it)
CASES: dict[str, tuple[str, list[str]]] = {
    "--policy.type": ("train", ["--policy.type=act"]),
    "--policy.path": ("eval", ["--policy.path=lerobot/diffusion_pusht"]),
    "--policy.device": ("eval", ["--policy.device=cpu"]),
    "--policy.n_action_steps": ("eval", ["--policy.n_action_steps=8"]),
    "--policy.repo_id": ("train", ["--policy.repo_id=user/pusht-diffusion"]),
    "--policy.push_to_hub=true": ("train", ["--policy.push_to_hub=true"]),
    "--policy.push_to_hub=false": ("train", ["--policy.push_to_hub=false"]),
    "--policy.private": ("train", ["--policy.private=true"]),
    "--policy.use_amp=true": ("train", ["--policy.use_amp=true"]),
    "--policy.use_amp=false": ("eval", ["--policy.use_amp=false"]),
    "--dataset.repo_id": ("train", ["--dataset.repo_id=lerobot/pusht"]),
    "--dataset.root": ("train", ["--dataset.root=data/pusht"]),
    "--dataset.episodes": ("train", ["--dataset.episodes=[0,1,2]"]),
    "--dataset.revision": ("train", ["--dataset.revision=v3.0"]),
    "--dataset.streaming": ("train", ["--dataset.streaming=true"]),
    "--env.type": ("eval", ["--env.type=aloha"]),
    "--env.task": ("eval", ["--env.type=aloha", "--env.task=AlohaInsertion-v0"]),
    "--env.task=PushT-v0": ("eval", ["--env.type=pusht", "--env.task=PushT-v0"]),
    "--env.obs_type": ("eval", ["--env.type=pusht", "--env.obs_type=pixels_agent_pos"]),
    "--env.episode_length": ("eval", ["--env.episode_length=300"]),
    "--eval.n_episodes": ("eval", ["--eval.n_episodes=10"]),
    "--eval.batch_size": ("eval", ["--eval.batch_size=10"]),
    "--eval.use_async_envs": ("eval", ["--eval.use_async_envs=true"]),
    "--eval.use_async_envs=false": ("eval", ["--eval.use_async_envs=false"]),
    "--eval.recording=true": ("eval", ["--eval.recording=true"]),
    "--eval.recording=false": ("eval", ["--eval.recording=false"]),
    "--eval_freq": ("train", ["--eval_freq=10000"]),
    "--env_eval_freq": ("train", ["--env_eval_freq=10000"]),
    "--output_dir": ("eval", ["--output_dir=outputs/eval/pusht"]),
    "--job_name": ("train", ["--job_name=diffusion_pusht"]),
    "--resume": ("train", ["--resume=false"]),
    "--seed": ("eval", ["--seed=1000"]),
    "--steps": ("train", ["--steps=100000"]),
    "--batch_size": ("train", ["--batch_size=8"]),
    "--num_workers": ("train", ["--num_workers=4"]),
    "--log_freq": ("train", ["--log_freq=200"]),
    "--save_freq": ("train", ["--save_freq=20000"]),
    "--save_checkpoint=true": ("train", ["--save_checkpoint=true"]),
    "--save_checkpoint=false": ("train", ["--save_checkpoint=false"]),
    "--use_policy_training_preset=true": ("train", ["--use_policy_training_preset=true"]),
    "--use_policy_training_preset=false": ("train", ["--use_policy_training_preset=false"]),
    "--optimizer.lr": ("train", ["--optimizer.lr=1e-4"]),
    "--optimizer.betas": ("train", ["--optimizer.betas=[0.95,0.999]"]),
    "--optimizer.eps": ("train", ["--optimizer.eps=1e-8"]),
    "--optimizer.weight_decay": ("train", ["--optimizer.weight_decay=1e-6"]),
    "--optimizer.grad_clip_norm": ("train", ["--optimizer.grad_clip_norm=10"]),
    "--scheduler.name": ("train", ["--scheduler.name=cosine"]),
    "--scheduler.num_warmup_steps": ("train", ["--scheduler.num_warmup_steps=500"]),
    "--wandb.enable=true": ("train", ["--wandb.enable=true"]),
    "--wandb.enable=false": ("train", ["--wandb.enable=false"]),
    "--wandb.project": ("train", ["--wandb.project=lerobot"]),
    "--wandb.entity": ("train", ["--wandb.entity=me"]),
    "--wandb.mode": ("train", ["--wandb.mode=offline"]),
}


def parse(command: str, argv: list[str]):
    """The command's config from `argv`, as `hfpolicy <command>` parses it (nothing runs)."""
    row = COMMANDS[command]
    return load(row.parse)(config_class=load(row.config), argv=list(argv), prog=f"hfpolicy {command}")


def test_every_row_has_a_case():
    assert list(CASES) == list(LEROBOT_FLAGS)


@pytest.mark.parametrize("row", list(LEROBOT_FLAGS))
def test_a_lerobot_flag_is_taken_or_answered_with_hfpolicys_equivalent(row, capsys, monkeypatch):
    command, argv = CASES[row]
    lerobot_flag = argv[-1]
    answer = LEROBOT_FLAGS[row]
    assert lerobot_flag.split("=", 1)[0] == row.split("=", 1)[0]
    if answer == row:  # the same flag: hfpolicy takes it
        parse(command, argv)
        return
    if answer == ACCEPTED:  # a value that changes nothing: dropped
        assert parse(command, argv) == parse(command, argv[:-1])
        return
    no_run = dataclasses.replace(COMMANDS[command], run="builtins:no_such_function")  # reached: AttributeError
    monkeypatch.setitem(COMMANDS, command, no_run)  # bad input fails at the flags, before anything runs
    assert main([command, *argv]) == 2
    err = capsys.readouterr().err
    said = lerobot_equivalent(lerobot_flag)
    assert err.count("\n") == 1 and err.startswith(f"hfpolicy {command}: error: unrecognized arguments: ")
    assert f"LeRobot's {lerobot_flag}" in err and said in err, err
    if said.startswith("--"):  # the equivalent is a flag of this command, and parses in the LeRobot flag's place
        parse(command, [*argv[:-1], said.split(" ", 1)[0]])


def test_the_issues_hub_and_wandb_flags_name_hfpolicys(capsys):
    argv = ["--policy.repo_id=user/pusht", "--policy.push_to_hub=true", "--wandb.enable=true"]
    assert main(["train", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "is hfpolicy's --hub.repo_id=user/pusht" in err and "is hfpolicy's --tracker=wandb" in err


def test_an_unknown_flag_that_is_not_lerobots_still_gets_did_you_mean(capsys):
    assert main(["train", "--stepz=3"]) == 2
    err = capsys.readouterr().err
    assert "(did you mean --steps?)" in err and "LeRobot" not in err


def test_a_flag_the_command_takes_is_never_dropped():
    """`--env.task=PushT-v0` is dropped for PushT (one task), and kept for ALOHA, which has the flag."""
    cfg = parse("eval", ["--env.type=aloha", "--env.task=AlohaInsertion-v0"])
    assert cfg.env.task == "AlohaInsertion-v0"
    with pytest.raises(ValueError, match="PushT-v0"):
        parse("eval", ["--env.type=aloha", "--env.task=PushT-v0"])  # ALOHA's own check, not a silent drop


def test_the_docs_table_is_the_codes():
    text = (ROOT / "docs" / "lerobot.md").read_text()
    section = text[text.index("## LeRobot's flags") :]
    rows = re.findall(r"^\| `([^`]+)` \| (.+) \|$", section, flags=re.M)
    documented = {flag: re.fullmatch(r"`([^`]*)`", cell)[1] if re.fullmatch(r"`[^`]*`", cell) else cell
                  for flag, cell in rows}  # fmt: skip
    assert len(rows) == len(documented)
    assert documented == LEROBOT_FLAGS
