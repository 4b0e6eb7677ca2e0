"""Score Centering (Marek & Ryabinin 2026, arXiv 2609.20807): REINFORCE minus the sampler-weighted
score at every prefix, which removes the drift term E_q[A] E_q[grad log p] that group-centred
rewards leave under train-inference mismatch. Read in the authors' code (MJ10/score-centering @
521e517, losses.py ``loss_fn_rl``, ``centering_weights``, ``is_weights``; defaults from
sweeps/06b_quant_stale.yaml); the paper's equations were not read.

    q = mu (the sampler, PolicyBatch.sampler.logq), p = pi (PolicyBatch.sampler.logp, with gradient)
    f(r) = 1 ("none"), min(r, tis_cap) ("tis"), or r 1[mis_low <= r <= mis_high] ("mis")
    w_t  = sg(f(p(y_t) / q(y_t)))                              the sampled token's weight
    cw_v = sg(q_v f(p_v / q_v))                                the centering mass (in log space)
    score_t = w_t log p(y_t) - sum_v cw_v log p_v
    loss = -(1 / N_tokens) sum_i A_i sum_t score_t             (token_mean)

top_k = 0 is the exact form (every vocabulary entry). top_k = k is the code's top-k form, what an
engine that transports the sampler's k most probable entries H can compute: cw_v on H; on the tail
q is modelled as rho p, rho = (1 - Q_H) / max(1 - P_H, 1e-6) (the tail masses of q and sg(p); the floor
is the code's, prime-rl's and the paper's appendix A.3, added in issue 62), so its mass is
cw_v = alpha sg(p_v) with alpha = rho f(1 / rho). The code writes the tail term through
sum_all sg(p) log p, whose gradient is zero; on the full distribution the tail sum is taken directly,
the same value, and at k = V (no tail) the exact form bit for bit. Defaults: the code's TIS cap 2.0
and MIS band [0.5, 5.0]; its paper grid uses k = 128, larger than the tiny engine's vocabulary.
Where it differs from the code: no e^20 clamp on the token ratio (a weight of e^20 is already a
broken sampler).
"""
from __future__ import annotations

import math

import torch

from ._surrogate import aggregate, masked_mean
from .api import LossOutput, PolicyBatch, ranges, register, sampler_field

# the floor on p's tail mass in rho's denominator: the authors' code, prime-rl and the paper's appendix A.3
_TAIL_FLOOR = 1e-6


def _log_mass(logp: torch.Tensor, logq: torch.Tensor, weight: str, tis_cap: float, mis_low: float,
              mis_high: float) -> torch.Tensor:
    """log(q f(p / q)), detached: in log space, so that q = 0 gives -inf and p / q never overflows."""
    logp, logq = logp.detach(), logq.detach()
    if weight == "none":
        return logq
    if weight == "tis":  # q min(p / q, c) = min(p, c q)
        return torch.minimum(logp, logq + math.log(tis_cap))
    low = logq + (math.log(mis_low) if mis_low > 0 else -math.inf)
    return torch.where((logp >= low) & (logp <= logq + math.log(mis_high)), logp, -math.inf)


def _tail_alpha(rho: torch.Tensor, weight: str, tis_cap: float, mis_low: float, mis_high: float) -> torch.Tensor:
    """alpha = rho f(1 / rho), 0 where the tail is empty (rho = 0)."""
    if weight == "none":
        alpha = rho
    elif weight == "tis":
        alpha = (rho * tis_cap).clamp(max=1.0)
    else:
        alpha = ((rho * mis_low <= 1) & (rho * mis_high >= 1)).to(rho.dtype)
    return torch.where(rho > 0, alpha, 0.0)


@register("score_centering", needs=("sampler_logp",))
@ranges(weight=("none", "tis", "mis"), tis_cap="(0, inf]", mis_low="[0, mis_high]", mis_high="(0, inf]",
        top_k="int")
def score_centering(
    batch: PolicyBatch,
    *,
    weight: str = "none",
    tis_cap: float = 2.0,
    mis_low: float = 0.5,
    mis_high: float = 5.0,
    top_k: int = 0,
    aggregation: str = "token_mean",
) -> LossOutput:
    if top_k < 0:
        raise ValueError(f"stabilizer 'score_centering': top_k = {top_k}; 0 (exact) or a head size >= 1")
    logq, logp_all = sampler_field(batch, "logq", "score_centering"), sampler_field(batch, "logp", "score_centering")
    # f(p / q) of the sampled token: its mass over q
    w = (_log_mass(batch.logp, batch.rollout_logp, weight, tis_cap, mis_low, mis_high) - batch.rollout_logp.detach()).exp()
    mass = _log_mass(logp_all, logq, weight, tis_cap, mis_low, mis_high).exp()
    tail_q = torch.zeros_like(w)
    if 0 < top_k < logq.shape[-1]:  # a static shape: the top-k form with a tail
        head = torch.zeros_like(logq, dtype=torch.bool).scatter(-1, logq.topk(top_k, dim=-1).indices, True)
        p = logp_all.detach().exp()
        tail_q = torch.where(head, 0.0, logq.detach().exp()).sum(-1)
        tail_p = torch.where(head, 0.0, p).sum(-1)
        rho = tail_q / tail_p.clamp(min=_TAIL_FLOOR)
        alpha = _tail_alpha(rho, weight, tis_cap, mis_low, mis_high)
        mass = torch.where(head, mass, alpha[..., None] * p)
    center = (mass * logp_all).sum(-1)
    objective = batch.advantages * (w * batch.logp - center)
    metrics = {
        "score_centering/weight_mean": masked_mean(w, batch.active),
        "score_centering/center_mass": masked_mean(mass.sum(-1), batch.active),
        "score_centering/tail_q": masked_mean(tail_q, batch.active),
    }
    return LossOutput(aggregate(objective, batch, aggregation), metrics)
