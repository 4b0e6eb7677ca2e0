"""How long scoring all checkpoints of one embedded run takes (eval.score, tiny back end).

    .venv/bin/python -m benchmarks.bench_eval_score [--checkpoints 12] [--problems 256] [--k 8]

Writes demo-size tiny checkpoints to a temp run directory, then times one score_run call
(task loaded once, every checkpoint scored through lm-eval) on tiny_val. Prints seconds in all
and per checkpoint. Timings on a shared CPU are noisy.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from engines.tiny.checkpoint import save_checkpoint
from engines.tiny.model import ModelConfig, TinyMoELM
from eval.score import score_run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoints", type=int, default=12)
    parser.add_argument("--problems", type=int, default=256)
    parser.add_argument("--k", type=int, default=8)
    args = parser.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp)
        for i in range(args.checkpoints):
            save_checkpoint(TinyMoELM(ModelConfig()), run / "train" / "checkpoints" / f"step_{25 * (i + 1)}")
        # config.yaml's eval; the back end named, as there is no run config.json here to name the engine
        settings = {"k": args.k, "seed": 1234, "problems": {"tiny_val": args.problems}, "backend": "tiny"}
        start = time.perf_counter()
        rows = score_run(run, ["tiny_val"], settings)
        seconds = time.perf_counter() - start
    print(f"scored {len(rows)} checkpoints x {args.problems} problems x k={args.k} "
          f"({len(rows) * args.problems * args.k} samples) in {seconds:.1f} s "
          f"({seconds / len(rows):.2f} s per checkpoint, task loaded once)")


if __name__ == "__main__":
    main()
