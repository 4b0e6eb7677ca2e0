"""Engine version 3's forward over a batch whose rows come in groups sharing a prefix (a prompt's
samples): the prefix computed once per group, its keys and values repeated for the group's rows, the
rest of each row attending to them. The same function as one forward over every row (model.TinyMoELM),
rounded differently."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .model import ForwardOutput, TinyMoELM


def forward_shared_prefix(model: TinyMoELM, tokens: torch.Tensor, prefix: int, counts: list[int], *,
                          replay: torch.Tensor | None = None) -> ForwardOutput:
    """``model(tokens, replay=replay)`` for rows [B, T] whose first ``prefix`` tokens are equal within
    consecutive groups of ``counts`` rows (a prompt's samples), each group's prefix computed once (engine
    version 3). One pass over the tokens: the groups' prefixes, then every row's suffix, in one flat axis
    for every per-token op (so each op runs once, not once per part); attention apart for the two parts,
    a suffix attending to its group's prefix keys and values (repeated) and causally to its own. Under
    replay the prefix takes each group's first row's routing. The outputs cover all B rows and T
    positions, as model()'s."""
    sizes = torch.tensor(counts)
    firsts = (sizes.cumsum(0) - sizes).tolist()
    groups, rows, suffix = len(counts), tokens.shape[0], tokens.shape[1] - prefix
    heads, width = model.config.heads, model.config.width
    cut = groups * prefix  # where the suffixes start in the flat token axis
    ids = torch.cat([tokens[firsts, :prefix].reshape(-1), tokens[:, prefix:].reshape(-1)])
    positions = torch.cat([torch.arange(prefix).repeat(groups), torch.arange(prefix, prefix + suffix).repeat(rows)])
    x = model.embed(ids) + model.position(positions)
    if replay is not None:
        replay = torch.cat([replay[firsts, :prefix].flatten(0, 1), replay[:, prefix:].flatten(0, 1)])
    mask = torch.ones(suffix, prefix + suffix, dtype=torch.bool).tril(prefix)  # a suffix's keys: prefix, causal self
    used, own = [], []
    for layer, block in enumerate(model.blocks):
        qkv = block.attn.qkv(block.ln1(x))  # as Attention.forward, per part
        hq, hk, hv = qkv[:cut].view(groups, prefix, 3, heads, -1).permute(2, 0, 3, 1, 4)
        tq, tk, tv = qkv[cut:].view(rows, suffix, 3, heads, -1).permute(2, 0, 3, 1, 4)
        head = F.scaled_dot_product_attention(hq, hk, hv, is_causal=True)
        tail = F.scaled_dot_product_attention(tq, torch.cat([hk.repeat_interleave(sizes, 0), tk], 2),
                                              torch.cat([hv.repeat_interleave(sizes, 0), tv], 2), attn_mask=mask)
        x = x + block.attn.out(torch.cat([head.transpose(1, 2).reshape(cut, width),
                                          tail.transpose(1, 2).reshape(-1, width)]))
        out, chosen, top, _ = block.moe(block.ln2(x)[None], None if replay is None else replay[None, :, layer])
        x = x + out[0]
        used.append(chosen[0])
        own.append(top[0])
    logits = model.head(model.ln_f(x))

    def by_row(flat: torch.Tensor) -> torch.Tensor:  # [tokens, ...] -> [B, T, ...]
        return torch.cat([flat[:cut].unflatten(0, (groups, prefix)).repeat_interleave(sizes, 0),
                          flat[cut:].unflatten(0, (rows, suffix))], 1)
    return ForwardOutput(by_row(logits), by_row(torch.stack(used, 1)), by_row(torch.stack(own, 1)), None)


def forward_rows(model, inputs: torch.Tensor, rows: slice, replay: torch.Tensor | None, plen: int, samples: int):
    """``model``'s forward on ``inputs[rows]`` (replaying ``replay[rows]`` if given). ``samples`` > 1: the rows
    come in groups of that many sharing their first ``plen`` tokens (a prompt's samples, consecutive from row
    0), which are computed once per group (forward_shared_prefix: engine version 3); 1: row by row."""
    replayed = None if replay is None else replay[rows]
    if samples == 1:
        return model(inputs[rows], replay=replayed)
    counts = [min(start + samples, rows.stop) - max(start, rows.start)  # each group's rows within ``rows``
              for start in range(rows.start - rows.start % samples, rows.stop, samples)]
    return forward_shared_prefix(model, inputs[rows], plen, counts, replay=replayed)
