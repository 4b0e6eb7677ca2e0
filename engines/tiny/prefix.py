"""Engine version 3's forward over a batch whose rows come in groups sharing a prefix (a prompt's
samples): the prefix computed once per group, its keys and values repeated for the group's rows, the
rest of each row attending to them (model.KVCache.repeat_rows, the offset causal mask of
model.Attention). The same function as one forward over every row, rounded differently."""
from __future__ import annotations

import torch

from .model import ForwardOutput, KVCache, TinyMoELM


def forward_shared_prefix(model: TinyMoELM, tokens: torch.Tensor, prefix: int, counts: list[int], *,
                          replay: torch.Tensor | None = None) -> ForwardOutput:
    """``model(tokens, replay=replay)`` for rows [B, T] whose first ``prefix`` tokens are equal within
    consecutive groups of ``counts`` rows (a prompt's samples): the prefix is computed once per group
    and its keys and values are repeated for the rest (engine version 3). Under replay the prefix takes
    each group's first row's routing. The outputs cover all B rows and T positions, as model()'s."""
    sizes = torch.tensor(counts)
    firsts = (sizes.cumsum(0) - sizes).tolist()
    cache = KVCache(model.config.layers, model.config.max_positions)
    head = model(tokens[firsts, :prefix], cache=cache, replay=None if replay is None else replay[firsts, :prefix])
    cache.repeat_rows(sizes)
    tail = model(tokens[:, prefix:], cache=cache, replay=None if replay is None else replay[:, prefix:])

    def joined(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.cat([a.repeat_interleave(sizes, 0), b], 1)
    return ForwardOutput(joined(head.logits, tail.logits), joined(head.routing, tail.routing),
                         joined(head.own_routing, tail.own_routing), None)


def forward_rows(model, inputs: torch.Tensor, rows: slice, replay: torch.Tensor | None, plen: int, samples: int):
    """``model``'s forward on ``inputs[rows]`` (replaying ``replay[rows]`` if given). ``samples`` > 1: the rows
    come in groups of that many sharing their first ``plen`` tokens (a prompt's samples, consecutive from row
    0), which are computed once per group (model.forward_shared_prefix: engine version 3); 1: row by row."""
    replayed = None if replay is None else replay[rows]
    if samples == 1:
        return model(inputs[rows], replay=replayed)
    counts = [min(start + samples, rows.stop) - max(start, rows.start)  # each group's rows within ``rows``
              for start in range(rows.start - rows.start % samples, rows.stop, samples)]
    return forward_shared_prefix(model, inputs[rows], plen, counts, replay=replayed)
