"""Small float64 PolicyBatches built from chosen ratios, for the tests that check the stabilizers
against values worked out by hand (test_stabilizers_hand.py, test_stabilizers_practice.py)."""
import math

import pytest
import torch

from stabilizers import PolicyBatch

F64 = torch.float64
TOL = dict(rtol=0, atol=1e-9)


def tensor(rows):
    return torch.tensor(rows, dtype=F64)


def batch_from_ratios(ratios, advantages, mask, *, against="old", rollout_logp=-1.0, tis_raw=None):
    """logp = reference + log r, so that exp(logp - reference) = r; the other log-prob is a constant
    (or, for TIS, old - rollout = log w_raw)."""
    log_r = tensor([[math.log(r) for r in row] for row in ratios])
    reference = torch.full_like(log_r, rollout_logp)
    logp = (reference + log_r).requires_grad_(True)
    old = reference if against == "old" else torch.full_like(log_r, -3.0)
    rollout = reference if against == "rollout" else torch.full_like(log_r, -3.0)
    if tis_raw is not None:
        rollout = old - tensor([[math.log(w) for w in row] for row in tis_raw])
    return PolicyBatch(logp=logp, old_logp=old, rollout_logp=rollout,
                       advantages=tensor(advantages), mask=tensor(mask))


def check(out, batch, loss, grad=None):
    assert out.loss.item() == pytest.approx(loss, abs=1e-9)
    if grad is not None:
        out.loss.backward()
        torch.testing.assert_close(batch.logp.grad, tensor(grad), **TOL)


# The GRPO batch: eps 0.2 / 0.2 -> clip interval [0.8, 1.2]; 7 active tokens.
#   response 0, A = +1: r = 1.1, 1.3, 0.7, (pad)   S = A min(r, 1.2)  = 1.1, 1.2, 0.7         sum  3.0
#   response 1, A = -2: r = 0.9, 0.75, 4.0, 1.05   S = A max(r, 0.8)  = -1.8, -1.6, -8.0, -2.1 sum -13.5
GRPO_RATIOS = [[1.1, 1.3, 0.7, 1.0], [0.9, 0.75, 4.0, 1.05]]
GRPO_ADV = [[1.0] * 4, [-2.0] * 4]
GRPO_MASK = [[1, 1, 1, 0], [1, 1, 1, 1]]


def grpo_batch(**kw):
    return batch_from_ratios(GRPO_RATIOS, GRPO_ADV, GRPO_MASK, **kw)
