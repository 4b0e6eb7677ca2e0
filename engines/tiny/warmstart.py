"""The base model: a short supervised warm start on the digit-sort train split.

    python -m engines.prepare --engine tiny --engine-params-json '{"preset": "demo"}' --out results/<grid>/base

Cached: when --out already holds a base made from the same model and warm-start knobs, nothing
is done. The base is shared by every RL run of a grid (the run config's base_model, under the grid folder).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from harness.run_config import RunConfig

from . import task
from .checkpoint import read_config, save_checkpoint
from .model import EOS, TOKEN_ID, ModelConfig, TinyMoELM, TinyPolicy, encode_prompt
from .params import model_knobs, resolve_engine_params, warmstart_knobs

BALANCE_COEF = 0.01  # Switch-style load balancing keeps all experts in use during the warm start


def encode_pairs(problems: list[dict]) -> torch.Tensor:
    """[B, P + answer + 1]: prompt, answer digits, <eos>."""
    return torch.tensor([encode_prompt(p["prompt"]) + [TOKEN_ID[d] for d in p["answer"].split()] + [EOS]
                         for p in problems])


def exact_match(model: TinyMoELM, split: str = "validation", n: int = 256) -> float:
    probs = task.problems(split, n, seed=0)
    answers = TinyPolicy(model).generate_text([p["prompt"] for p in probs], temperature=0.0,
                                              max_new_tokens=task.DIGITS + 1, seed=0)
    return sum(task.is_correct(a, p["answer"]) for a, p in zip(answers, probs)) / n


def train_base(params: dict) -> TinyMoELM:
    """``warmstart_steps`` AdamW steps of next-token loss on the answer tokens."""
    torch.manual_seed(params["warmstart_seed"])
    model = TinyMoELM(ModelConfig(**model_knobs(params)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=params["warmstart_lr"])
    prompt_len = task.DIGITS + 2
    for step in range(params["warmstart_steps"]):
        batch = encode_pairs(task.problems("train", params["warmstart_batch"],
                                           seed=params["warmstart_seed"] * 1_000_003 + step))
        out = model(batch[:, :-1], balance=True)
        logits = out.logits[:, prompt_len - 1:]
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, prompt_len:].reshape(-1))
        optimizer.zero_grad()
        (loss + BALANCE_COEF * out.balance_loss).backward()
        optimizer.step()
    return model


def is_cached(out: Path, params: dict) -> bool:
    try:
        return read_config(out).get("warmstart") == warmstart_knobs(params)
    except (FileNotFoundError, ValueError):
        return False


def build_base(engine_params: dict, out: str | Path) -> dict:
    """Make (or reuse) the base model in ``out``; returns its config.json contents."""
    out = Path(out)
    params = resolve_engine_params(engine_params)
    if is_cached(out, params):
        print(f"warmstart: {out} already holds this base model; nothing to do", file=sys.stderr)
        return read_config(out)
    if (out / "config.json").exists():
        print(f"warmstart: {out} holds a base made with other knobs; rebuilding it", file=sys.stderr)
    torch.set_num_threads(1)
    start = time.perf_counter()
    model = train_base(params)
    seconds = time.perf_counter() - start
    score = exact_match(model)
    save_checkpoint(model, out, extra={"warmstart": warmstart_knobs(params),
                                       "validation_greedy_exact_match": score,
                                       "train_seconds": round(seconds, 2)})
    print(f"warmstart: {params['warmstart_steps']} steps in {seconds:.1f}s, greedy exact match "
          f"{score:.3f} on 256 validation problems -> {out}", file=sys.stderr)
    return read_config(out)


def check_base_model(run_config: RunConfig) -> None:
    """The grid's warm-start model exists and was made with this run's model and warm-start knobs
    (the engine's check_run: before the run directory is written)."""
    if run_config.base_model is None:
        raise ValueError("run config is missing 'base_model'")
    base_dir = run_config.base_model
    if not (base_dir / "config.json").exists():
        raise FileNotFoundError(f"base model not found at {base_dir}; make it with "
                                f"python -m engines.prepare --engine tiny --engine-params-json ... --out {base_dir}")
    if read_config(base_dir).get("warmstart") != warmstart_knobs(dict(run_config.engine_params)):
        raise ValueError(f"base model {base_dir} was made with other engine_params "
                         f"({read_config(base_dir).get('warmstart')}); rebuild it with engines.prepare")
