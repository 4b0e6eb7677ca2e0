"""The pieces every policy loss shares: the clipped surrogate, the log-ratio, aggregation,
the lower inverse-CDF quantile and SAT's Hill kernel (methods.md; paper Eq. 13-20).

Sync-free: nothing here reads a tensor value on the host (no .item(), no int(count), no Python
branch on data) and every shape is the input's, so each loss traces whole with
torch.compile(fullgraph=True) and never stalls a GPU's launch queue. Masks, not index lists: a
gated token is a True in a [B, L] mask. The one exception is the "global" quantile scope, whose
all-gather of per-rank tensors of different sizes is a synchronisation by nature.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import torch

from ._ranges import CONVENTIONS
from .api import LossOutput, PolicyBatch, check_range

# the helpers below branch on these strings: a value outside them raises rather than taking a branch
AGGREGATIONS = CONVENTIONS["aggregation"]
RATIO_AGAINST = CONVENTIONS["ratio_against"]
QUANTILE_SCOPES = CONVENTIONS["quantile_scope"]


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


def clip_bounds(eps_low: float, eps_high: float, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The PPO interval [1 - eps_low, 1 + eps_high], as 0-d tensors of ``like``'s dtype and device.

    Made on the device by a fill: a bound made on the host and copied over would make every loss call
    wait for the GPU (a synchronising copy; benchmarks/gpu_check.py finds them)."""
    def full(value: float) -> torch.Tensor:
        return torch.full((), value, dtype=like.dtype, device=like.device)
    return 1 - full(eps_low), 1 + full(eps_high)


class _ClippedObjective(torch.autograd.Function):
    """S = min(r A, clip(r, low, high) A) with its derivative written out: dS/dr = A where the
    unclipped term is the minimum (r A <= clip(r) A), else 0. That is autograd's gradient through
    minimum and clamp bit for bit (at a tie each side gets half and they add back to A; where r A is
    larger, r is outside the bounds and clamp passes nothing), but the backward reads one float
    tensor instead of three comparisons of min and clamp. The indicator is computed in floats,
    (sign(clip(r) A - r A) + 1) clamped to [0, 1], not as a boolean: a compiled graph would save a
    boolean for the backward, and Inductor's CPU code stores booleans ~20x slower than floats
    (SAT's compiled loss was 1.5x faster without it). The two differ only where clip(r) A - r A is
    NaN, i.e. r is NaN or r = inf with A = 0 (finite inputs, finite bounds); there the slope is NaN
    instead of 0, and the gradient reaching logp through exp, slope x r, is NaN either way.
    Gradients reach r only (A and the bounds are data)."""

    @staticmethod
    def forward(ctx, ratio: torch.Tensor, advantages: torch.Tensor, low: torch.Tensor,
                high: torch.Tensor) -> torch.Tensor:
        # clamp needs its bounds on ratio's device (0-d CPU bounds fail on CUDA); a no-op for bounds made
        # there (clip_bounds), a synchronising copy for any other
        clipped = torch.clamp(ratio, min=low.to(ratio.device), max=high.to(ratio.device)) * advantages
        unclipped = ratio * advantages
        unclipped_is_min = (torch.sign(clipped - unclipped) + 1).clamp(0, 1)
        ctx.save_for_backward(advantages * unclipped_is_min)
        return torch.minimum(unclipped, clipped)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (slope,) = ctx.saved_tensors
        return grad * slope, None, None, None


def clipped_objective(ratio: torch.Tensor, advantages: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """S = min(r A, clip(r, low, high) A), per token; the bounds may be 0-d or per token."""
    return _ClippedObjective.apply(ratio, advantages.detach(), low.detach(), high.detach())


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
    if values.numel() == 0:  # a static shape, not a value: amax needs one element
        return values.new_zeros(())
    return torch.where(active.any(), torch.where(active, values, -math.inf).amax(), 0.0)


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
    return torch.where(advantages < 0, torch.maximum(objective, dual_clip_c * advantages), objective)


def _global_count(count: torch.Tensor, batch: PolicyBatch) -> tuple[torch.Tensor, int]:
    """The count summed over data-parallel ranks, and the number of ranks."""
    if batch.reduce is None:
        return count, 1
    counts = batch.reduce.all_gather(count.detach().reshape(1).to(torch.float64))
    return torch.cat(counts).sum().to(count.dtype), len(counts)


def aggregate(objective: torch.Tensor, batch: PolicyBatch, aggregation: str) -> torch.Tensor:
    """-mean of the per-token objective: over active tokens ("token_mean"), per response then over
    responses ("sample_mean"), or each response's SUM over a constant, the batch's response width L,
    then the mean over responses ("token_sum_norm": Dr.GRPO, arXiv 2503.20783 Sec. 3.2, and verl's
    seq-mean-token-sum-norm, whose constant is the generation budget; an engine that pads responses
    to its budget, as the tiny engine does, gives exactly that). Across ranks the denominator is
    global and the loss is scaled by the world size, so that the ranks' average equals the loss of
    the concatenated batch (and DDP's gradient average its gradient). A batch with no active token
    gives 0 with zero gradient."""
    check_choice("aggregation", aggregation, AGGREGATIONS)
    active = batch.active
    if batch.token_weight is not None:
        objective = objective * batch.token_weight.detach()
    objective = torch.where(active, objective, 0.0)  # where, not a product: padding may hold inf
    if aggregation == "token_mean":
        total, count = objective.sum(), active.count_nonzero()
    else:
        lengths = active.sum(-1)
        if aggregation == "sample_mean":
            total = (objective.sum(-1) / lengths.clamp(min=1)).sum()  # empty responses add 0
        else:
            total = objective.sum() / max(objective.shape[-1], 1)  # L: a static shape, no host read
        count = (lengths > 0).count_nonzero()
    count, world = _global_count(count.to(objective.dtype), batch)
    return -(total * world) / count.clamp(min=1)


_DIGIT_BITS = 16  # radix select reads 16 bits per pass: 2 passes for float32, 4 for float64
_INT_VIEW = {torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16,
             torch.bfloat16: torch.int16}


def _radix_select(values: torch.Tensor, rank: Callable[[torch.Tensor], torch.Tensor],
                  mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(the k-th smallest of the non-negative ``values[mask != 0]``, their count n), k = rank(n).

    Radix select: the bit pattern of a non-negative float orders like the float, so the k-th value
    is found 16 bits at a time. After some leading digits are chosen, the candidates are the values
    in [low, low + 2^(shift + 16)); each pass counts them per next 16-bit digit in a fixed
    65536-bin histogram (plus one bin for the values below the range and one above, so no boolean
    mask is built), picks the digit whose cumulative count reaches k and narrows the range to it.
    n is the first histogram's total, so no pass counts the mask. Static shapes and no host read,
    unlike kthvalue (a Python k) or masked indexing (a data-dependent size); the two passes over
    float32 cost about a quarter of kthvalue on CPU. The mask is read as ``mask != 0``: given a
    float mask, a compiled graph then loads floats, not booleans (which Inductor's CPU code loads
    slowly)."""
    values = values.detach().reshape(-1)
    bits = values.view(_INT_VIEW[values.dtype])
    if bits.dtype == torch.int16:
        bits = bits.to(torch.int32)  # 16-bit patterns widen losslessly (non-negative)
    width = 16 if values.dtype in (torch.float16, torch.bfloat16) else 8 * values.element_size()
    count_dtype = torch.int32 if values.numel() < 2**31 else torch.int64
    weight = (torch.ones((), dtype=count_dtype, device=values.device).expand(values.shape) if mask is None
              else (mask.reshape(-1) != 0).to(count_dtype))
    low = torch.zeros(1, dtype=bits.dtype, device=values.device)  # the candidates' smallest bit pattern
    for shift in range(width - _DIGIT_BITS, -1, -_DIGIT_BITS):
        # a candidate goes to bin 1 + its digit; values below the range (already counted off k) to
        # bin 0, above it to bin 2^16 + 1 (a value wrapping past the integer maximum lands in bin 0,
        # which is never read either). In place on the fresh temporaries: eagerly, each new
        # full-size tensor costs page faults.
        if shift == width - _DIGIT_BITS:
            bins = (bits >> shift).add_(1)  # every value is a candidate (non-negative: no clamp needed)
        else:
            bins = bits - (low - (1 << shift))
            if shift:
                bins >>= shift
            bins.clamp_(0, 2**_DIGIT_BITS + 1)
        counts = torch.zeros(2**_DIGIT_BITS + 2, dtype=count_dtype, device=values.device).index_add_(0, bins, weight)
        cumulative = counts[1:-1].cumsum(0, dtype=count_dtype)
        if shift == width - _DIGIT_BITS:
            n = cumulative[-1]
            k = rank(n).to(count_dtype).reshape(1)
        # the digit whose cumulative count first reaches k (clamped: k > count only when nothing is active)
        chosen = torch.searchsorted(cumulative, k).clamp(max=2**_DIGIT_BITS - 1)
        k = k - (cumulative[chosen] - counts[1:-1][chosen])
        low = low + (chosen.to(bits.dtype) << shift)
    if values.dtype in (torch.float16, torch.bfloat16):
        low = low.to(torch.int16)
    return low.view(values.dtype).reshape(()), n


def quantile_rank(alpha: float, n: int | torch.Tensor, max_n: int | None = None) -> int | torch.Tensor:
    """k = max(1, ceil(alpha n)), with alpha read as the decimal it was written as (0.9 x 10 gives 9,
    not 10). ``n`` may be a 0-d integer tensor (then so is k, in exact int64 arithmetic: alpha = p / q,
    k = ceil(n p / q)); ``max_n`` bounds it, to check that n p fits in int64."""
    check_range("alpha", alpha, 0.0, 1.0, low_open=True)
    fraction = Fraction(repr(float(alpha)))
    if not isinstance(n, torch.Tensor):
        return max(1, math.ceil(fraction * n))
    p, q = fraction.numerator, fraction.denominator
    if (max_n or 1) * p + q >= 2**63:
        raise ValueError(f"alpha = {alpha} has too many decimal digits for an exact rank over {max_n} tokens")
    return ((n.to(torch.int64) * p + (q - 1)) // q).clamp(min=1)


def lower_quantile(values: torch.Tensor, alpha: float, mask: torch.Tensor | None = None) -> torch.Tensor:
    """q = inf{x : (1/n) #{v <= x} >= alpha} = the k-th smallest value, k = ceil(alpha n) (methods.md SAT 2),
    of non-negative ``values`` (over ``values[mask != 0]`` when a mask is given). No value gives 0."""
    check_range("alpha", alpha, 0.0, 1.0, low_open=True)
    values = values.detach()
    if values.numel() == 0:  # a static shape
        return values.new_zeros(())
    q, n = _radix_select(values, lambda count: quantile_rank(alpha, count, values.numel()), mask)
    return torch.where(n > 0, q, 0.0)


def tail_gate(magnitude: torch.Tensor, active: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """SAT's gate (paper Eq. 16) as a mask: the active tokens with |d| > q; none when q = 0."""
    return (magnitude > torch.where(q > 0, q, math.inf)) & active


def sat_gate(magnitude: torch.Tensor, batch: PolicyBatch, alpha: float, scope: str) -> tuple[torch.Tensor, torch.Tensor]:
    """SAT's q = the alpha-quantile of |d| (``magnitude``) over the active tokens of this micro-batch
    ("microbatch", the paper's) or of every data-parallel rank ("global", through batch.reduce: the
    gather of different-size tensors synchronises), and the gate mask (tail_gate)."""
    check_choice("quantile_scope", scope, QUANTILE_SCOPES)
    if scope == "global" and batch.reduce is not None:
        q = lower_quantile(torch.cat(batch.reduce.all_gather(magnitude[batch.active])), alpha)
    else:
        q = lower_quantile(magnitude, alpha, batch.mask)  # the float mask: see _radix_select
    return q, tail_gate(magnitude, batch.active, q)


def hill(u: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """SAT's kernel psi(u; q) = 1 / (1 + (u / q)^2), for q > 0 (paper Eq. 17)."""
    return (u.detach() / q).square_().add_(1.0).reciprocal_()  # stop-gradient; in place: one allocation, not four


def sat_contraction(d: torch.Tensor, q: torch.Tensor, gate: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Paper Eq. 17-18 on the gated tokens: c_plus = psi(max(d, 0); q) and c_minus = psi(max(-d, 0); q),
    so only the side d points to shrinks (the other is psi(0) = 1). Every other token has
    c_plus = c_minus = 1 (psi is computed everywhere, its value off the gate, NaN when q = 0, unused).
    ``gate`` is tail_gate's or a subset of it: |d| > q > 0 on every gated token."""
    d = d.detach()
    shrink = hill(d.abs(), q)
    gated_up = d > 0
    gated_up &= gate
    # a gated token has d != 0: not on the upper side means on the lower one (one comparison fewer)
    return torch.where(gated_up, shrink, 1.0), torch.where(gate ^ gated_up, shrink, 1.0)


def contracted_clip_loss(
    batch: PolicyBatch,
    log_r: torch.Tensor,
    q: torch.Tensor,
    gate: torch.Tensor,
    c_plus: torch.Tensor,
    c_minus: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
    aggregation: str,
    namespace: str = "sat",
) -> LossOutput:
    """The clipped surrogate with per-token bounds 1 - eps_low c_minus, 1 + eps_high c_plus
    (paper Eq. 19-20), plus SAT's diagnostics. Off the gate c = 1 and 1 * eps is exact, so with no
    gated token this is the fixed-clip loss bit for bit."""
    ratio = torch.exp(log_r)
    eps_low_c, eps_high_c = eps_low * c_minus, eps_high * c_plus
    low, high = 1 - eps_low_c, 1 + eps_high_c
    objective = clipped_objective(ratio, batch.advantages, low, high)

    metrics = clip_metrics(ratio, batch, low, high)
    n = batch.active.count_nonzero().clamp(min=1).to(ratio.dtype)
    # the eps means sum over every token (exact zeros off the gate): same value as a sum over the
    # gated tokens alone up to the summation order, i.e. the last bit
    c_min = torch.minimum(c_plus.amin(), c_minus.amin()) if c_plus.numel() else ratio.new_ones(())  # a static shape
    metrics.update({
        f"{namespace}/q": q.detach().clone(),
        f"{namespace}/gate_rate": n.reciprocal() * gate.count_nonzero(),  # as int / tensor computed it
        f"{namespace}/eps_low_mean": eps_low - (eps_low - eps_low_c).sum() / n,
        f"{namespace}/eps_high_mean": eps_high - (eps_high - eps_high_c).sum() / n,
        f"{namespace}/c_min": c_min,
    })
    return LossOutput(aggregate(objective, batch, aggregation), metrics)


def sat_loss(batch: PolicyBatch, log_r: torch.Tensor, *, eps_low: float, eps_high: float, alpha: float,
             quantile_scope: str, enabled: bool, aggregation: str) -> LossOutput:
    """SAT on a per-token log ratio ``log_r`` (the token ratio for SAT-GRPO, the broadcast sequence
    ratio for SAT-GSPO): q from |log_r|, the gate, the contraction and the contracted clip.
    enabled=False gates nothing: the fixed-clip loss bit for bit, with q = 0."""
    magnitude = log_r.detach().abs()
    if enabled:
        q, gate = sat_gate(magnitude, batch, alpha, quantile_scope)
    else:
        q = magnitude.new_zeros(())
        gate = torch.zeros_like(batch.active)
    c_plus, c_minus = sat_contraction(log_r, q, gate)
    out = contracted_clip_loss(batch, log_r, q, gate, c_plus, c_minus,
                               eps_low=eps_low, eps_high=eps_high, aggregation=aggregation)
    out.metrics["sat/scope_global"] = torch.tensor(float(quantile_scope == "global"))
    return out
