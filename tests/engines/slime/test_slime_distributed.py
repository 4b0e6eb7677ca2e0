"""Two data-parallel ranks (torch.distributed gloo + megatron-core parallel state on CPU):
SAT's global quantile scope and the exact per-step |d| statistics over both ranks' shards."""
from __future__ import annotations

import json
import os
from argparse import Namespace

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

pytestmark = pytest.mark.slow  # two spawned ranks importing megatron-core (~90 s loaded)

WORLD = 2


def rank_main(rank: int, tmp: str) -> None:
    torch.set_num_threads(1)
    import torch.distributed as dist
    from megatron.core import parallel_state as mpu

    from engines.slime import loss as slime_loss
    from engines.slime import metrics
    from harness.lag import LagOutOfBound
    from stabilizers import recipe_from_dict
    from tests.support import slime_standin
    from tests.support.slime_batches import args_for, direct_loss, direct_loss_of_many, make_sample_batch

    slime_standin.install()
    # a rendezvous file, not a port picked in advance that another process may take meanwhile
    dist.init_process_group("gloo", init_method=f"file://{tmp}/rendezvous", rank=rank, world_size=WORLD)
    mpu.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)
    try:
        # --- SAT with the global quantile scope: each rank holds its own micro-batch ---
        recipe = recipe_from_dict("sat_grpo_global", {"loss": "sat_grpo", "params": {"quantile_scope": "global"}})
        shards = [make_sample_batch(seed=10 + r, response_lengths=(4, 7, 1, 5, 3)[r:] + (6,) * r)
                  for r in range(WORLD)]
        logits, batch = shards[rank]
        args = args_for(recipe)
        reducer = slime_standin.sum_of_sample_mean_factory(batch["response_lengths"], batch["loss_masks"], True)
        loss_sum, logged = slime_loss.policy_loss(args, batch, logits, reducer)
        # slime + Megatron: gradients summed over ranks, divided by the step's token count
        tokens = torch.tensor([float(sum(int(m.sum()) for m in batch["loss_masks"]))])
        dist.all_reduce(tokens)
        (grad,) = torch.autograd.grad(loss_sum / tokens, logits)
        step_loss = (loss_sum / tokens).detach().reshape(1)
        dist.all_reduce(step_loss)

        # the stabilizer on one batch holding both ranks' samples (microbatch scope = all of them)
        single = recipe_from_dict("sat_grpo_one", {"loss": "sat_grpo", "params": {"quantile_scope": "microbatch"}})
        expected = direct_loss_of_many(shards, single)
        torch.testing.assert_close(step_loss[0], expected.loss, rtol=1e-6, atol=1e-7)
        (expected_grad,) = torch.autograd.grad(expected.loss, logits)
        torch.testing.assert_close(grad, expected_grad, rtol=1e-5, atol=1e-8)
        assert expected.metrics["sat/gate_rate"] > 0
        q_times_tokens = logged["sat/q"].reshape(1).clone()
        dist.all_reduce(q_times_tokens)  # slime's metric reduction: sum, then / step tokens
        torch.testing.assert_close(q_times_tokens[0] / tokens[0], expected.metrics["sat/q"], rtol=1e-6, atol=0)
        # the micro-batch scope would have used another quantile on at least one rank
        differs = torch.tensor([float(direct_loss(logits, batch, single).metrics["sat/q"] != expected.metrics["sat/q"])])
        dist.all_reduce(differs)
        assert differs.item() > 0

        # --- exact |d| statistics over both shards, written by rank 0 only ---
        run_args = Namespace(stalebench_run_dir=tmp, stalebench_lag_mode="interval", stalebench_lag=8,
                             stalebench_seed=0)
        rollout_id = 9
        if rank == 0:  # train_async with interval 8: rollouts 0..8 sampled after push 1, rollout 9 after push 2
            for r in range(rollout_id + 1):
                samples = [Namespace(weight_versions=["1" if r < 9 else "2"]) for _ in range(4)]
                assert metrics.log_rollout(r, run_args, samples, {}, 1.0) is False
        dist.barrier()
        g = torch.Generator().manual_seed(rank)
        lengths = [3, 5, 2] if rank == 0 else [4, 6]
        rollout_data = {"log_probs": [torch.randn(n, generator=g) for n in lengths],
                        "rollout_log_probs": [torch.randn(n, generator=g) for n in lengths],
                        "loss_masks": [(torch.arange(n) % 3 != 2).int() for n in lengths],
                        "raw_reward": [1.0, 0.0, 0.0, 1.0, 1.0]}
        metrics.postprocess(run_args, rollout_id, rollout_data)
        local_d = metrics.local_abs_d(rollout_data)
        sizes = [torch.zeros(1) for _ in range(WORLD)]
        dist.all_gather(sizes, torch.tensor([float(local_d.numel())]))
        padded = torch.zeros(int(max(s.item() for s in sizes)))
        padded[:local_d.numel()] = local_d
        gathered = [torch.zeros_like(padded) for _ in range(WORLD)]
        dist.all_gather(gathered, padded)
        if rank == 0:
            # slime's train() logs the step's scalars on this rank after training
            slime_standin.install()
            import slime.observability.logging_utils as logging_utils
            logging_utils.log(run_args, {"train/step": rollout_id, "train/loss": -0.5, "train/grad_norm": 2.0,
                                         "train/entropy_loss": 0.7, "train/sat/q": 0.03}, "train/step")
            everything = torch.cat([t[:int(s.item())] for t, s in zip(gathered, sizes)]).double().numpy()
            (row,) = [json.loads(line) for line in open(os.path.join(tmp, "train", "metrics.jsonl"))]
            assert row["step"] == rollout_id + 1 and row["policy_version"] == 8 and row["realized_lag"] == 1
            assert row["reward"] == pytest.approx(0.6)
            assert row["loss"] == -0.5 and row["grad_norm"] == 2.0 and row["entropy"] == 0.7
            assert row["sat/q"] == 0.03
            assert row["d/p90"] == pytest.approx(float(np.quantile(everything, 0.9)), abs=1e-7)
            assert row["d/p99"] == pytest.approx(float(np.quantile(everything, 0.99)), abs=1e-7)
            assert row["d/max"] == pytest.approx(float(everything.max()), abs=1e-7)
            assert row["d/mean_abs"] == pytest.approx(float(everything.mean()), abs=1e-7)
            assert len(everything) > local_d.numel()  # the other shard's tokens are in
            # planted fault: rollout 10 sampled by push 1 (version 0), realized lag 10 at interval lag 8
            metrics.log_rollout(10, run_args, [Namespace(weight_versions=["1"])], {}, 1.0)
        dist.barrier()
        # the job's own hook checks the bound on every rank: each one stops the step
        with pytest.raises(LagOutOfBound, match=r"step 11: realized lag 10 leaves the interval bound"):
            metrics.postprocess(run_args, 10, rollout_data)
    finally:
        mpu.destroy_model_parallel()
        dist.destroy_process_group()


def test_global_quantile_scope_and_step_statistics_over_data_parallel_ranks(tmp_path):
    mp.spawn(rank_main, args=(str(tmp_path),), nprocs=WORLD, join=True)
