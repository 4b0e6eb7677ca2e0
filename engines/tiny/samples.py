"""Sampled completions kept for a person to read (issue 65): at each evaluation step, the first response to each of
the first PROMPTS prompts of the step's training batch, with its reward, its length and the behaviour/target
log-ratio the loss saw (log mu - log pi_old summed over the response's tokens), appended to the run folder's
samples file (harness.run.RunDir.samples_path, tracking logs it as an MLflow table). An output, not an input: it
only reads the step's tensors (no random draw, no parameter), so a run's numbers and its run key are the same with or
without it; at most PROMPTS rows per evaluation step (a few KB per run). A step redone after a resume replaces its
rows."""
from __future__ import annotations

import torch

from harness.run import RunDir

from .model import VOCAB, decode_response

PROMPTS = 4  # prompts kept per evaluation step


def sample_rows(batch, old_logp: torch.Tensor, logmu: torch.Tensor, samples_per_prompt: int) -> list[dict]:
    """The kept rows of ``batch`` (engines.tiny.rollout.Rollout) at its step; ``old_logp``, ``logmu``: [B, N] the
    target's and the behaviour's log-probabilities of the sampled tokens."""
    plen = batch.tokens.shape[1] - batch.mask.shape[1]
    rows = range(0, min(PROMPTS * samples_per_prompt, batch.tokens.shape[0]), samples_per_prompt)
    log_ratio = ((logmu - old_logp) * batch.mask).sum(-1)
    return [{"step": batch.step, "policy_version": batch.version, "prompt": " ".join(
                VOCAB[t] for t in batch.tokens[row, :plen].tolist() if VOCAB[t].isdigit()),
             "completion": decode_response(batch.tokens[row, plen:].tolist()),
             # 6 digits: a table a person reads (float32 values printed in full read 0.8333333134651184)
             "reward": round(float(batch.rewards[row]), 6), "length": int(batch.mask[row].sum()),
             "log_ratio_behaviour_target": round(float(log_ratio[row]), 6)} for row in rows]


def keep_samples(run: RunDir, rows: list[dict]) -> None:
    """Append ``rows`` (one step's) to the run's samples file, replacing that step's and later rows a resumed run
    wrote before it was cut back."""
    step = rows[0]["step"]
    run.write_samples([row for row in run.read_samples() if row["step"] < step] + rows)
