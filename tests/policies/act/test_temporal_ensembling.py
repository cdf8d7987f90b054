"""Temporal ensembling (ACT, Algorithm 2): the executed action is the exp-weighted average of every chunk's prediction
for the current step, checked against a step-by-step reference; through ACTPolicy.select_action and its reset."""

import math

import pytest
import torch
from act_setup import observation, pusht_stats, state_config

from hfpolicy.policies.act import ACTPolicy
from hfpolicy.policies.action_selection import ActionQueue, TemporalEnsembler


def reference_ensemble(chunks: list[torch.Tensor], coeff: float) -> list[torch.Tensor]:
    """The action executed at each step t, from the chunks predicted at steps 0, 1, 2, ... (chunk t's entry j is its
    prediction for step t + j): sum_i w_i * prediction_i / sum_i w_i over the predictions for step t, oldest first,
    w_i = exp(-coeff * i). Plain loops in float64, no state carried between steps."""
    actions = []
    for t in range(len(chunks)):
        predictions = [chunk[:, t - s].double() for s, chunk in enumerate(chunks[: t + 1]) if t - s < chunk.shape[1]]
        weights = [math.exp(-coeff * i) for i in range(len(predictions))]
        actions.append(sum(w * p for w, p in zip(weights, predictions, strict=True)) / sum(weights))
    return actions


@pytest.mark.parametrize("coeff", [0.01, 0.5, 0.0, -0.3])
def test_ensembler_matches_the_step_by_step_reference(coeff):
    generator = torch.Generator().manual_seed(0)
    chunk_size, batch_size, steps = 5, 3, 12
    chunks = [torch.randn(batch_size, chunk_size, 2, generator=generator) * 100 for _ in range(steps)]
    ensembler = TemporalEnsembler(coeff, chunk_size)
    executed = []
    for chunk in chunks:
        assert ensembler.needs_chunk()
        ensembler.push(chunk)
        executed.append(ensembler.pop())
    expected = reference_ensemble(chunks, coeff)
    for t, (action, reference) in enumerate(zip(executed, expected, strict=True)):
        assert action.dtype == torch.float32 and action.shape == (batch_size, 2)
        torch.testing.assert_close(action.double(), reference, rtol=1e-6, atol=1e-5, msg=f"step {t}")
    # The first step has only one prediction; later steps average several (so they differ from the newest chunk).
    torch.testing.assert_close(executed[0], chunks[0][:, 0])
    assert not torch.allclose(executed[6], chunks[6][:, 0])


def test_rows_of_the_batch_are_ensembled_independently():
    generator = torch.Generator().manual_seed(1)
    chunks = [torch.randn(4, 6, 3, generator=generator) for _ in range(8)]
    batched, single = TemporalEnsembler(0.1, 6), TemporalEnsembler(0.1, 6)
    for chunk in chunks:
        batched.push(chunk)
        single.push(chunk[2:3])
        torch.testing.assert_close(batched.pop()[2:3], single.pop())


def test_queue_executes_the_chunk_in_order():
    queue = ActionQueue(3)
    assert queue.needs_chunk() and queue.steps_per_chunk == 3
    chunk = torch.arange(2 * 3 * 2, dtype=torch.float32).reshape(2, 3, 2)
    queue.push(chunk)
    for j in range(3):
        assert not queue.needs_chunk()
        torch.testing.assert_close(queue.pop(), chunk[:, j], rtol=0, atol=0)
    assert queue.needs_chunk()


def test_select_action_ensembles_every_chunk_and_reset_starts_over(monkeypatch):
    torch.manual_seed(0)
    config = state_config(temporal_ensemble_coeff=0.1, n_action_steps=1, chunk_size=6)
    policy = ACTPolicy(config, dataset_stats=pusht_stats()).eval()
    chunks = []
    predict = policy.predict_action_chunk

    def recording(obs, **kwargs):
        chunks.append(predict(obs, **kwargs))
        return chunks[-1]

    monkeypatch.setattr(policy, "predict_action_chunk", recording)
    policy.reset()
    executed = [policy.select_action(observation(config, 3, phase=0.3 * t, time_dim=False)) for t in range(9)]
    assert len(chunks) == 9 and all(c.shape == (3, 6, 2) for c in chunks)  # a whole chunk at every step
    assert len({c[0, 0, 0].item() for c in chunks}) == 9  # the observations differ, so do the chunks
    for t, (action, reference) in enumerate(zip(executed, reference_ensemble(chunks, 0.1), strict=True)):
        torch.testing.assert_close(action.double(), reference, rtol=1e-6, atol=1e-4, msg=f"step {t}")

    policy.reset()  # a new episode: nothing of the old predictions remains
    chunks.clear()
    first = policy.select_action(observation(config, 3, phase=5.0, time_dim=False))
    torch.testing.assert_close(first, chunks[0][:, 0], rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="batch size changed"):
        policy.select_action(observation(config, 2, phase=5.0, time_dim=False))


def test_ensembling_needs_one_action_per_step():
    with pytest.raises(ValueError, match="set n_action_steps=1"):
        state_config(temporal_ensemble_coeff=0.01, n_action_steps=5)
    with pytest.raises(ValueError, match="finite"):
        TemporalEnsembler(float("nan"), 5)
