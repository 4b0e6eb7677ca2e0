"""The |d| = |log pi_old - log mu| statistics every engine logs per step (docs/design.md, "The contracts": the run on disk)."""
from __future__ import annotations

import math

import torch

QUANTILES = (0.5, 0.9, 0.99)


def linear_quantiles(values: torch.Tensor, quantiles: tuple[float, ...]) -> list[float]:
    """Linear-interpolation quantiles (numpy's default "linear" method) of a 1-D float64 tensor of
    any size. torch.quantile computes the same but refuses more than 2^24 elements, fewer than one
    Table-1 step holds; this is its computation (sort, rank q (n - 1), lerp between the neighbours)
    without that limit, so results below it are bit-identical. A NaN anywhere gives NaN, as there."""
    ordered = values.sort().values
    if torch.isnan(ordered[-1]):  # sort puts NaN last
        return [math.nan] * len(quantiles)
    ranks = torch.tensor(quantiles, dtype=values.dtype) * (values.numel() - 1)
    below = ranks.floor()
    lower, upper = ordered[below.long()], ordered[ranks.ceil().long()]
    return torch.lerp(lower, upper, ranks - below).tolist()


def abs_d_stats(abs_d: torch.Tensor) -> dict[str, float]:
    """mean |d| and its p50/p90/p99/max over the given active tokens (float64, linear quantiles,
    exact at any size); NaN when there are none."""
    if abs_d.numel() == 0:
        return {f"d/{key}": math.nan for key in ("mean_abs", "p50", "p90", "p99", "max")}
    active = abs_d.double().flatten()
    p50, p90, p99 = linear_quantiles(active, QUANTILES)
    return {"d/mean_abs": float(active.mean()), "d/p50": p50, "d/p90": p90, "d/p99": p99, "d/max": float(active.max())}
