"""The rollout engine.

The engine holds its own copy of the weights in ``rollout_dtype`` (bfloat16 by default, so
mu != pi even at lag 0, like SGLang vs Megatron; float16 for the FP16 rollouts of arXiv
2510.26788; ``bfloat16_emulated``: the bf16 engine's arithmetic in float32 with bf16 rounding,
rollout_bf16.py, for CPUs without fast bf16 matmuls) and samples with it, recording per token
the full sampling distribution (log mu) and the experts each position was routed to. Weights
reach it only by ``broadcast``, on the lag schedule of harness.lag.sampling_version (versions and
realized lag are defined there).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from stabilizers import SamplerDistribution

from . import task
from .model import EOS, ModelConfig, TinyMoELM, decode_response, encode_prompt, generate, use_grouped_experts
from .rollout_bf16 import EmulatedBF16LM

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
EMULATED = "bfloat16_emulated"  # bf16 rounding in float32 arithmetic (rollout_bf16.py)


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
    # (empty where the pass was skipped: RolloutEngine.rollout's sampler_pass)
    mask: torch.Tensor  # [B, N] float32: 1 up to and including the first <eos>
    rewards: torch.Tensor  # [B] float32
    exact: torch.Tensor  # [B] float32, 1 = exact match
    group_versions: tuple[int, ...] | None = None  # lag_mode queue: the version of each group (prompt)

    TENSORS = ("tokens", "logmu_full", "routing", "logp_sampler", "mask", "rewards", "exact")

    def tensors(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in self.TENSORS}

    def sampler(self, needs, rows: slice, logp_full: torch.Tensor) -> SamplerDistribution | None:
        """What a loss reads of the sampler on ``rows`` (``needs``: stabilizers.loss_needs), from the
        recorded log mu over the vocabulary and the minibatch's log pi; None for a loss that reads
        none, so that no other loss holds a [B, L, V] tensor past the gather."""
        if not needs:
            return None
        logq, full = self.logmu_full[rows], "sampler_logp" in needs
        return SamplerDistribution(logq=logq if full else None, logp=logp_full if full else None,
                                   entropy=torch.special.entr(logq.exp()).sum(-1) if "sampler_entropy" in needs
                                   else None)


def fast_bf16_matmuls() -> bool:
    """Whether this process multiplies bf16 matrices at speed: torch's AVX512 kernels and oneDNN's bf16
    path (provenance.json's cpu_capability and onednn_bf16). An AVX2-only CPU has neither, and there
    torch's generic bf16 gemm is 12-190x slower than float32 (issue 48); on an AVX512 box both are
    lowered by ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2."""
    return torch.backends.cpu.get_cpu_capability().startswith("AVX512") and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def response_mask(response: torch.Tensor) -> torch.Tensor:
    """1 for tokens up to and including the first <eos>; what follows it is never read."""
    after_eos = (response == EOS).long().cumsum(-1) - (response == EOS).long()
    return (after_eos == 0).float()


class RolloutEngine:
    def __init__(self, config: ModelConfig, dtype: str, temperature: float, arithmetic: int = 1):
        """``arithmetic``: the engine's arithmetic version (params.py). Versions 2 and 3 sample a bfloat16 rollout with
        whichever arithmetic is fastest on this CPU: bf16 kernels where they are fast (fast_bf16_matmuls),
        else the bf16 engine's arithmetic in float32 (rollout_bf16.py: no bf16 matmul, the same mismatch,
        benchmarks/bench_rollout_mismatch.py). Deterministic per machine, not across kernel levels."""
        self.emulated = dtype == EMULATED or (arithmetic >= 2 and dtype == "bfloat16" and not fast_bf16_matmuls())
        # arithmetic 3: a prompt's forward once for all its samples (model.generate's repeats), grouped experts
        self.shared_prompts = arithmetic >= 3
        self.model = (EmulatedBF16LM(config) if self.emulated else TinyMoELM(config).to(DTYPES[dtype])).eval()
        self.sampler_fp32 = TinyMoELM(config).eval()  # the same weights in float32: pi_l
        if self.shared_prompts:
            use_grouped_experts(self.model), use_grouped_experts(self.sampler_fp32)
        self.temperature = temperature
        self.version: int | None = None  # the policy version of the weights it holds

    def broadcast(self, state: dict[str, torch.Tensor], version: int) -> None:
        """Receive trainer weights (cast to the engine's dtype by copy; rounded to bf16 if emulated)."""
        if self.emulated:
            self.model.load_rounded(state)
        else:
            self.model.load_state_dict(state)
        self.sampler_fp32.load_state_dict(state)
        self.version = version

    @torch.no_grad()
    def rollout(self, step: int, problems: list[dict], samples: int, reward: str, seed: int,
                sampler_pass: bool = True) -> Rollout:
        """``sampler_pass``: also the float32 pass of the engine's version (logp_sampler, which only
        d/lag_mean_abs and d/impl_mean_abs read); without it logp_sampler is empty (arithmetic version 2
        skips it for the rows that do not report them)."""
        prompts = torch.tensor([encode_prompt(p["prompt"]) for p in problems])
        answers = [p["answer"] for p in problems for _ in range(samples)]
        generator = torch.Generator().manual_seed(seed)
        repeats = samples if self.shared_prompts else 1
        out = generate(self.model, prompts.repeat_interleave(samples // repeats, 0), task.DIGITS + 1,
                       temperature=self.temperature, top_p=1.0, generator=generator, repeats=repeats)
        plen = prompts.shape[1]
        response = out.tokens[:, plen:]
        texts = [decode_response(row) for row in response.tolist()]
        exact = torch.tensor([float(task.is_correct(t, a)) for t, a in zip(texts, answers)])
        rewards = exact if reward == "exact" else torch.tensor(
            [task.partial_credit(t, a) for t, a in zip(texts, answers)])
        logp_sampler = torch.empty(0)
        if sampler_pass:
            logits = self.sampler_fp32(out.tokens[:, :-1]).logits[:, plen - 1:] / self.temperature
            logp_sampler = logits.log_softmax(-1).gather(-1, response[..., None])[..., 0]
        return Rollout(step, self.version, out.tokens, out.logp_full.float(), out.routing, logp_sampler,
                       response_mask(response), rewards.float(), exact)
