"""IPO as prime-rl computes it: a trust region on the probability of the sampled token that ignores
the advantage's sign, and a capped importance ratio with no clip. It is prime-rl's default loss since
PR #3418 ("make ipo the default rl loss", merged 2026-08-27).

    p_t = pi(y_t), q_t = mu(y_t)                 (ratio_against rollout: mu, the inference log-probs)
    keep_t = |p_t - q_t| <= eps                  (either sign; prime-rl PR #1930:
                                                  "we mask independently of the advantage sign")
    c_t = exp(min(sg(log r_t), log cap) + log r_t - sg(log r_t))
                                                 (value min(r, cap), gradient weight min(r, cap) too)
    loss = token-mean of  -keep_t c_t A_t  +  kl_coef (log r_t)^2
                                                 (masked tokens count in the denominator, and the
                                                  KL term counts on every token)

This follows prime-rl's `_capped_importance_ratio` and `IPOLoss`
(PrimeIntellect-ai/prime-rl, src/prime_rl/trainer/rl/loss.py). d c / d log pi = c = min(r, cap): the cap
bounds the gradient, not just the value. The bench read it wrongly before issue 62.

prime-rl's defaults, by date, and their recipes (recipes.yaml):
- `ipo_pr3418`: eps 0.1 and kl_tau 1e-3, no cap. This is PR #3418's config and the loss module
  `ipo_loss_fn` at 559b447 (``ipo_threshold`` was renamed to ``eps`` later).
- `ipo`: eps 0.3, no KL term, max_importance_ratio 1e4. This is PR #3586 (2026-09-18), today's
  default, and the defaults of this function.

adv_tau (1.0) only scales the advantages, so it is left out. Where this differs from prime-rl: the
detached log-ratio is clamped at 20 as well as at log(cap). That matters only for a ratio above 5e8.
At 559b447 prime-rl has no cap at all, and there both the value and the gradient weight are
min(r, e^20) instead of r.
"""
from __future__ import annotations

import math

import torch

from ._surrogate import aggregate, log_ratio, masked_mean, reference_logp
from .api import LossOutput, PolicyBatch, ranges, register

_LOG_CLAMP = 20.0


def capped_ratio(log_r: torch.Tensor, cap: float) -> torch.Tensor:
    """min(r, cap) in value and as the gradient weight (prime-rl's `_capped_importance_ratio`)."""
    detached = log_r.detach()
    return (detached.clamp(max=min(math.log(cap), _LOG_CLAMP)) + (log_r - detached)).exp()


def keep_band(p: torch.Tensor, q: torch.Tensor, eps: float) -> torch.Tensor:
    """|p - q| <= eps, probabilities clamped at 1 (an engine rounds a log-prob a hair above 0)."""
    return (p.clamp(max=1.0) - q.clamp(max=1.0)).abs() <= eps


def ipo_objective(batch: PolicyBatch, eps: float, max_importance_ratio: float, kl_coef: float,
                  ratio_against: str) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """(per-token objective keep c A - kl_coef (log r)^2, keep, metrics): the term IPO and IPO with
    Score Centering share."""
    reference = reference_logp(batch, ratio_against)
    log_r = log_ratio(batch, ratio_against)
    keep = keep_band(batch.logp.detach().exp(), reference.exp(), eps)
    objective = torch.where(keep, capped_ratio(log_r, max_importance_ratio) * batch.advantages, 0.0)
    if kl_coef:  # a Python float: the term is in the graph only when asked for
        objective = objective - kl_coef * log_r.square()
    ratio = log_r.detach().exp()
    metrics = {
        "ipo/masked_frac": masked_mean((~keep).to(ratio.dtype), batch.active),
        "ipo/capped_frac": masked_mean((keep & (ratio > max_importance_ratio)).to(ratio.dtype), batch.active),
        "ratio/mean": masked_mean(ratio, batch.active),
    }
    return objective, keep, metrics


@register("ipo")
@ranges(eps="[0, 1]", max_importance_ratio="[1, inf]", kl_coef="[0, inf)")
def ipo(
    batch: PolicyBatch,
    *,
    eps: float = 0.3,
    max_importance_ratio: float = 1e4,
    kl_coef: float = 0.0,
    ratio_against: str = "rollout",
    aggregation: str = "token_mean",
) -> LossOutput:
    objective, _, metrics = ipo_objective(batch, eps, max_importance_ratio, kl_coef, ratio_against)
    return LossOutput(aggregate(objective, batch, aggregation), metrics)
