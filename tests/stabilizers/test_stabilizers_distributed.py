"""Two gloo processes (torch.multiprocessing spawn, meeting through a rendezvous file) against one
process on the concatenated batch: the global SAT quantile (P3O's batch ESS), the loss and the gradient must agree."""
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from stabilizers import PolicyBatch, TorchDistributedReduce, get

CASES = [  # (loss, params)
    ("sat_grpo", {"quantile_scope": "global"}),
    ("sat_grpo", {"quantile_scope": "global", "aggregation": "sample_mean"}),
    ("sat_gspo", {"quantile_scope": "global", "alpha": 0.8}),
    ("grpo", {"dual_clip_c": 3.0}),
    ("p3o", {}),  # its batch ESS summed over the ranks, as P3O's code all-reduces it
]
LENGTH = 7


def rank_batch(rank):
    """Rank 0: 3 responses, rank 1: 2 responses (different active-token counts); float64."""
    generator = torch.Generator().manual_seed(100 + rank)
    b = 3 - rank
    rollout = -torch.rand(b, LENGTH, generator=generator, dtype=torch.float64) * 4
    d = 0.05 * torch.randn(b, LENGTH, generator=generator, dtype=torch.float64) ** 3
    advantages = torch.randn(b, 1, generator=generator, dtype=torch.float64).expand(b, LENGTH)
    mask = (torch.rand(b, LENGTH, generator=generator) > 0.3 + 0.2 * rank).double()
    return rollout + d, rollout, advantages, mask


def as_batch(parts, reduce=None):
    logp, rollout, advantages, mask = parts
    logp = logp.clone().requires_grad_(True)
    return PolicyBatch(logp=logp, old_logp=logp.detach() - 0.05, rollout_logp=rollout,
                       advantages=advantages.contiguous(), mask=mask, reduce=reduce)


def worker(rank, out_dir):
    # a rendezvous file, not a port picked in advance that another process may take meanwhile
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/rendezvous", rank=rank, world_size=2)
    try:
        reduce = TorchDistributedReduce()
        results = {"gathered": reduce.all_gather(torch.arange(3.0 * rank, dtype=torch.float64))}
        for i, (name, params) in enumerate(CASES):
            batch = as_batch(rank_batch(rank), reduce)
            out = get(name)(batch, **params)
            out.loss.backward()
            results[i] = (out.loss.detach(), batch.logp.grad, out.metrics.get("sat/q", out.metrics.get("p3o/ess")))
        torch.save(results, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # spawned ranks
def test_two_gloo_ranks_match_one_process(tmp_path):
    mp.spawn(worker, args=(str(tmp_path),), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    # variable-size gather: rank 0 sent 0 values, rank 1 sent 3
    for result in ranks:
        assert [t.tolist() for t in result["gathered"]] == [[], [0.0, 1.0, 2.0]]

    parts = [rank_batch(r) for r in range(2)]
    concatenated = [torch.cat([p[i] for p in parts]) for i in range(4)]
    for i, (name, params) in enumerate(CASES):
        single = as_batch(concatenated)
        single_params = {**params, "quantile_scope": "microbatch"} if "quantile_scope" in params else params
        out = get(name)(single, **single_params)
        out.loss.backward()
        losses = torch.stack([r[i][0] for r in ranks])
        # DDP averages the ranks: the mean of rank losses (and grads) is the concatenated batch's
        torch.testing.assert_close(losses.mean(), out.loss.detach(), rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(torch.cat([r[i][1] for r in ranks]) / 2, single.logp.grad, rtol=1e-12, atol=1e-14)
        if name.startswith("sat"):
            assert out.metrics["sat/gate_rate"].item() > 0  # the comparison exercises the gate
            for r in ranks:  # the global q is bit-identical to the single process's
                assert torch.equal(r[i][2], out.metrics["sat/q"])
        if name == "p3o":  # every rank's e_B is the concatenated batch's, and not 1 (the cap binds)
            for r in ranks:
                torch.testing.assert_close(r[i][2], out.metrics["p3o/ess"], rtol=1e-12, atol=0)
            assert out.metrics["p3o/frac_capped"].item() > 0


def test_microbatch_scope_differs_from_global():
    """Sanity of the setup: a rank's own quantile is not the global one (so the test above has teeth)."""
    q_single = get("sat_grpo")(as_batch([torch.cat([rank_batch(r)[i] for r in range(2)]) for i in range(4)]))
    q_ranks = [get("sat_grpo")(as_batch(rank_batch(r))).metrics["sat/q"] for r in range(2)]
    assert any(q != q_single.metrics["sat/q"] for q in q_ranks)
