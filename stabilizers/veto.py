"""mu-GRPO's negative-advantage veto, a mask that composes with any loss ("How Off-Policy Can GRPO Be?
mu-GRPO for Efficient LLM Reinforcement Learning", Tian, Xie, Wei; arXiv 2605.17570v1). The paper's
text was not readable here: this follows the authors' project page (BenjaminT2048/mu-grpo-project-page
index.html @373178e, sections "Diagnosis: High Staleness Fails Locally" and "Method", step 3); its
equation numbers are not available.

    r_t   = exp(logp_t - log mu_t)            (the current policy against the stored behaviour log-probs, detached)
    T(y)  = {t : A_t < 0, r_t < threshold}    the trigger tokens of a negative-advantage response
    kappa = the first trigger position of the response
    scope "suffix"             S_kappa(y): every token after kappa ("from the trigger boundary, exclusive, to the end")
          "non_trigger_suffix" H_kappa(y) = S_kappa(y) minus T(y)
          "sequence"           S_seq(y): the whole response once any trigger appears
          "trigger"            T(y) alone (the page's ablation that still collapses)

The vetoed tokens leave the loss mask (the page: the masks "remove" them), so they leave the
denominator too and every statistic the mask decides. "suffix" is the default: the page's method
"vetoes the suffix because the prefix containing the trigger token is no longer supported"; H_kappa
differs from it only on later trigger tokens, whose coefficients the page calls already tiny.
threshold 1e-4 is the page's illustration of a trigger ratio ("< 10^{-4}"), not a value the page
states as the method's setting: the paper's own value was not read. The page pairs the veto with
relaxed clipping [0, 5] (eps_low 1, eps_high 4) against the behaviour policy: the `mu_grpo` recipe.
Not a loss: a recipe's ``veto`` switch applies it, before ``tis`` and ``rollout_is``.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from ._surrogate import masked_mean
from .api import PolicyBatch, ranges


@ranges(threshold="(0, 1]", scope=("suffix", "non_trigger_suffix", "sequence", "trigger"))
def veto_mask(batch: PolicyBatch, *, threshold: float = 1.0e-4,
              scope: str = "suffix") -> tuple[torch.Tensor, dict]:
    """The [B, L] boolean mask of the vetoed active tokens and the diagnostics (namespace ``veto/``)."""
    active = batch.active
    ratio = (batch.logp.detach() - batch.rollout_logp.detach()).exp()
    trigger = active & (batch.advantages < 0) & (ratio < threshold)
    before = trigger.cumsum(-1) - trigger.to(torch.int64)  # triggers strictly before each position
    if scope == "trigger":
        vetoed = trigger
    elif scope == "sequence":
        vetoed = active & trigger.any(-1, keepdim=True)
    else:
        vetoed = active & (before > 0)
        if scope == "non_trigger_suffix":
            vetoed = vetoed & ~trigger
    dtype = batch.logp.dtype
    metrics = {
        "veto/trigger_frac": masked_mean(trigger.to(dtype), active),
        "veto/vetoed_frac": masked_mean(vetoed.to(dtype), active),
        "veto/responses_vetoed": masked_mean(vetoed.any(-1).to(dtype), active.any(-1)),
    }
    return vetoed, metrics


def with_veto(batch: PolicyBatch, **spec) -> tuple[PolicyBatch, dict]:
    """``batch`` without the vetoed tokens in its mask."""
    vetoed, metrics = veto_mask(batch, **spec)
    return replace(batch, mask=torch.where(vetoed, 0, batch.mask)), metrics
