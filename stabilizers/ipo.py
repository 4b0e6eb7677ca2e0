"""IPO, prime-rl's default loss since its PR #3418 ("make ipo the default rl loss", merged 2026-08-27;
the PR text is a third-party excerpt here): a sign-free trust region on the probability of the
sampled token and a value-capped ratio, no clip.

    p_t = pi(y_t), q_t = mu(y_t)                 (ratio_against rollout: mu, the inference log-probs)
    keep_t = |p_t - q_t| <= eps                  (whatever the advantage's sign; prime-rl PR #1930:
                                                  "we mask independently of the advantage sign")
    c_t = min(r_t, max_importance_ratio) in value, with r_t's gradient (straight-through)
    loss = token-mean of  -keep_t c_t A_t        (masked tokens stay in the denominator)

Read from prime-rl's trainer config and loss module (PrimeIntellect-ai/prime-rl, IPOLossConfig and
IPOLoss; the commit of the loss module read is not known): eps 0.1 is the default of PR #3418's
config (which renamed ``ipo_threshold`` to ``eps``); max_importance_ratio 1e4 is the default of a
later config, which also sets eps 0.3. The earlier IPO also had a KL term (kl_tau 1e-3): the current
module has none, and neither has this one (``dppo_pkl`` is the default before PR #3418, with its
KL). adv_tau (1.0) scales the advantages only, so it is left out. log(pi/ref) is clamped at 20 before
exp, as in dppo_tv, so that a masked token's gradient stays 0, not NaN.
"""
from __future__ import annotations

import torch

from ._surrogate import aggregate, log_ratio, masked_mean, reference_logp
from .api import LossOutput, PolicyBatch, ranges, register

_LOG_CLAMP = 20.0


@register("ipo")
@ranges(eps="[0, 1]", max_importance_ratio="[1, inf]")
def ipo(
    batch: PolicyBatch,
    *,
    eps: float = 0.1,
    max_importance_ratio: float = 1e4,
    ratio_against: str = "rollout",
    aggregation: str = "token_mean",
) -> LossOutput:
    reference = reference_logp(batch, ratio_against)
    ratio = log_ratio(batch, ratio_against).clamp(max=_LOG_CLAMP).exp()
    # a log-prob a hair above 0 (an engine's rounding) is a probability of 1
    p, q = batch.logp.detach().exp().clamp(max=1.0), reference.exp().clamp(max=1.0)
    keep = (p - q).abs() <= eps
    capped = ratio - (ratio - ratio.clamp(max=max_importance_ratio)).detach()
    objective = torch.where(keep, capped * batch.advantages, 0.0)
    metrics = {
        "ipo/masked_frac": masked_mean((~keep).to(p.dtype), batch.active),
        "ipo/capped_frac": masked_mean((keep & (ratio.detach() > max_importance_ratio)).to(p.dtype), batch.active),
        "ratio/mean": masked_mean(ratio.detach(), batch.active),
    }
    return LossOutput(aggregate(objective, batch, aggregation), metrics)
