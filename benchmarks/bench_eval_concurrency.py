"""Requests in flight and wall time of the `server` back end against a fake SGLang server that
takes a fixed time per request (tests/support/fake_sglang.py), at several eval.server.concurrency.

    .venv/bin/python -m benchmarks.bench_eval_concurrency [--latency 0.5] [--concurrency 1 8 24]

One checkpoint of the AIME fixture (3 problems x k = 8 = 24 requests, each with its own seed) is
scored per concurrency; printed: the most requests the server held at once, the wall time, and the
wall time over the ideal ceil(24 / concurrency) x latency.
"""
from __future__ import annotations

import argparse
import math
import tempfile
import threading
import time
from pathlib import Path

from eval.score import score_run
from tests.support.fake_sglang import FakeSGLang
from tests.support.slime_checkpoints import write_hf_save

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "aime_mini.jsonl"
REQUESTS = 3 * 8


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency", type=float, default=0.5, help="seconds the fake server takes per request")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 24])
    args = parser.parse_args()
    server = FakeSGLang()
    server.latency = args.latency
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print("| concurrency | most in flight | wall s | ideal s | requests | distinct seeds |\n|---|---|---|---|---|---|")
    for concurrency in args.concurrency:
        with tempfile.TemporaryDirectory() as tmp:
            write_hf_save(Path(tmp) / "train" / "checkpoints" / "step_1", shards_written=2, total_shards=2)
            settings = {"k": 8, "seed": 5, "temperature": 0.6, "top_p": 0.95, "max_gen_toks": 64,
                        "backend": "server", "data": {"aime24": str(FIXTURE)},
                        "server": {"url": server.url, "model": "policy", "concurrency": concurrency,
                                   "swap_weights": False}}
            server.log.clear()
            server.max_in_flight = 0
            start = time.perf_counter()
            score_run(Path(tmp), ["aime24_avg8"], settings)
            wall = time.perf_counter() - start
        seeds = {payload["seed"] for _, _, payload in server.log}
        ideal = math.ceil(REQUESTS / concurrency) * args.latency
        print(f"| {concurrency} | {server.max_in_flight} | {wall:.1f} | {ideal:.1f} | {len(server.log)} | {len(seeds)} |")
    server.shutdown()


if __name__ == "__main__":
    main()
