"""The |d| = |log pi_old - log mu| statistics every engine logs per step (shared/DESIGN.md, "A run on disk")."""
from __future__ import annotations

import math

import torch

QUANTILES = (0.5, 0.9, 0.99)


def abs_d_stats(abs_d: torch.Tensor) -> dict[str, float]:
    """mean |d| and its p50/p90/p99/max over the given active tokens (float64, linear quantiles);
    NaN when there are none."""
    if abs_d.numel() == 0:
        return {f"d/{key}": math.nan for key in ("mean_abs", "p50", "p90", "p99", "max")}
    active = abs_d.double()
    p50, p90, p99 = torch.quantile(active, torch.tensor(QUANTILES, dtype=torch.float64)).tolist()
    return {"d/mean_abs": float(active.mean()), "d/p50": p50, "d/p90": p90, "d/p99": p99, "d/max": float(active.max())}
