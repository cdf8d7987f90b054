"""LeRobot 0.6.1's `lerobot-train` / `lerobot-eval` flags, and what hfpolicy writes for each: one table, which
hfpolicy.cli.flags consults for a flag the command does not take (docs/lerobot.md lists the same table)."""

ACCEPTED = "accepted: hfpolicy does this anyway"

# LeRobot flag (or flag=value, which wins over the flag alone; matched without regard to case) -> what hfpolicy takes:
# - the same flag: hfpolicy takes it as LeRobot does (never looked up: the command knows it);
# - another flag, `{value}` standing for the value given: the exact equivalent;
# - a sentence: the way to the same result where no single flag is it;
# - ACCEPTED: the flag with that value changes nothing in hfpolicy, so it is dropped.
LEROBOT_FLAGS: dict[str, str] = {
    "--policy.type": "--policy.type",
    "--policy.path": "--policy.path",
    "--policy.device": "--policy.device",
    "--policy.n_action_steps": "--policy.n_action_steps",
    "--policy.repo_id": "--hub.repo_id={value}",
    "--policy.push_to_hub=true": "--hub.repo_id=REPO_ID (a run pushes when it names a repo)",
    "--policy.push_to_hub=false": ACCEPTED,
    "--policy.private": "--hub.private={value}",
    "--policy.use_amp=true": "--mixed_precision=fp16 (hfpolicy train; hfpolicy eval runs in float32)",
    "--policy.use_amp=false": ACCEPTED,
    "--dataset.repo_id": "--dataset.repo_id",
    "--dataset.root": "--dataset.root",
    "--dataset.episodes": "--dataset.episodes",
    "--dataset.revision": "--dataset.revision",
    "--dataset.streaming": "--dataset.streaming",
    "--env.type": "--env.type",
    "--env.task": "--env.task",
    "--env.task=PushT-v0": ACCEPTED,
    "--env.obs_type": "--env.obs_type",
    "--env.episode_length": "--env.episode_length",
    "--eval.n_episodes": "--eval.n_episodes",
    "--eval.batch_size": "--eval.batch_size",
    "--eval.use_async_envs": "--eval.parallel={value}",
    "--eval.use_async_envs=false": ACCEPTED,
    "--eval.recording=true": "--dataset_dir=DIR (hfpolicy eval: the episodes as a LeRobot v3.0 dataset)",
    "--eval.recording=false": ACCEPTED,
    "--eval_freq": "--eval.freq={value}",
    "--env_eval_freq": "--eval.freq={value}",
    "--output_dir": "--output_dir",
    "--job_name": "--output_dir=DIR (hfpolicy names a run by its folder)",
    "--resume": "--resume",
    "--seed": "--eval.start_seed={value} (hfpolicy eval; hfpolicy train takes --seed)",
    "--steps": "--steps",
    "--batch_size": "--batch_size",
    "--num_workers": "--num_workers",
    "--log_freq": "--log_freq",
    "--save_freq": "--save_freq",
    "--save_checkpoint=true": ACCEPTED,
    "--save_checkpoint=false": "--save_freq=0 (the final checkpoint is always kept; 0 saves only that one)",
    "--use_policy_training_preset=true": ACCEPTED,
    "--use_policy_training_preset=false": "the --policy.optimizer_* and --policy.scheduler_* flags set the optimizer",
    "--optimizer.lr": "--policy.optimizer_lr={value}",
    "--optimizer.betas": "--policy.optimizer_betas={value}",
    "--optimizer.eps": "--policy.optimizer_eps={value}",
    "--optimizer.weight_decay": "--policy.optimizer_weight_decay={value}",
    "--optimizer.grad_clip_norm": "--grad_clip_norm={value}",
    "--scheduler.name": "--policy.scheduler_name={value}",
    "--scheduler.num_warmup_steps": "--policy.scheduler_warmup_steps={value}",
    "--wandb.enable=true": "--tracker=wandb",
    "--wandb.enable=false": "--tracker=none (hfpolicy's default, --tracker=tensorboard, logs into the run folder)",
    "--wandb.project": "no flag: --tracker=wandb names the W&B project `hfpolicy`",
    "--wandb.entity": "WANDB_ENTITY={value} in the environment, with --tracker=wandb",
    "--wandb.mode": "WANDB_MODE={value} in the environment, with --tracker=wandb",
}

_BY_KEY = {key.lower(): answer for key, answer in LEROBOT_FLAGS.items()}


def lerobot_equivalent(arg: str) -> str | None:
    """What hfpolicy takes for the LeRobot flag `arg` (`--name=value` or `--name`), `{value}` filled in; None when
    the table does not know it or names the same flag."""
    flag, has_value, value = arg.partition("=")
    keys = [f"{flag}={value}".lower(), flag.lower()] if has_value else [flag.lower()]
    for key in keys:
        answer = _BY_KEY.get(key)
        if answer is not None:
            if answer == flag:
                return None
            placeholder = flag.rsplit(".", 1)[-1].lstrip("-").upper()
            return answer.replace("{value}", value if has_value else placeholder)
    return None


def is_accepted_lerobot_flag(arg: str) -> bool:
    """Whether `arg` is a LeRobot flag and value that changes nothing in hfpolicy (dropped before parsing)."""
    return lerobot_equivalent(arg) == ACCEPTED


def describe_lerobot_flags(args: list[str]) -> str:
    """ "LeRobot's --wandb.enable=true is hfpolicy's --tracker=wandb; ..." for the args the table knows, or ""."""
    parts = []
    for arg in args:
        answer = lerobot_equivalent(arg)
        if answer is not None and answer.startswith("--"):
            parts.append(f"LeRobot's {arg} is hfpolicy's {answer}")
        elif answer not in (None, ACCEPTED):
            parts.append(f"LeRobot's {arg}: {answer}")
    return "; ".join(parts)
