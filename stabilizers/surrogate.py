"""The pieces every policy loss shares: the clipped surrogate, the log-ratio, aggregation,
the lower inverse-CDF quantile and SAT's Hill kernel (methods.md; paper Eq. 13-20)."""
from __future__ import annotations

import math
from fractions import Fraction

import torch

from .api import LossOutput, PolicyBatch, check_range

AGGREGATIONS = ("token_mean", "sample_mean")
RATIO_AGAINST = ("old", "rollout")


def check_clip(eps_low: float, eps_high: float) -> None:
    check_range("eps_low", eps_low, 0.0, 1.0, high_open=True)
    check_range("eps_high", eps_high, 0.0, math.inf, high_open=True)


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} = {value!r}; expected one of {list(choices)}")


def log_ratio(batch: PolicyBatch, ratio_against: str) -> torch.Tensor:
    """log(pi / ref) per token, with ref = old_logp ("old") or rollout_logp ("rollout", i.e. mu)."""
    check_choice("ratio_against", ratio_against, RATIO_AGAINST)
    reference = batch.old_logp if ratio_against == "old" else batch.rollout_logp
    return batch.logp - reference.detach()


def sequence_log_ratio(token_log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GSPO's length-normalised log ratio: each response's mean over its active tokens, broadcast to [B, L]."""
    active = mask.bool()
    total = torch.where(active, token_log_ratio, torch.zeros_like(token_log_ratio)).sum(-1, keepdim=True)
    length = active.sum(-1, keepdim=True).clamp(min=1)
    return (total / length).expand_as(token_log_ratio)


def clipped_objective(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    eps_low: torch.Tensor | float,
    eps_high: torch.Tensor | float,
) -> torch.Tensor:
    """S = min(r A, clip(r, 1 - eps_low, 1 + eps_high) A), per token; eps may vary per token."""
    eps_low = torch.as_tensor(eps_low, dtype=ratio.dtype)
    eps_high = torch.as_tensor(eps_high, dtype=ratio.dtype)
    clipped = torch.clamp(ratio, min=1 - eps_low, max=1 + eps_high)
    return torch.minimum(ratio * advantages, clipped * advantages)


def clip_metrics(ratio: torch.Tensor, batch: PolicyBatch, eps_low, eps_high) -> dict[str, torch.Tensor]:
    """Fraction of active tokens whose gradient the clip removes, on each side."""
    ratio = ratio.detach()
    eps_low = torch.as_tensor(eps_low, dtype=ratio.dtype)
    eps_high = torch.as_tensor(eps_high, dtype=ratio.dtype)
    upper = (ratio > 1 + eps_high) & (batch.advantages > 0)
    lower = (ratio < 1 - eps_low) & (batch.advantages < 0)
    return {
        "clip/frac_upper": masked_mean(upper.to(ratio.dtype), batch.mask),
        "clip/frac_lower": masked_mean(lower.to(ratio.dtype), batch.mask),
        "ratio/mean": masked_mean(ratio, batch.mask),
        "ratio/max": masked_max(ratio, batch.mask),
    }


def dual_clip(objective: torch.Tensor, advantages: torch.Tensor, dual_clip_c: float | None) -> torch.Tensor:
    """Bound negative-advantage tokens from below by c A (Ye et al. 2020); None leaves S unchanged."""
    if dual_clip_c is None:
        return objective
    check_range("dual_clip_c", dual_clip_c, 1.0, math.inf, low_open=True, high_open=True)
    return torch.where(advantages < 0, torch.maximum(objective, dual_clip_c * advantages), objective)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    active = mask.bool()
    return torch.where(active, values, torch.zeros_like(values)).sum() / active.sum().clamp(min=1)


def masked_max(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    active = mask.bool()
    if not active.any():
        return values.new_zeros(())
    return values[active].max()


def _global_count(count: torch.Tensor, batch: PolicyBatch) -> tuple[torch.Tensor, int]:
    """The count summed over data-parallel ranks, and the number of ranks."""
    if batch.reduce is None:
        return count, 1
    counts = batch.reduce.all_gather(count.reshape(1).to(torch.float64))
    return torch.cat(counts).sum().to(count.dtype), len(counts)


def aggregate(objective: torch.Tensor, batch: PolicyBatch, aggregation: str) -> torch.Tensor:
    """-mean of the per-token objective: over active tokens ("token_mean") or per response then over
    responses ("sample_mean"). Across ranks the denominator is global and the loss is scaled by the
    world size, so that the ranks' average equals the loss of the concatenated batch. A batch with
    no active token gives 0 with zero gradient."""
    check_choice("aggregation", aggregation, AGGREGATIONS)
    active = batch.mask.bool()
    if batch.token_weight is not None:
        objective = objective * batch.token_weight.detach()
    objective = torch.where(active, objective, torch.zeros_like(objective))
    if aggregation == "token_mean":
        total, count = objective.sum(), active.sum()
    else:
        lengths = active.sum(-1)
        has_tokens = lengths > 0
        per_response = objective.sum(-1) / lengths.clamp(min=1)
        total, count = per_response[has_tokens].sum(), has_tokens.sum()
    count, world = _global_count(count.to(objective.dtype), batch)
    return -(total * world) / count.clamp(min=1)


def lower_quantile(values: torch.Tensor, alpha: float) -> torch.Tensor:
    """q = inf{x : (1/n) #{v <= x} >= alpha} = the k-th smallest value, k = ceil(alpha n).

    Selection (kthvalue), never a full sort. alpha is read as the decimal it was written as,
    so that alpha = 0.9 and n = 10 give k = 9, not 10. Empty input gives 0."""
    check_range("alpha", alpha, 0.0, 1.0, low_open=True)
    n = values.numel()
    if n == 0:
        return values.new_zeros(())
    k = max(1, math.ceil(Fraction(repr(float(alpha))) * n))
    return values.reshape(-1).kthvalue(k).values


def active_abs_values(d: torch.Tensor, batch: PolicyBatch, scope: str) -> torch.Tensor:
    """|d| over active tokens of this micro-batch ("microbatch") or of every rank ("global")."""
    check_choice("quantile_scope", scope, ("microbatch", "global"))
    local = d.detach().abs()[batch.mask.bool()]
    if scope == "microbatch" or batch.reduce is None:
        return local
    return torch.cat(batch.reduce.all_gather(local))


def hill(u: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """SAT's kernel psi(u; q) = 1 / (1 + (u / q)^2), for q > 0."""
    return 1.0 / (1.0 + (u / q) ** 2)


def sat_contraction(d: torch.Tensor, mask: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Paper Eq. 16-18: gate = active & q > 0 & |d| > q; on gated tokens c_plus = psi(max(d, 0); q)
    and c_minus = psi(max(-d, 0); q), so only the side d points to shrinks; 1 elsewhere."""
    d = d.detach()
    gate = mask.bool() & (q > 0) & (d.abs() > q)
    safe_q = torch.where(q > 0, q, torch.ones_like(q))
    one = torch.ones_like(d)
    c_plus = torch.where(gate, hill(d.clamp(min=0), safe_q), one)
    c_minus = torch.where(gate, hill((-d).clamp(min=0), safe_q), one)
    return gate, c_plus, c_minus


def contracted_clip_loss(
    batch: PolicyBatch,
    log_r: torch.Tensor,
    gate: torch.Tensor,
    c_plus: torch.Tensor,
    c_minus: torch.Tensor,
    q: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
    aggregation: str,
    namespace: str = "sat",
) -> LossOutput:
    """The clipped surrogate with per-token bounds eps_low c_minus and eps_high c_plus, plus SAT's
    diagnostics. With c = 1 everywhere it is the fixed-clip loss bit for bit."""
    eps_low_t, eps_high_t = eps_low * c_minus, eps_high * c_plus
    ratio = torch.exp(log_r)
    objective = clipped_objective(ratio, batch.advantages, eps_low_t, eps_high_t)
    metrics = clip_metrics(ratio, batch, eps_low_t, eps_high_t)
    metrics.update({
        f"{namespace}/q": q.detach().clone(),
        f"{namespace}/gate_rate": masked_mean(gate.to(ratio.dtype), batch.mask),
        f"{namespace}/eps_low_mean": masked_mean(eps_low_t, batch.mask),
        f"{namespace}/eps_high_mean": masked_mean(eps_high_t, batch.mask),
        f"{namespace}/c_min": masked_min(torch.minimum(c_plus, c_minus), batch.mask),
    })
    return LossOutput(aggregate(objective, batch, aggregation), metrics)


def masked_min(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    active = mask.bool()
    if not active.any():
        return values.new_ones(())
    return values[active].min()
