"""How `Policy.select_action` turns predicted action chunks into one action per step: an action buffer (`ActionQueue`
by default, ACT's `TemporalEnsembler`) takes (batch, steps, action_dim) chunks and gives (batch, action_dim) actions;
a policy picks its buffer by overriding `Policy.make_action_buffer`."""

import math
from collections import deque
from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor

# CPU BLAS rounds a matrix product's rows differently depending on the number of rows (rows in full blocks of 16
# agree), so per-episode acting pads every batch to a multiple of this many rows (bench/cpu_kernels.py: the cost).
PER_EPISODE_ROW_BLOCK = 16


def predict_per_episode(
    predict: Callable[..., Tensor],
    observation: dict[str, Tensor],
    generators: list[torch.Generator],
    n_steps: int,
    row_block: int = PER_EPISODE_ROW_BLOCK,
) -> Tensor:
    """`predict(observation, generator=generators, n_steps=n_steps)` with row i a function of observation row i and
    generator i alone: the batch is padded to a multiple of `row_block` rows (copies of its last row) and cut again."""
    generators = list(generators)
    batch_size = len(generators)
    pad = -batch_size % row_block
    if pad > 0:
        observation = {k: torch.cat([v, v[-1:].expand(pad, *v.shape[1:])]) for k, v in observation.items()}
        generators += [torch.Generator().manual_seed(0) for _ in range(pad)]
    return predict(observation, generator=generators, n_steps=n_steps)[:batch_size]


class ActionBuffer(Protocol):
    """What `Policy.select_action` needs from an action buffer."""

    steps_per_chunk: int  # how many steps of each predicted chunk `push` takes

    def needs_chunk(self) -> bool: ...  # whether a chunk must be predicted and pushed before the next pop

    def push(self, chunk: Tensor) -> None: ...  # (batch, steps_per_chunk, action_dim); its first action is for now

    def pop(self) -> Tensor: ...  # the action (batch, action_dim) to execute now; then moves to the next step


class ActionQueue:
    """Executes each chunk's first `n_action_steps` actions in order, predicting a new chunk when they are used up."""

    def __init__(self, n_action_steps: int):
        self.steps_per_chunk = n_action_steps
        self._queue: deque[Tensor] = deque()

    def needs_chunk(self) -> bool:
        return not self._queue

    def push(self, chunk: Tensor) -> None:
        self._queue.extend(chunk.transpose(0, 1))

    def pop(self) -> Tensor:
        return self._queue.popleft()


class TemporalEnsembler:
    """ACT's temporal ensembling (Zhao et al. 2023, Algorithm 2): a chunk is predicted at every step, and the executed
    action is the average of every prediction for the current step weighted w_i = exp(-coeff * i), i = 0 the oldest
    (coeff > 0 favours old predictions; the paper uses 0.01). Sums are kept in float64 so that they do not drift."""

    def __init__(self, coeff: float, chunk_size: int):
        if not math.isfinite(coeff):
            raise ValueError(f"temporal_ensemble_coeff must be a finite number, got {coeff}")
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.coeff = coeff
        self.steps_per_chunk = chunk_size
        self._weighted_sums: Tensor | None = None  # (batch, chunk_size, action_dim): sum of w_i * prediction_i
        # for each coming step: the sum of the w_i of the predictions so far, and their number (chunk_size, 1)
        self._weight_totals = torch.zeros(chunk_size, 1, dtype=torch.float64)
        self._counts = torch.zeros(chunk_size, 1, dtype=torch.float64)
        self._dtype = torch.float32  # the dtype of the chunks, which pop returns

    def needs_chunk(self) -> bool:
        return True

    def push(self, chunk: Tensor) -> None:
        if chunk.shape[1] != self.steps_per_chunk:
            raise ValueError(f"a chunk of {chunk.shape[1]} actions; the ensembler needs {self.steps_per_chunk}")
        self._dtype = chunk.dtype
        chunk = chunk.to(torch.float64)
        if self._weighted_sums is None:
            self._weighted_sums = torch.zeros_like(chunk)
            self._weight_totals = torch.zeros(self.steps_per_chunk, 1, dtype=torch.float64, device=chunk.device)
            self._counts = torch.zeros(self.steps_per_chunk, 1, dtype=torch.float64, device=chunk.device)
        elif self._weighted_sums.shape != chunk.shape:
            raise RuntimeError(
                f"a chunk of shape {tuple(chunk.shape)} after chunks of shape {tuple(self._weighted_sums.shape)}: "
                "the batch size changed within an episode; call policy.reset() at every episode start"
            )
        weights = torch.exp(-self.coeff * self._counts)  # the i-th prediction for a step weighs exp(-coeff * i)
        self._weighted_sums += weights * chunk
        self._weight_totals += weights
        self._counts += 1

    def pop(self) -> Tensor:
        if self._weighted_sums is None:
            raise RuntimeError("TemporalEnsembler.pop before any chunk was pushed")
        action = self._weighted_sums[:, 0] / self._weight_totals[0]
        # Move to the next step: the last step of the window has no prediction yet.
        self._weighted_sums = torch.cat([self._weighted_sums[:, 1:], torch.zeros_like(self._weighted_sums[:, :1])], 1)
        self._weight_totals = torch.cat([self._weight_totals[1:], torch.zeros_like(self._weight_totals[:1])])
        self._counts = torch.cat([self._counts[1:], torch.zeros_like(self._counts[:1])])
        return action.to(self._dtype)
