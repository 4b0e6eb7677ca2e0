"""FlashREINFORCE (OpenRLHF PR #1339, NVIDIA labs-molt PR #116), as issue 62 summarises those PRs: REINFORCE
on one rollout per prompt with a batch-mean baseline, a trajectory kept only if its mean binary KL between
the trainer and the sampler on its sampled tokens is at most delta = 5e-3. The PRs' code was not read here,
so the conformance test writes this formula independently (docs/stabilizers.md, "Conformance").

    p_t = pi_old(y_t), q_t = mu(y_t)                      (the trainer's recompute and the sampler's; detached)
    D_t = q log(q / p) + (1 - q) log((1 - q) / (1 - p))    (DPPO's binary KL: stabilizers/_trust_region.py)
    keep_i = 1[mean of D_t over response i's active tokens <= delta]
    loss = token-mean of  -keep_i A_t log pi(y_t)          (no importance weight, no clip)

Where the bench differs from the summary, by design (docs/stabilizers.md, "The field since autumn 2026"):
- One rollout per prompt and the batch-mean baseline are the engine's advantage estimator, not the loss. The
  tiny engine samples k responses per prompt and centres each by its group, so the recipe sets
  ``std_normalization: false`` and its baseline is the prompt's mean reward (Dr.GRPO's advantages), not the
  batch's.
- The filter reads the trainer's recompute at the start of the update (pi_old), which is what a trainer has
  when it filters; on an update's first step it is pi. The summary names no direction for the KL: this is
  DPPO's, KL(Bernoulli(mu) || Bernoulli(pi_old)) on the sampled token.
- A dropped response's tokens stay in the token-mean's denominator, the bench's convention for every mask
  (stabilizers/rollout_is.py); a framework that removes the trajectory from the batch divides by the kept
  tokens only, which scales the step and keeps its direction.
With delta infinite nothing is dropped: the `flash_reinforce_unfiltered` recipe, its one-difference control.
"""
from __future__ import annotations

import torch

from ._surrogate import aggregate, masked_mean, sequence_log_ratio
from ._trust_region import binary_kl
from .api import LossOutput, PolicyBatch, ranges, register


@register("flash_reinforce")
@ranges(delta="(0, inf]")
def flash_reinforce(
    batch: PolicyBatch,
    *,
    delta: float = 5e-3,
    aggregation: str = "token_mean",
) -> LossOutput:
    trainer, sampler = batch.old_logp.detach(), batch.rollout_logp.detach()
    # a log-prob a hair above 0 (an engine's rounding) would put 1 - p below 0 and the log at NaN
    divergence = binary_kl(trainer.exp().clamp(max=1.0), sampler.exp().clamp(max=1.0), trainer, sampler)
    mean_divergence = sequence_log_ratio(divergence, batch.mask)  # each response's mean over its active tokens
    keep = mean_divergence <= delta
    objective = torch.where(keep, batch.advantages * batch.logp, 0.0)
    metrics = {
        "flash_reinforce/dropped_frac": masked_mean((~keep).to(divergence.dtype), batch.active),
        "flash_reinforce/kl_mean": masked_mean(divergence, batch.active),
    }
    return LossOutput(aggregate(objective, batch, aggregation), metrics)
