"""The rollout engine and the lag schedule.

The engine holds its own copy of the weights in ``rollout_dtype`` (bfloat16 by default, so
mu != pi even at lag 0, like SGLang vs Megatron) and samples with it, recording per token the
full sampling distribution (log mu) and the experts each position was routed to. Weights reach
it only by ``broadcast``, on the schedule of ``sampling_version``.

Versions: version v = the trainer's weights after v optimizer steps (version 0 = the base).
The batch of trainer step s (1-based) is generated while step s - 1 runs, so the trainer, holding
version s - 1, trains on a batch sampled by version ``sampling_version(s)``; realized lag is
(s - 1) - that version.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.grid import LAG_MODES

from . import task
from .model import EOS, ModelConfig, TinyMoELM, decode_response, encode_prompt, generate

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def sampling_version(step: int, lag: int, mode: str) -> int:
    """The policy version that samples the batch of trainer step ``step``.

    interval (the paper's): weights are broadcast after every ``lag``-th step and the next batch
    is generated during the current step, so the engine holds version lag * floor((step - 2) / lag)
    and realized lag cycles 1..lag. constant: exactly ``lag`` versions old, step - 1 - lag.
    Both are clamped at version 0 (the first batches can only come from the base model).
    """
    if mode == "interval":
        return 0 if step < 2 else lag * ((step - 2) // lag)
    if mode == "constant":
        return max(0, step - 1 - lag)
    raise ValueError(f"lag_mode must be one of {list(LAG_MODES)}, got {mode!r}")


@dataclass
class Rollout:
    """One sampled batch: responses to ``prompts_per_step`` prompts, ``samples_per_step`` each,
    grouped by prompt (rows p * samples ... (p + 1) * samples - 1 share prompt p)."""

    step: int  # the trainer step that will train on it
    version: int  # the policy version that sampled it
    tokens: torch.Tensor  # [B, P + N] long
    logmu_full: torch.Tensor  # [B, N, V] float32: log of the engine's sampling distribution
    routing: torch.Tensor  # [B, P + N - 1, layers, k] long: experts the engine used
    logp_sampler: torch.Tensor  # [B, N] float32: the float32 policy of ``version`` on the sampled tokens
    mask: torch.Tensor  # [B, N] float32: 1 up to and including the first <eos>
    rewards: torch.Tensor  # [B] float32
    exact: torch.Tensor  # [B] float32, 1 = exact match

    TENSORS = ("tokens", "logmu_full", "routing", "logp_sampler", "mask", "rewards", "exact")

    def tensors(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in self.TENSORS}


def response_mask(response: torch.Tensor) -> torch.Tensor:
    """1 for tokens up to and including the first <eos>; what follows it is never read."""
    after_eos = (response == EOS).long().cumsum(-1) - (response == EOS).long()
    return (after_eos == 0).float()


class RolloutEngine:
    def __init__(self, config: ModelConfig, dtype: str, temperature: float):
        self.model = TinyMoELM(config).to(DTYPES[dtype]).eval()
        self.sampler_fp32 = TinyMoELM(config).eval()  # the same version in float32: pi_l
        self.temperature = temperature
        self.version: int | None = None

    def broadcast(self, state: dict[str, torch.Tensor], version: int) -> None:
        """Receive trainer weights (cast to the engine's dtype by copy)."""
        self.model.load_state_dict(state)
        self.sampler_fp32.load_state_dict(state)
        self.version = version

    @torch.no_grad()
    def rollout(self, step: int, problems: list[dict], samples: int, reward: str, seed: int) -> Rollout:
        prompts = torch.tensor([encode_prompt(p["prompt"]) for p in problems]).repeat_interleave(samples, 0)
        answers = [p["answer"] for p in problems for _ in range(samples)]
        generator = torch.Generator().manual_seed(seed)
        out = generate(self.model, prompts, task.DIGITS + 1, temperature=self.temperature, top_p=1.0,
                       generator=generator)
        plen = prompts.shape[1]
        response = out.tokens[:, plen:]
        texts = [decode_response(row) for row in response.tolist()]
        exact = torch.tensor([float(task.is_correct(t, a)) for t, a in zip(texts, answers)])
        rewards = exact if reward == "exact" else torch.tensor(
            [task.partial_credit(t, a) for t, a in zip(texts, answers)])
        logits = self.sampler_fp32(out.tokens[:, :-1]).logits[:, plen - 1:] / self.temperature
        logp_sampler = logits.log_softmax(-1).gather(-1, response[..., None])[..., 0]
        return Rollout(step, self.version, out.tokens, out.logp_full.float(), out.routing, logp_sampler,
                       response_mask(response), rewards.float(), exact)
