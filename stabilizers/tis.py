"""TIS: truncated importance sampling weight, composed with any loss (Yao et al. 2025; methods.md "TIS").

w = min(exp(old_logp - log mu), cap), optionally max(w, floor); the per-token objective is
multiplied by sg(w) before aggregation. It corrects the trainer-vs-engine mismatch. slime's
default cap is 2.0 (the paper does not state it). Not a loss: a recipe's `tis` switch applies it.
"""
from __future__ import annotations

import torch

from ._surrogate import masked_mean
from .api import PolicyBatch, ranges


@ranges(cap="(0, inf)", floor="[0, cap] or None")
def tis_weight(batch: PolicyBatch, *, cap: float = 2.0, floor: float | None = None) -> tuple[torch.Tensor, dict]:
    raw = torch.exp(batch.old_logp.detach() - batch.rollout_logp.detach())
    weight = raw.clamp(max=cap)
    if floor is not None:
        weight = weight.clamp(min=floor)
    metrics = {
        "tis/weight_mean": masked_mean(weight, batch.active),
        "tis/frac_capped": masked_mean((raw > cap).to(weight.dtype), batch.active),
    }
    return weight, metrics


def with_tis(batch: PolicyBatch, *, cap: float = 2.0, floor: float | None = None) -> tuple[PolicyBatch, dict]:
    weight, metrics = tis_weight(batch, cap=cap, floor=floor)
    return batch.with_token_weight(weight), metrics
