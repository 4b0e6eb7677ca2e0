"""IcePop as prime-rl computes it (`IcePopLoss`; Ring-1T, arXiv 2510.18855, "IcePop"): masked importance
sampling on pi/mu with no clip and no trainer recompute. The bench's `icepop` (stabilizers/icepop.py) is
AReaL's form instead: a mask on pi_old/mu and PPO's clip on pi/pi_old.

    r_t    = pi(y_t) / mu(y_t)                              (ratio_against rollout: mu)
    keep_t = ratio_low <= r_t <= ratio_high                  (decided on sg(log r))
    loss   = token-mean of  -keep_t r_t A_t                  (gradient A r on kept tokens; masked ones
                                                              stay in the denominator)

Read in prime-rl's loss module and trainer config (PrimeIntellect-ai/prime-rl,
src/prime_rl/trainer/rl/loss.py `IcePopLoss`, `IcePopLossConfig`: ratio_low 0.2, ratio_high 5.0, the
defaults here and of the `icepop_prime` recipe; the stored copy names no commit). adv_tau (1.0) only scales
the advantages and is left out. Its one-difference control is `ipo`: the same -A r on kept tokens, where
IPO keeps a token by |pi - mu| <= 0.3 instead of by the ratio band. IPO's cap 1e4 cannot bind inside a band
that ends at 5.
"""
from __future__ import annotations

import math

import torch

from ._surrogate import aggregate, log_ratio, masked_mean
from .api import LossOutput, PolicyBatch, ranges, register


@register("icepop_is")
@ranges(ratio_low="(0, ratio_high]", ratio_high="(0, inf)")
def icepop_is(
    batch: PolicyBatch,
    *,
    ratio_low: float = 0.2,
    ratio_high: float = 5.0,
    ratio_against: str = "rollout",
    aggregation: str = "token_mean",
) -> LossOutput:
    log_r = log_ratio(batch, ratio_against)
    detached = log_r.detach()
    keep = (detached >= math.log(ratio_low)) & (detached <= math.log(ratio_high))
    objective = torch.where(keep, log_r.exp() * batch.advantages, 0.0)
    metrics = {
        "icepop_is/masked_frac": masked_mean((~keep).to(detached.dtype), batch.active),
        "ratio/mean": masked_mean(detached.exp(), batch.active),
    }
    return LossOutput(aggregate(objective, batch, aggregation), metrics)
