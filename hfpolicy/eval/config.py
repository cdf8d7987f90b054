"""The evaluation's settings: `hfpolicy eval --eval.*` and a training run's periodic evaluation (no heavy imports)."""

from dataclasses import dataclass

from hfpolicy.constants import DEFAULT_EVAL_START_SEED
from hfpolicy.field_errors import ConfigFieldError


@dataclass
class EvalConfig:
    """How many episodes, how they are batched, and how many are filmed."""

    n_episodes: int = 50  # episodes to run (over all processes); episode i is seeded start_seed + i
    batch_size: int = 50  # envs stepped in lockstep by each process (one batched policy call per step)
    parallel: bool = False  # one process per env (AsyncVectorEnv) instead of stepping them in the evaluating process
    n_videos: int = 4  # the first n episodes are filmed (mp4 videos kept with the results, and pushed to the Hub)
    start_seed: int = DEFAULT_EVAL_START_SEED  # episode i is seeded start_seed + i

    def problems(self) -> list[ConfigFieldError]:
        """What is out of range, each problem naming its field (an empty list: nothing)."""
        problems = [ConfigFieldError(self, f"{{{name}}} must be >= 1") for name in ("n_episodes", "batch_size")]
        problems = [problem for problem in problems if getattr(self, problem.fields[0]) < 1]
        if self.n_videos < 0:
            problems.append(ConfigFieldError(self, "{n_videos} must be >= 0"))
        if self.start_seed < 0:
            problems.append(ConfigFieldError(self, "{start_seed}: seeds are >= 0 (episode i is seeded start_seed + i)"))
        return problems


@dataclass
class TrainEvalConfig(EvalConfig):
    """Periodic evaluation in simulation during training (episodes split across processes)."""

    freq: int = 20_000  # steps between evaluations (and one at the end); 0 disables evaluation
    final_n_episodes: int | None = None  # episodes of the evaluation after the last step (None: n_episodes)

    def problems(self) -> list[ConfigFieldError]:
        problems = super().problems()
        if self.freq < 0:
            problems.append(ConfigFieldError(self, "{freq} must be >= 0 (0 disables evaluation)"))
        if self.final_n_episodes is not None and self.final_n_episodes < 1:
            problems.append(ConfigFieldError(self, "{final_n_episodes} must be >= 1 (or null)"))
        return problems
