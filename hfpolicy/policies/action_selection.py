"""How `Policy.select_action` turns predicted action chunks into one action per step.

`select_action` asks its action buffer whether it needs a new chunk, predicts one if so (`steps_per_chunk` steps of
it), hands it to the buffer with `push`, and executes what `pop` returns. Two buffers exist:

- `ActionQueue` (the default): the first `n_action_steps` actions of a chunk, executed one after the other; a new chunk
  is predicted when the queue is empty.
- `TemporalEnsembler` (ACT's temporal ensembling, Zhao et al. 2023, Algorithm 2): a chunk is predicted at every step;
  the executed action for step t is the weighted average of every prediction made so far for step t, with weights
  w_i = exp(-coeff * i) where i = 0 is the oldest prediction. coeff > 0 favours old predictions (the paper uses 0.01),
  coeff = 0 averages uniformly, coeff < 0 favours new ones.

A policy picks its buffer by overriding `Policy.make_action_buffer`; `Policy.reset()` starts a fresh one. Both work on
a batch of envs stepped in lockstep: tensors are (batch, steps, action_dim) in, (batch, action_dim) out.

Per-episode noise (`Policy.reset(seeds=...)`): `predict_per_episode` predicts a chunk whose row i depends on
observation row i and generator i alone, whatever the batch (see PER_EPISODE_ROW_BLOCK for how).
"""

import math
from collections import deque
from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor

# CPU BLAS (MKL, OpenBLAS) computes a matrix product's rows with kernels that depend on the number of rows: a row of a
# 20-row product can differ in the last bit from the same row in a 16-row one (measured; rows in full blocks of 16
# agree). Per-episode acting therefore pads every batch to a multiple of this many rows: an eval at batch 1 computes 16
# rows (bench/cpu_kernels.py measures what that costs against the unpadded chunk, and which smaller blocks round alike
# on the machine it runs on).
PER_EPISODE_ROW_BLOCK = 16


def predict_per_episode(
    predict: Callable[..., Tensor],
    observation: dict[str, Tensor],
    generators: list[torch.Generator],
    n_steps: int,
    row_block: int = PER_EPISODE_ROW_BLOCK,
) -> Tensor:
    """`predict(observation, generator=generators, n_steps=n_steps)` with row i a function of observation row i and
    generator i alone: the batch is padded to a multiple of `row_block` rows (copies of its last row, throw-away
    generators), and the padding is dropped again. (row_block 1: `predict` computes each row alone itself.)"""
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

    def needs_chunk(self) -> bool:
        """Whether `select_action` must predict a chunk (and `push` it) before the next `pop`."""
        ...

    def push(self, chunk: Tensor) -> None:
        """Takes a predicted chunk (batch, steps_per_chunk, action_dim) whose first action is for the current step."""
        ...

    def pop(self) -> Tensor:
        """The action (batch, action_dim) to execute at the current step; the buffer then moves to the next step."""
        ...


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

    def __len__(self) -> int:
        return len(self._queue)


class TemporalEnsembler:
    """Temporal ensembling: one chunk of `chunk_size` actions per step, executed action = exp-weighted average of every
    prediction for the current step (w_i = exp(-coeff * i), i = 0 the oldest; see the module docstring).

    For each of the next `chunk_size` steps it keeps the weighted sum of the predictions for that step and the number
    of predictions so far (the same for every env, which are stepped in lockstep); sums are kept in float64 so that
    the average does not drift with the number of predictions.
    """

    def __init__(self, coeff: float, chunk_size: int):
        if not math.isfinite(coeff):
            raise ValueError(f"temporal_ensemble_coeff must be a finite number, got {coeff}")
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.coeff = coeff
        self.steps_per_chunk = chunk_size
        self._weighted_sums: Tensor | None = None  # (batch, chunk_size, action_dim): sum of w_i * prediction_i
        # (chunk_size, 1) each, made anew on the chunks' device at the first push: for each coming step, the sum of
        # the w_i of the predictions so far, and the number of those predictions
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
