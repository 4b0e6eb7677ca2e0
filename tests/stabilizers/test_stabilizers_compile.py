"""Every registered stabilizer, TIS and a recipe's compute_loss trace whole: torch._dynamo.explain
finds no graph break (no host sync, no Python branch on a tensor value), so each can run under
torch.compile(fullgraph=True) and never stalls a GPU's launch queue. Only dynamo's tracing runs
here (no Inductor code generation), which keeps the test at a few seconds per loss on a CPU."""
import pytest
import torch
import torch._dynamo

from stabilizers import PolicyBatch, SamplerDistribution, available, get, load_recipes, loss_needs, with_tis


def random_batch(seed=0, shape=(8, 32), needs=()):
    """A batch with, for a loss that reads it, the sampler's distribution over a 16-entry vocabulary."""
    generator = torch.Generator().manual_seed(seed)
    rollout = -3 * torch.rand(shape, generator=generator)
    logp = (rollout + 0.05 * torch.randn(shape, generator=generator) ** 3).requires_grad_(True)
    logits = torch.randn((*shape, 16), generator=generator)
    logq = (logits + 0.1 * torch.randn((*shape, 16), generator=generator)).log_softmax(-1)
    sampler = SamplerDistribution(logq=logq, logp=logits.log_softmax(-1).requires_grad_(True),
                                  entropy=torch.special.entr(logq.exp()).sum(-1)) if needs else None
    return PolicyBatch(logp=logp, old_logp=logp.detach() - 0.01, rollout_logp=rollout,
                       advantages=torch.randn(shape[0], 1, generator=generator).expand(shape).contiguous(),
                       mask=(torch.rand(shape, generator=generator) > 0.2).float(), sampler=sampler)


def graph_breaks(fn, *args):
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(fn)(*args)
    return explanation.graph_break_count, [reason.reason for reason in explanation.break_reasons]


def loss_and_metrics(out):
    return out.loss, out.metrics


@pytest.mark.parametrize("name", available())
def test_every_stabilizer_traces_without_a_graph_break(name):
    loss_fn = get(name)  # looked up outside the traced function, as an engine does once
    batch = random_batch(needs=loss_needs(name))
    assert graph_breaks(lambda batch: loss_and_metrics(loss_fn(batch)), batch) == (0, [])


def test_the_top_k_form_traces_without_a_graph_break():
    centering = get("score_centering")
    batch = random_batch(needs=("sampler_logp",))
    assert graph_breaks(lambda batch: loss_and_metrics(centering(batch, weight="mis", top_k=4)), batch) == (0, [])


def test_tis_and_a_recipe_trace_without_a_graph_break():
    grpo = get("grpo")

    def weighted(batch):
        weighted_batch, metrics = with_tis(batch, cap=2.0, floor=0.5)
        out = grpo(weighted_batch)
        return out.loss, {**out.metrics, **metrics}

    assert graph_breaks(weighted, random_batch()) == (0, [])
    recipe = load_recipes()["sat_grpo_r3"]
    recipe.compute_loss(random_batch())  # warm: names resolved before tracing
    assert graph_breaks(lambda batch: loss_and_metrics(recipe.compute_loss(batch, step_seed=3)), random_batch()) == (0, [])


def test_compiled_sat_equals_eager():
    """fullgraph compilation succeeds and gives the eager numbers (q exactly; the loss to rounding)."""
    sat = get("sat_grpo")
    batch = random_batch(seed=1)
    eager = sat(batch)
    compiled = torch.compile(lambda b: loss_and_metrics(sat(b)), fullgraph=True, backend="aot_eager")(batch)
    assert torch.equal(compiled[1]["sat/q"], eager.metrics["sat/q"])
    torch.testing.assert_close(compiled[0], eager.loss)
    assert compiled[1]["sat/gate_rate"] > 0
