"""The pieces every policy loss shares: the clipped surrogate, the log-ratio, aggregation,
the lower inverse-CDF quantile and SAT's Hill kernel (methods.md; paper Eq. 13-20).

Written for speed on 10^6-10^7 tokens: few full-size temporaries (on CPU each one costs page
faults), selection instead of sorting, and SAT's contraction computed on the gated tokens only.
"""
from __future__ import annotations

import math
from fractions import Fraction

import torch

from .api import LossOutput, PolicyBatch, check_range

AGGREGATIONS = ("token_mean", "sample_mean")
RATIO_AGAINST = ("old", "rollout")
QUANTILE_SCOPES = ("microbatch", "global")


def check_clip(eps_low: float, eps_high: float) -> None:
    check_range("eps_low", eps_low, 0.0, 1.0, high_open=True)
    check_range("eps_high", eps_high, 0.0, math.inf, high_open=True)


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} = {value!r}; expected one of {list(choices)}")


def reference_logp(batch: PolicyBatch, ratio_against: str) -> torch.Tensor:
    """The denominator of the ratio: old_logp ("old") or rollout_logp ("rollout", i.e. log mu), detached."""
    check_choice("ratio_against", ratio_against, RATIO_AGAINST)
    return (batch.old_logp if ratio_against == "old" else batch.rollout_logp).detach()


def log_ratio(batch: PolicyBatch, ratio_against: str) -> torch.Tensor:
    """log(pi / ref) per token, with ref = old_logp ("old") or rollout_logp ("rollout", i.e. mu)."""
    return batch.logp - reference_logp(batch, ratio_against)


def sequence_log_ratio(token_log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GSPO's length-normalised log ratio: each response's mean over its active tokens, broadcast to [B, L]."""
    active = mask.bool()
    total = torch.where(active, token_log_ratio, 0.0).sum(-1, keepdim=True)
    length = active.sum(-1, keepdim=True).clamp(min=1)
    return (total / length).expand_as(token_log_ratio)


def clip_bounds(eps_low: float, eps_high: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The PPO interval [1 - eps_low, 1 + eps_high], as 0-d tensors of ``dtype``."""
    return 1 - torch.tensor(eps_low, dtype=dtype), 1 + torch.tensor(eps_high, dtype=dtype)


def clipped_objective(ratio: torch.Tensor, advantages: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """S = min(r A, clip(r, low, high) A), per token; the bounds may be 0-d or per token."""
    # clamp needs its bounds on ratio's device (0-d CPU bounds fail on CUDA); a no-op on CPU
    clipped = torch.clamp(ratio, min=low.to(ratio.device), max=high.to(ratio.device))
    return torch.minimum(ratio * advantages, clipped * advantages)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` over active tokens; 0 when there is none."""
    active = mask.bool()
    return torch.where(active, values, 0.0).sum() / active.count_nonzero().clamp(min=1)


def masked_fraction(flags: torch.Tensor, mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Fraction of active tokens whose boolean ``flags`` is set; 0 when there is none."""
    active = mask.bool()
    return ((flags & active).count_nonzero() / active.count_nonzero().clamp(min=1)).to(dtype)


def masked_max(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Max of ``values`` over active tokens; 0 when there is none."""
    active = mask.bool()
    if not active.any():
        return values.new_zeros(())
    return torch.where(active, values, -math.inf).amax()


def clip_metrics(ratio: torch.Tensor, batch: PolicyBatch, low: torch.Tensor, high: torch.Tensor) -> dict[str, torch.Tensor]:
    """Fraction of active tokens whose gradient the clip [low, high] removes, on each side; ratio mean and max."""
    ratio = ratio.detach()
    return {
        "clip/frac_upper": masked_fraction((ratio > high) & (batch.advantages > 0), batch.active, ratio.dtype),
        "clip/frac_lower": masked_fraction((ratio < low) & (batch.advantages < 0), batch.active, ratio.dtype),
        "ratio/mean": masked_mean(ratio, batch.active),
        "ratio/max": masked_max(ratio, batch.active),
    }


def dual_clip(objective: torch.Tensor, advantages: torch.Tensor, dual_clip_c: float | None) -> torch.Tensor:
    """Bound negative-advantage tokens from below by c A (Ye et al. 2020); None leaves S unchanged."""
    if dual_clip_c is None:
        return objective
    check_range("dual_clip_c", dual_clip_c, 1.0, math.inf, low_open=True, high_open=True)
    return torch.where(advantages < 0, torch.maximum(objective, dual_clip_c * advantages), objective)


def _global_count(count: torch.Tensor, batch: PolicyBatch) -> tuple[torch.Tensor, int]:
    """The count summed over data-parallel ranks, and the number of ranks."""
    if batch.reduce is None:
        return count, 1
    counts = batch.reduce.all_gather(count.detach().reshape(1).to(torch.float64))
    return torch.cat(counts).sum().to(count.dtype), len(counts)


def aggregate(objective: torch.Tensor, batch: PolicyBatch, aggregation: str) -> torch.Tensor:
    """-mean of the per-token objective: over active tokens ("token_mean") or per response then over
    responses ("sample_mean"). Across ranks the denominator is global and the loss is scaled by the
    world size, so that the ranks' average equals the loss of the concatenated batch (and DDP's
    gradient average its gradient). A batch with no active token gives 0 with zero gradient."""
    check_choice("aggregation", aggregation, AGGREGATIONS)
    active = batch.active
    if batch.token_weight is not None:
        objective = objective * batch.token_weight.detach()
    objective = torch.where(active, objective, 0.0)  # where, not a product: padding may hold inf
    if aggregation == "token_mean":
        total, count = objective.sum(), active.count_nonzero()
    else:
        lengths = active.sum(-1)
        has_tokens = lengths > 0
        per_response = objective.sum(-1) / lengths.clamp(min=1)
        total, count = per_response.sum(), has_tokens.count_nonzero()  # empty responses add 0
    count, world = _global_count(count.to(objective.dtype), batch)
    return -(total * world) / count.clamp(min=1)


SELECT_SAMPLE = 65536  # the sample of the quantile's pre-selection; inputs under 4x this select directly


def _narrow(values: torch.Tensor, k: int, n: int, active: torch.Tensor | None,
            sample_size: int) -> tuple[torch.Tensor, int] | None:
    """Flat indices of the values that can hold the k-th smallest of the n chosen ones, and how many
    chosen values lie below them; None when the input is small or the sample misleads.

    A strided sample gives a bound ``lo`` that, with high probability, has fewer than k values
    below it; the candidates are the chosen values >= lo (about 1 - k/n of them, plus 1%)."""
    if values.numel() < 4 * sample_size:
        return None
    stride = values.numel() // sample_size
    sample = values[::stride] if active is None else values[::stride][active[::stride]]
    rank = (k * sample.numel()) // n - 2 * math.isqrt(sample.numel())  # ~4 binomial sd below
    if rank < 1:
        return None
    lo = sample.kthvalue(rank).values
    keep = values >= lo if active is None else (values >= lo) & active
    index = keep.nonzero().squeeze(-1)
    below = n - index.numel()
    return (index, below) if below < k else None


def kth_smallest(values: torch.Tensor, k: int, active: torch.Tensor | None = None, *,
                 sample_size: int = SELECT_SAMPLE) -> torch.Tensor:
    """The exact k-th smallest (1-based) of ``values[active]`` (of all values when active is None).

    Large inputs are first narrowed (_narrow) to the candidates >= a sampled bound, and the k-th
    is selected among them at rank k minus the count below: exact whatever the sample; when the
    sample misleads, the plain selection over all values runs. Inputs under 4 x sample_size skip
    the narrowing. Selection (kthvalue), never a full sort."""
    values = values.reshape(-1)
    active = None if active is None else active.reshape(-1)
    n = values.numel() if active is None else int(active.count_nonzero())
    narrowed = _narrow(values, k, n, active, sample_size)
    if narrowed is not None:
        index, below = narrowed
        return values[index].kthvalue(k - below).values
    return (values if active is None else values[active]).kthvalue(k).values


def quantile_rank(alpha: float, n: int) -> int:
    """k = ceil(alpha n), with alpha read as the decimal it was written as (0.9 x 10 gives 9, not 10)."""
    check_range("alpha", alpha, 0.0, 1.0, low_open=True)
    return max(1, math.ceil(Fraction(repr(float(alpha))) * n))


def lower_quantile(values: torch.Tensor, alpha: float, mask: torch.Tensor | None = None) -> torch.Tensor:
    """q = inf{x : (1/n) #{v <= x} >= alpha} = the k-th smallest value, k = ceil(alpha n) (methods.md SAT 2).

    Over ``values[mask]`` when a mask is given. No value gives 0."""
    check_range("alpha", alpha, 0.0, 1.0, low_open=True)
    values = values.detach()
    active = None if mask is None else mask.bool()
    n = values.numel() if active is None else int(active.count_nonzero())
    if n == 0:
        return values.new_zeros(())
    return kth_smallest(values, quantile_rank(alpha, n), active)


def tail_index(magnitude: torch.Tensor, active: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """SAT's gate (paper Eq. 16): flat indices of the active tokens with |d| > q, none when q = 0."""
    threshold = torch.where(q > 0, q, math.inf)
    return ((magnitude.reshape(-1) > threshold) & active.reshape(-1)).nonzero().squeeze(-1)


def sat_gate(magnitude: torch.Tensor, batch: PolicyBatch, alpha: float, scope: str, *,
             sample_size: int = SELECT_SAMPLE) -> tuple[torch.Tensor, torch.Tensor]:
    """SAT's q = the alpha-quantile of |d| (``magnitude``) over the active tokens of this micro-batch
    ("microbatch", the paper's) or of every data-parallel rank ("global", through batch.reduce), and
    the gated tokens (tail_index). On one micro-batch both come from one narrowing pass: the
    gated tokens are among the candidates of the quantile's selection."""
    check_choice("quantile_scope", scope, QUANTILE_SCOPES)
    if scope == "global" and batch.reduce is not None:
        q = lower_quantile(torch.cat(batch.reduce.all_gather(magnitude[batch.active])), alpha)
        return q, tail_index(magnitude, batch.active, q)
    values, active = magnitude.detach().reshape(-1), batch.active.reshape(-1)
    n = int(active.count_nonzero())
    k = quantile_rank(alpha, n)
    narrowed = _narrow(values, k, n, active, sample_size) if n else None
    if narrowed is None:
        q = lower_quantile(values, alpha, active)
        return q, tail_index(values, active, q)
    candidates, below = narrowed
    candidate_values = values[candidates]
    q = candidate_values.kthvalue(k - below).values
    return q, candidates[candidate_values > q] if q > 0 else candidates[:0]


def hill(u: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """SAT's kernel psi(u; q) = 1 / (1 + (u / q)^2), for q > 0 (paper Eq. 17)."""
    return 1.0 / (1.0 + (u / q) ** 2)


def sat_contraction(d: torch.Tensor, q: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Paper Eq. 17-18 on the gated tokens (flat ``index``): c_plus = psi(max(d, 0); q) and
    c_minus = psi(max(-d, 0); q), so only the side d points to shrinks (the other is psi(0) = 1).
    Every other token has c_plus = c_minus = 1."""
    d_gated = d.detach().reshape(-1)[index]
    shrink = hill(d_gated.abs(), q)
    return torch.where(d_gated > 0, shrink, 1.0), torch.where(d_gated < 0, shrink, 1.0)


def contracted_clip_loss(
    batch: PolicyBatch,
    log_r: torch.Tensor,
    q: torch.Tensor,
    index: torch.Tensor,
    c_plus: torch.Tensor,
    c_minus: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
    aggregation: str,
    namespace: str = "sat",
) -> LossOutput:
    """The clipped surrogate with bounds 1 - eps_low c_minus, 1 + eps_high c_plus on the tokens at the
    flat positions ``index`` and the fixed ones elsewhere (paper Eq. 19-20), plus SAT's diagnostics.

    The per-token bounds are the fixed bounds with the contracted tokens written in (1 * eps is exact),
    so with no contracted token this is the fixed-clip loss bit for bit."""
    ratio = torch.exp(log_r)
    low, high = clip_bounds(eps_low, eps_high, ratio.dtype)
    eps_low_c, eps_high_c = eps_low * c_minus, eps_high * c_plus
    if index.numel():
        low = torch.full_like(ratio, low.item())  # .item() of a 0-d tensor is exact
        high = torch.full_like(ratio, high.item())
        low.view(-1)[index] = 1 - eps_low_c
        high.view(-1)[index] = 1 + eps_high_c
    objective = clipped_objective(ratio, batch.advantages, low, high)

    metrics = clip_metrics(ratio, batch, low, high)
    n = batch.active.count_nonzero().clamp(min=1).to(ratio.dtype)
    metrics.update({
        f"{namespace}/q": q.detach().clone(),
        f"{namespace}/gate_rate": index.numel() / n,
        f"{namespace}/eps_low_mean": eps_low - (eps_low - eps_low_c).sum() / n,
        f"{namespace}/eps_high_mean": eps_high - (eps_high - eps_high_c).sum() / n,
        f"{namespace}/c_min": torch.minimum(c_plus, c_minus).min() if index.numel() else ratio.new_ones(()),
    })
    return LossOutput(aggregate(objective, batch, aggregation), metrics)
