"""A tiny decoder-only language model whose feed-forward block is a mixture of experts.

Pre-LayerNorm transformer: token + position embeddings, ``layers`` blocks of causal
self-attention and an MoE FFN (``experts`` GELU MLPs, a linear router picking ``top_k`` of
them per token), a final LayerNorm and an untied output head. The vocabulary is the ten
digits plus ``<bos>``, ``=`` (end of prompt) and ``<eos>`` (end of answer).

Routing can be replayed (R3, Ma et al. 2025 "rollout routing replay"): the forward then uses
the given experts instead of its own top-k, with gates = softmax of its own router logits over
the replayed experts, so gradients still reach the router.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = [str(d) for d in range(10)] + ["<bos>", "=", "<eos>"]
TOKEN_ID = {token: i for i, token in enumerate(VOCAB)}
BOS, SEP, EOS = TOKEN_ID["<bos>"], TOKEN_ID["="], TOKEN_ID["<eos>"]


@dataclass(frozen=True)
class ModelConfig:
    width: int = 64
    layers: int = 2
    heads: int = 4
    experts: int = 4
    top_k: int = 1
    expert_hidden: int = 128
    max_positions: int = 32
    vocab: int = len(VOCAB)

    def __post_init__(self):
        for name, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"model config {name} must be a positive integer, got {value!r}")
        if self.width % self.heads:
            raise ValueError(f"width ({self.width}) must be divisible by heads ({self.heads})")
        if self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) must be <= experts ({self.experts})")
        if self.vocab != len(VOCAB):
            raise ValueError(f"vocab must be {len(VOCAB)} (the digit-sort vocabulary), got {self.vocab}")


def encode_prompt(prompt: str) -> list[int]:
    """"3 1 4" -> [<bos>, 3, 1, 4, =]; anything but space-separated digits is refused."""
    digits = prompt.split()
    bad = [d for d in digits if d not in TOKEN_ID or not d.isdigit()]
    if bad or not digits:
        raise ValueError(f"prompt must be space-separated digits, got {prompt!r}")
    return [BOS] + [TOKEN_ID[d] for d in digits] + [SEP]


def decode_response(tokens: list[int]) -> str:
    """Digits up to the first <eos>, space-separated; other special tokens are kept as text
    so a malformed response never matches an answer."""
    out = []
    for token in tokens:
        if token == EOS:
            break
        out.append(VOCAB[token])
    return " ".join(out)


class KVCache:
    """Per-layer keys and values of the positions processed so far (incremental decoding), written
    into buffers sized for the model's whole context on first use: a step appends in place instead
    of copying the cache (what torch.cat would do), and attention reads a view of the filled part."""

    def __init__(self, layers: int, max_positions: int):
        self.keys: list[torch.Tensor | None] = [None] * layers
        self.values: list[torch.Tensor | None] = [None] * layers
        self.max_positions = max_positions
        self.length = 0

    def extend(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.keys[layer] is None:
            batch, heads, _, head_width = k.shape
            self.keys[layer] = k.new_empty(batch, heads, self.max_positions, head_width)
            self.values[layer] = v.new_empty(batch, heads, self.max_positions, head_width)
        end = self.length + k.shape[2]
        self.keys[layer][:, :, self.length:end] = k
        self.values[layer][:, :, self.length:end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def repeat_rows(self, counts: torch.Tensor) -> None:
        """Row i becomes counts[i] rows (a shared prefix, computed once, handed to each of its continuations)."""
        self.keys = [None if k is None else k.repeat_interleave(counts, 0) for k in self.keys]
        self.values = [None if v is None else v.repeat_interleave(counts, 0) for v in self.values]


class Attention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.heads = config.heads
        self.qkv = nn.Linear(config.width, 3 * config.width)
        self.out = nn.Linear(config.width, config.width)

    def forward(self, x: torch.Tensor, cache: KVCache | None, layer: int) -> torch.Tensor:
        b, t, w = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        # With a cache, the new positions attend to every cached one plus themselves causally;
        # the engine feeds either a whole prompt into an empty cache or one token at a time.
        causal = cache is None or cache.length == 0
        if cache is not None:
            k, v = cache.extend(layer, k, v)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal and t > 1)
        return self.out(y.transpose(1, 2).reshape(b, t, w))


class MoE(nn.Module):
    """``experts`` GELU MLPs; a linear router picks ``top_k`` per token.

    Gates: top_k = 1 uses the chosen expert's full-softmax probability (Switch Transformer,
    Fedus et al. 2022) so the router gets a gradient; top_k > 1 uses the softmax of the router
    logits over the chosen experts (Mixtral). Under replay the chosen experts are the given ones.
    """

    grouped = False  # one grouped matmul per weight over all experts (engine version 3: use_grouped_experts)

    def __init__(self, config: ModelConfig):
        super().__init__()
        e, w, h = config.experts, config.width, config.expert_hidden
        self.top_k = config.top_k
        self.router = nn.Linear(w, e, bias=False)
        self.w1 = nn.Parameter(torch.randn(e, w, h) * w ** -0.5)
        self.b1 = nn.Parameter(torch.zeros(e, h))
        self.w2 = nn.Parameter(torch.randn(e, h, w) * h ** -0.5)
        self.b2 = nn.Parameter(torch.zeros(e, w))

    def forward(self, x: torch.Tensor, replay: torch.Tensor | None, balance: bool = False):
        """x [B, T, W]; replay [B, T, k] expert ids or None.
        Returns (output, used experts [B, T, k], own top-k [B, T, k], the load-balancing loss when
        ``balance`` is set, else None)."""
        b, t, w = x.shape
        flat = x.reshape(-1, w)
        logits = self.router(flat)
        own = logits.topk(self.top_k, dim=-1).indices
        chosen = own if replay is None else replay.reshape(-1, self.top_k)
        if self.top_k == 1:
            gates = logits.softmax(-1).gather(-1, chosen)
        else:
            gates = logits.gather(-1, chosen).softmax(-1)
        # The (token, slot) pairs grouped by expert: a stable sort keeps each expert's tokens in order, so
        # every expert multiplies one contiguous block of rows, and the outputs are summed into their
        # tokens in expert order (one index_add_): few ops per call, which is what a small MoE costs.
        experts = chosen.reshape(-1)
        order = experts.argsort(stable=True)
        tokens = order if self.top_k == 1 else order // self.top_k  # one slot per token: no division
        if self.grouped:  # the expert blocks' ends as a tensor: no host sync, no loop over experts
            ends = torch.bincount(experts, minlength=self.w1.shape[0]).cumsum(0).to(torch.int32)
            by_expert = experts[order]
            hidden = F.gelu(F.grouped_mm(flat[tokens], self.w1, offs=ends) + self.b1[by_expert])
            outputs = F.grouped_mm(hidden, self.w2, offs=ends) + self.b2[by_expert]
        else:
            blocks = flat[tokens].split(torch.bincount(experts, minlength=self.w1.shape[0]).tolist())
            # one unbind per weight instead of a select per expert and weight: the same views, fewer ops (and
            # one stack in the backward instead of a zero-filled select_backward per expert, summed)
            outputs = torch.cat([F.gelu(rows @ w1 + b1) @ w2 + b2 for rows, w1, b1, w2, b2
                                 in zip(blocks, self.w1.unbind(), self.b1.unbind(), self.w2.unbind(), self.b2.unbind())])
        out = torch.zeros_like(flat).index_add_(0, tokens, gates.reshape(-1)[order, None] * outputs)
        loss = None
        if balance:  # Switch: experts x sum_e (fraction routed to e) x (mean router prob of e)
            fraction = F.one_hot(own[:, 0], self.w1.shape[0]).to(flat.dtype).mean(0)
            loss = self.w1.shape[0] * (fraction * logits.softmax(-1).mean(0)).sum()
        return (out.view(b, t, w), chosen.view(b, t, self.top_k), own.view(b, t, self.top_k), loss)


def use_grouped_experts(model: TinyMoELM) -> TinyMoELM:
    """Engine version 3's MoE: each expert weight multiplied by one F.grouped_mm over all experts' blocks
    (the per-expert loop's values on the kernels measured, benchmarks/README.md)."""
    for block in model.blocks:
        block.moe.grouped = True
    return model


class Block(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.width)
        self.attn = Attention(config)
        self.ln2 = nn.LayerNorm(config.width)
        self.moe = MoE(config)


@dataclass
class ForwardOutput:
    logits: torch.Tensor  # [B, T, V]
    routing: torch.Tensor  # experts used, [B, T, layers, k]
    own_routing: torch.Tensor  # the model's own top-k, [B, T, layers, k] (== routing without replay)
    balance_loss: torch.Tensor | None  # mean over layers of the Switch load-balancing loss (if asked for)


class TinyMoELM(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab, config.width)
        self.position = nn.Embedding(config.max_positions, config.width)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.ln_f = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, config.vocab)

    def forward(self, tokens: torch.Tensor, *, cache: KVCache | None = None,
                replay: torch.Tensor | None = None, balance: bool = False) -> ForwardOutput:
        """tokens [B, T]; cache for incremental decoding; replay [B, T, layers, k] routing (R3);
        balance: also the load-balancing loss (the warm start trains with it; RL and sampling never read it)."""
        start = 0 if cache is None else cache.length
        if start + tokens.shape[1] > self.config.max_positions:
            raise ValueError(f"sequence of {start + tokens.shape[1]} tokens exceeds max_positions "
                             f"{self.config.max_positions}")
        positions = torch.arange(start, start + tokens.shape[1])
        x = self.embed(tokens) + self.position(positions)
        used, own, balances = [], [], []
        for layer, block in enumerate(self.blocks):
            x = x + block.attn(block.ln1(x), cache, layer)
            moe_out, chosen, top, bal = block.moe(block.ln2(x), None if replay is None else replay[:, :, layer], balance)
            x = x + moe_out
            used.append(chosen)
            own.append(top)
            balances.append(bal)
        if cache is not None:
            cache.length += tokens.shape[1]
        return ForwardOutput(self.head(self.ln_f(x)), torch.stack(used, 2), torch.stack(own, 2),
                             torch.stack(balances).mean() if balance else None)


def nucleus(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Sampling probabilities: softmax(logits / T) restricted to the smallest top-p set, renormalised."""
    probs = (logits.float() / temperature).softmax(-1)
    if top_p >= 1.0:
        return probs
    sorted_probs, order = probs.sort(-1, descending=True)
    keep = sorted_probs.cumsum(-1) - sorted_probs < top_p  # the top token is always kept
    sorted_probs = sorted_probs * keep
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return kept / kept.sum(-1, keepdim=True)


@dataclass
class Samples:
    """What a generation call produced for a batch of prompts of equal length."""

    tokens: torch.Tensor  # [B, P + N] prompt then generated tokens
    logp_full: torch.Tensor  # [B, N, V] float32 log-probs of the sampling distribution per step
    routing: torch.Tensor  # [B, P + N - 1, layers, k] experts used at every position fed forward


@torch.no_grad()
def generate(model: TinyMoELM, prompts: torch.Tensor, new_tokens: int, *, temperature: float,
             top_p: float, generator: torch.Generator, stop_at_eos: bool = False, repeats: int = 1) -> Samples:
    """Sample ``new_tokens`` tokens after ``prompts`` [B, P] with a KV cache (each position is
    computed once, so the recorded routing is the routing that produced each sampled token).
    temperature == 0 is greedy. With ``stop_at_eos`` generation ends early once every row has
    produced <eos> (what follows an <eos> is never read). ``repeats`` > 1: each prompt is sampled
    that many times (rows i * repeats ... (i + 1) * repeats - 1), its forward computed once and its
    cache repeated (engine version 3); 1: every row computed as given (versions 1 and 2).
    The outputs are written into buffers sized for the whole generation (no list of steps joined)."""
    if temperature < 0 or not 0 < top_p <= 1 or new_tokens < 1:
        raise ValueError(f"need temperature >= 0, 0 < top_p <= 1 and new_tokens >= 1, got {temperature}, {top_p}, "
                         f"{new_tokens}")
    cache = KVCache(model.config.layers, model.config.max_positions)
    out = model(prompts, cache=cache)
    logits, prompt_routing = out.logits[:, -1], out.routing
    if repeats > 1:
        cache.repeat_rows(torch.tensor(repeats))
        prompts, logits, prompt_routing = (x.repeat_interleave(repeats, 0) for x in (prompts, logits, prompt_routing))
    rows, plen = prompts.shape
    tokens = torch.empty(rows, plen + new_tokens, dtype=prompts.dtype)
    tokens[:, :plen] = prompts
    logps = torch.empty(rows, new_tokens, model.config.vocab)
    routing = torch.empty(rows, plen + new_tokens - 1, model.config.layers, model.config.top_k, dtype=torch.long)
    routing[:, :plen] = prompt_routing
    done = torch.zeros(rows, dtype=torch.bool)
    for step in range(new_tokens):
        last = logits.float()
        logp = last.log_softmax(-1) if temperature == 0 else nucleus(last, temperature, top_p).log()
        logps[:, step] = logp
        if temperature == 0:
            token = last.argmax(-1, keepdim=True)
        else:
            token = torch.multinomial(logp.exp(), 1, generator=generator)
        tokens[:, plen + step] = token[:, 0]
        if stop_at_eos:
            done |= token[:, 0] == EOS
        if step == new_tokens - 1 or (stop_at_eos and bool(done.all())):
            break
        out = model(token, cache=cache)
        logits = out.logits[:, -1]
        routing[:, plen + step] = out.routing[:, 0]
    end = plen + step + 1
    return Samples(tokens[:, :end], logps[:, :step + 1], routing[:, :end - 1])


class TinyPolicy:
    """A loaded tiny model that answers digit-sort prompts (the evaluation interface)."""

    def __init__(self, model: TinyMoELM):
        self.model = model.eval()
        self.config = model.config

    def generate_text(self, prompts: list[str], *, temperature: float = 1.0, top_p: float = 1.0,
                      max_new_tokens: int, seed: int) -> list[str]:
        """Batched completions, deterministic for a seed, greedy when temperature == 0.
        Generation stops at <eos> or when the model's context (max_positions) is full."""
        if not prompts:
            return []
        encoded = [encode_prompt(p) for p in prompts]
        out: list[str] = [""] * len(prompts)
        generator = torch.Generator().manual_seed(int(seed))
        # Prompts of equal length are generated together (no padding is ever needed).
        for length in sorted({len(e) for e in encoded}):
            rows = [i for i, e in enumerate(encoded) if len(e) == length]
            budget = min(int(max_new_tokens), self.config.max_positions - length)
            if budget < 1:
                continue
            with torch.inference_mode():  # nothing here reaches autograd: the lighter mode of no_grad
                samples = generate(self.model, torch.tensor([encoded[i] for i in rows]), budget,
                                   temperature=temperature, top_p=top_p, generator=generator, stop_at_eos=True)
            for row, i in enumerate(rows):
                out[i] = decode_response(samples.tokens[row, length:].tolist())
        return out
