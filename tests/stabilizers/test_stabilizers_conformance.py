"""The conformance table (issue 62; docs/stabilizers.md, "Conformance to the sources"): each recipe whose
source publishes code against a port of that code, on the same fixed batches, loss and gradient at float64.

The references below are TEST CODE, ported from the sources line by line into torch (the Score Centering
code is JAX), for comparison only; nothing in stabilizers/ imports them. Each names its repository, path
and commit:

- prime-rl IPO today, IcePop and CISPO: PrimeIntellect-ai/prime-rl, src/prime_rl/trainer/rl/loss.py,
  `_capped_importance_ratio`, `IPOLoss.loss`, `IPOLoss.score_centering_loss`, `IcePopLoss.loss`,
  `CISPOLoss.loss` (read in the stored code index, whose copy names no commit; prime-rl's main after
  PR #3586).
- prime-rl IPO of PR #3418 and DPPO+KL: the same path at 559b44772e471d1538537b8805cc77f3824a5e64
  (`ipo_loss_fn`, `default_loss_fn`).
- Score Centering and its `topr` point: MJ10/score-centering, losses.py at
  521e51727c4c5d767c4b8abcf9722907a17a64cd (`is_weights`, `centering_weights`, `loss_fn_rl`).
- TOPR per token: yanxi-chen/Trinity-RFT, trinity/algorithm/policy_loss_fn/topr_policy_loss.py at
  5b77c089fe79a4e24308bfb9a99aa6641960f613 (`TOPRPolicyLossFn.__call__`).
- ESTR (no code published): its formula from the reading notes, written here independently of
  stabilizers/estr.py.
- FlashREINFORCE (OpenRLHF PR #1339, NVIDIA labs-molt PR #116; their code not read): the formula of issue
  62's summary, written here independently of stabilizers/flash_reinforce.py. The fixtures record
  pi_old = mu, where its filter keeps everything; a test of its own gives it stale batches.

The batches: random, near on-policy (every ratio within 1e-3 of 1, TOPR's taper edge), extreme
ratios (log-ratios up to about +-12), a response with no active token, a batch with none, and the
random batch with -inf and NaN in the recorded tensors' padding. Where a source and the bench are meant
to differ, the test asserts the difference named in docs/stabilizers.md. The gradient is taken with respect
to the trainer's logits: pi over the vocabulary is their log-softmax and the sampled token's log-prob is
gathered from it. The top-k form's tail term differs per vocabulary entry (the code writes it through
sum_all sg(p) log p, whose gradient is 0) and agrees once the gradient goes through the softmax.
"""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from stabilizers import PolicyBatch, SamplerDistribution, get, load_recipes

F64 = torch.float64
RECIPES = load_recipes()
TOL = {"rtol": 1e-10, "atol": 1e-13}


# ---------------------------------------------------------------- the batches
def make(name: str, seed: int = 0):
    """(logits leaf, batch) for fixture ``name``; B 4 responses, L 6 tokens, V 7 entries."""
    g = torch.Generator().manual_seed(seed)
    b, n_tok, v = 4, 6, 7
    q_logits = torch.randn(b, n_tok, v, generator=g, dtype=F64) * 1.5
    scale = {"random": 0.6, "near_on_policy": 1e-3, "extreme": 14.0, "one_empty": 0.6, "all_masked": 0.6,
             "padding_-inf": 0.6, "padding_nan": 0.6}[name]
    logits = q_logits + scale * torch.randn(b, n_tok, v, generator=g, dtype=F64)
    sampled = torch.multinomial(q_logits.softmax(-1).reshape(-1, v), 1, generator=g).reshape(b, n_tok)
    if name == "extreme":  # tokens mu all but never samples (q ~ e^-40) that pi gives 0.05 and 0.3: r > e^20
        for (i, t), p in {(0, 1): 0.05, (3, 0): 0.05, (1, 1): 0.3}.items():
            q_logits[i, t, sampled[i, t]] -= 40.0
            others = logits[i, t].exp().sum() - logits[i, t, sampled[i, t]].exp()
            logits[i, t, sampled[i, t]] = math.log(p / (1 - p)) + others.log()
    logits.requires_grad_(True)
    logq = q_logits.log_softmax(-1)
    lengths = torch.tensor([6, 4, 2, 5])
    if name == "one_empty":
        lengths[2] = 0
    if name == "all_masked":
        lengths[:] = 0
    mask = (torch.arange(n_tok)[None] < lengths[:, None]).to(F64)
    advantages = torch.tensor([1.0, -0.5, -1.5, 0.75], dtype=F64)[:, None].expand(b, n_tok).contiguous()
    rollout = logq.gather(-1, sampled[..., None])[..., 0]
    entropy = -(logq.exp() * logq).sum(-1)
    if name.startswith("padding"):
        fill = -math.inf if name.endswith("-inf") else math.nan
        pad = ~mask.bool()
        rollout, advantages, entropy = (x.masked_fill(pad, fill) for x in (rollout, advantages, entropy))
        logq = logq.masked_fill(pad[..., None], fill)
    logp_all = logits.log_softmax(-1)
    batch = PolicyBatch(logp=logp_all.gather(-1, sampled[..., None])[..., 0], old_logp=rollout.clone(),
                        rollout_logp=rollout, advantages=advantages, mask=mask,
                        sampler=SamplerDistribution(logq=logq, logp=logp_all, entropy=entropy))
    return logits, batch


BATCHES = ["random", "near_on_policy", "extreme", "one_empty", "all_masked", "padding_-inf", "padding_nan"]


def clean_of(name):
    """The batch the reference reads: a padded batch's clean twin (the sources never read padding
    either: prime-rl indexes by the loss mask; the Score Centering code would give NaN * 0)."""
    return "random" if name.startswith("padding") else name


def rows(batch):
    return [batch.active[i] for i in range(batch.logp.shape[0])]


def count(batch):
    return batch.active.sum().clamp(min=1)


# ---------------------------------------------------------------- prime-rl
def prime_capped_ratio(log_r, cap):
    capped = log_r.detach().clamp(max=log_r.new_tensor(cap).log())
    return torch.exp(capped + (log_r - log_r.detach()))


def prime_ipo(batch, eps=0.3, cap=1e4, score_centering=False):
    """IPOLoss.loss (+ score_centering_loss), one sample per row, over the global token count."""
    total = batch.logp.new_zeros(())
    for i, m in enumerate(rows(batch)):
        lp, lq, adv = batch.logp[i][m], batch.rollout_logp[i][m], batch.advantages[i][m]
        log_r = lp - lq
        big, small = torch.maximum(lp, lq), torch.minimum(lp, lq)
        keep = ~(torch.exp(big) * -torch.expm1(small - big) > eps)
        total = total + (-adv[keep] * prime_capped_ratio(log_r[keep], cap)).sum()
        if score_centering:
            trainer, sampler = batch.sampler.logp[i][m], batch.sampler.logq[i][m]
            with torch.no_grad():
                valid = sampler.isfinite()
                q, p = sampler.exp(), trainer.exp()
                ratio = (trainer - sampler).clamp(max=math.log(cap)).exp()
                coef = torch.where(valid & ((p - q).abs() <= eps), q * ratio, 0.0)
            total = total + (adv * (coef * trainer).sum(-1)).sum()
    return total / count(batch)


def ratio_of(log_r, clamp):
    """exp(log r); with ``clamp``, the bench's documented change: value and gradient weight min(r, e^clamp)."""
    return torch.exp(log_r if clamp is None else log_r.detach().clamp(max=clamp) + (log_r - log_r.detach()))


def prime_ipo_pr3418(batch, threshold=0.1, kl_tau=1e-3, clamp=None):
    """ipo_loss_fn at 559b447: the ratio uncapped, kl_tau (log r)^2 on every loss token."""
    log_r = batch.logp - batch.rollout_logp
    ratio = ratio_of(log_r, clamp)
    keep = batch.active & ~((torch.exp(batch.logp) - torch.exp(batch.rollout_logp)).abs() > threshold)
    per_token = -(keep * batch.advantages * ratio) + kl_tau * (batch.active * log_r ** 2)
    return torch.where(batch.active, per_token, 0.0).sum() / count(batch)


def prime_dppo_kl(batch, high=0.2, low=0.2, kl_tau=1e-3, clamp=None):
    """default_loss_fn at 559b447 (DPPO-Binary-TV + KL)."""
    log_r = batch.logp - batch.rollout_logp
    diff = torch.exp(batch.logp) - torch.exp(batch.rollout_logp)
    masked = torch.where(batch.advantages > 0, diff > high, diff < -low)
    keep = batch.active & ~masked
    per_token = -(keep * batch.advantages * ratio_of(log_r, clamp)) + kl_tau * (batch.active * log_r ** 2)
    return torch.where(batch.active, per_token, 0.0).sum() / count(batch)


def prime_icepop(batch, low=0.2, high=5.0):
    """IcePopLoss.loss (the stored copy of loss.py, as IPOLoss)."""
    total = batch.logp.new_zeros(())
    for i, m in enumerate(rows(batch)):
        log_r = batch.logp[i][m] - batch.rollout_logp[i][m]
        detached = log_r.detach()
        keep = ~((detached < math.log(low)) | (detached > math.log(high)))
        total = total + (-batch.advantages[i][m][keep] * torch.exp(log_r[keep])).sum()
    return total / count(batch)


def prime_cispo(batch, low=0.0, high=5.0):
    """CISPOLoss.loss (the same copy): the detached weight min(r, high), max(., low) only if low > 0."""
    total = batch.logp.new_zeros(())
    for i, m in enumerate(rows(batch)):
        logp = batch.logp[i][m]
        clipped = (logp - batch.rollout_logp[i][m]).detach().clamp(max=math.log(high))
        if low:
            clipped = clipped.clamp(min=math.log(low))
        total = total + (-clipped.exp() * batch.advantages[i][m] * logp).sum()
    return total / count(batch)


# ---------------------------------------------------------------- Score Centering's code (JAX, ported)
@dataclasses.dataclass(frozen=True)
class ISCorrection:
    level: str = "token"
    low: float = 0.0
    high: float = math.inf
    outside: str = "drop"
    sign: str = "both"

    def in_band(self, r):
        return (r >= self.low) & (r <= self.high)


def is_weights(log_ratio, positive, c, floor=-20.0):
    r = torch.exp(log_ratio.clamp(floor, 20.0))
    w = torch.where(c.in_band(r), r, r.clamp(c.low, c.high) if c.outside == "clamp" else torch.zeros_like(r))
    if c.sign == "neg":
        w = torch.where(positive, 1.0, w)
    return w.detach()


def centering_weights(vocab_lp, sampling_lp, c):
    lo = sampling_lp + math.log(c.low) if c.low > 0 else torch.full_like(sampling_lp, -math.inf)
    hi = sampling_lp + math.log(c.high) if not math.isinf(c.high) else torch.full_like(sampling_lp, math.inf)
    in_band = (vocab_lp >= lo) & (vocab_lp <= hi)
    outside = torch.minimum(torch.maximum(vocab_lp, lo), hi) if c.outside == "clamp" else torch.full_like(vocab_lp, -math.inf)
    return torch.exp(torch.where(in_band, vocab_lp, outside))


def authors_loss(batch, c=None, top_k=0, seq_c=None, seq_floor=-20.0, token_floor=-20.0):
    """loss_fn_rl: token weights c, full centering (top_k 0) or the top-k head with the modelled tail;
    or a sequence-level correction seq_c and no centering (the `topr` point)."""
    sg = torch.Tensor.detach
    vocab_lp, q_all = batch.sampler.logp, batch.sampler.logq
    token_lp, mask = batch.logp, batch.mask
    log_ratio = token_lp - batch.rollout_logp
    positive = batch.advantages[:, :1] >= 0
    w = is_weights(log_ratio, positive, c, token_floor) if c else 1.0
    score = w * token_lp
    if seq_c is None:
        plogp = sg((sg(torch.exp(vocab_lp)) * vocab_lp).sum(-1))
        if top_k == 0:
            cw = centering_weights(vocab_lp, q_all, c) if c else torch.exp(q_all)
            center = (sg(cw) * vocab_lp).sum(-1)
        else:
            ids = q_all.topk(top_k, dim=-1).indices
            head_q, head_p = q_all.gather(-1, ids), vocab_lp.gather(-1, ids)
            head_cw = centering_weights(head_p, head_q, c) if c else torch.exp(head_q)
            center = (sg(head_cw) * head_p).sum(-1)
            tail_q_mass = (1.0 - torch.exp(head_q).sum(-1)).clamp(min=0.0)
            p_head = torch.exp(head_p)
            rho = tail_q_mass / (1.0 - p_head.sum(-1)).clamp(min=1e-6)
            alpha = centering_weights(torch.zeros_like(rho)[..., None], torch.log(rho)[..., None], c)[..., 0] \
                if c else rho
            center = center + sg(alpha) * (plogp - (sg(p_head) * head_p).sum(-1))
        score = score - center
    per_seq = (score * mask).sum(-1)
    weight = batch.advantages[:, 0]
    if seq_c is not None:
        seq_log_ratio = (sg(log_ratio) * mask).sum(-1)
        weight = weight * is_weights(seq_log_ratio, batch.advantages[:, 0] >= 0, seq_c, seq_floor)
    return -(weight * per_seq).sum() / mask.sum().clamp(min=1)


TIS, MIS = ISCorrection(high=2.0, outside="clamp"), ISCorrection(low=0.5, high=5.0)
TOPR_POINT = ISCorrection(level="seq_sum", high=1.0, outside="clamp", sign="neg")


# ---------------------------------------------------------------- Trinity-RFT's TOPR, ESTR's formula
def trinity_topr(batch, threshold=0.0):
    ratio = torch.exp(batch.logp - batch.rollout_logp)
    alpha = torch.where(batch.advantages <= threshold, ratio.clamp(0.0, 1.0), torch.ones_like(ratio))
    loss = -alpha.detach() * batch.advantages * batch.logp
    return (loss * batch.mask).sum() / batch.mask.sum().clamp(min=1)  # token-mean


def estr_formula(batch, tau=1.0, entropy_eps=0.01, clip=0.2):
    delta = batch.logp - batch.rollout_logp
    keep = delta.detach() ** 2 / (batch.sampler.entropy + entropy_eps) <= tau
    r = delta.exp()
    surrogate = torch.minimum(r * batch.advantages, r.clamp(1 - clip, 1 + clip) * batch.advantages)
    return -(surrogate * keep * batch.mask).sum() / batch.mask.sum().clamp(min=1)


def flash_reinforce_formula(batch, delta=5e-3):
    p, q = batch.old_logp.exp(), batch.rollout_logp.exp()
    kl = q * torch.log(q / p) + (1 - q) * torch.log((1 - q) / (1 - p))  # Bernoulli(q) against Bernoulli(p)
    per_response = torch.where(batch.active, kl, 0.0).sum(-1) / batch.active.sum(-1).clamp(min=1)
    kept = batch.active & (per_response <= delta)[:, None]
    return -(batch.advantages * batch.logp)[kept].sum() / count(batch)


# ---------------------------------------------------------------- the table
# recipe -> (reference, what is compared); "gradient" alone where the loss value is documented to differ
TABLE = {
    "ipo": (prime_ipo, "loss and gradient"),
    "ipo_score_centering": (lambda b: prime_ipo(b, score_centering=True), "loss and gradient"),
    "ipo_pr3418": (prime_ipo_pr3418, "loss and gradient"),
    "dppo_pkl": (prime_dppo_kl, "gradient"),
    "icepop_prime": (prime_icepop, "loss and gradient"),
    "cispo": (prime_cispo, "loss and gradient"),  # sg(w) A log pi for A pi/mu: the same gradient, another value
    "score_centering": (authors_loss, "loss and gradient"),
    "score_centering_tis": (lambda b: authors_loss(b, TIS), "loss and gradient"),
    "score_centering_mis": (lambda b: authors_loss(b, MIS), "loss and gradient"),
    "score_centering_top4": (lambda b: authors_loss(b, top_k=4), "loss and gradient"),
    "topr": (lambda b: authors_loss(b, seq_c=TOPR_POINT), "loss and gradient"),
    "topr_token": (trinity_topr, "loss and gradient"),
    "estr": (estr_formula, "loss and gradient"),
    "flash_reinforce": (flash_reinforce_formula, "loss and gradient"),
    "flash_reinforce_unfiltered": (lambda b: flash_reinforce_formula(b, math.inf), "loss and gradient"),
}
# Where the bench departs from the source by design (docs/stabilizers.md), the source's code with that one
# change: the bench must equal it, and on the extreme batch it must differ from the literal port.
DEPARTS = {
    "ipo_pr3418": lambda b: prime_ipo_pr3418(b, clamp=20.0),  # the ratio clamped at e^20
    "dppo_pkl": lambda b: prime_dppo_kl(b, clamp=20.0),  # the ratio clamped at e^20
    "topr": lambda b: authors_loss(b, seq_c=TOPR_POINT, seq_floor=None),  # no floor e^-20 on the weight
    "score_centering_tis": lambda b: authors_loss(b, TIS, token_floor=None),  # the same, on the token's
}


def run(compute, name):
    logits, batch = make(name)
    loss = compute(batch)
    (grad,) = torch.autograd.grad(loss, logits, allow_unused=True)
    return loss.detach(), torch.zeros_like(logits) if grad is None else grad


@pytest.mark.parametrize("fixture", BATCHES)
@pytest.mark.parametrize("recipe", sorted(TABLE))
def test_the_recipe_conforms_to_its_source(recipe, fixture):
    reference, compared = TABLE[recipe]
    ours_loss, ours_grad = run(lambda b: RECIPES[recipe].compute_loss(b).loss, fixture)
    assert torch.isfinite(ours_loss) and torch.isfinite(ours_grad).all()
    ref_loss, ref_grad = run(reference, clean_of(fixture))
    if recipe in DEPARTS:
        departs_loss, departs_grad = run(DEPARTS[recipe], clean_of(fixture))
        binds = not (torch.allclose(departs_grad, ref_grad, **TOL) and torch.allclose(departs_loss, ref_loss, **TOL))
        assert binds == (fixture == "extreme"), f"{recipe}: the documented difference binds on {fixture}: {binds}"
        ref_loss, ref_grad = departs_loss, departs_grad
    torch.testing.assert_close(ours_grad, ref_grad, **TOL)
    if compared == "loss and gradient":
        torch.testing.assert_close(ours_loss, ref_loss, **TOL)


def test_the_fixtures_reach_the_edges_they_are_named_for():
    """The extreme batch has ratios beyond e^20 both ways, one kept by IPO's |p - q| <= 0.1 and a
    response whose sequence ratio is below e^-20; near on-policy has none beyond 1e-2 of 1."""
    _, extreme = make("extreme")
    log_r = (extreme.logp - extreme.rollout_logp).detach()
    kept = extreme.active & ((extreme.logp.exp() - extreme.rollout_logp.exp()).abs() <= 0.1)
    assert log_r[extreme.active].max() > 20 and log_r[extreme.active].min() < -20 and (log_r[kept] > 20).any()
    assert (torch.where(extreme.active, log_r, 0.0).sum(-1)[extreme.advantages[:, 0] < 0] < -20).any()
    _, near = make("near_on_policy")
    assert (near.logp - near.rollout_logp)[near.active].abs().max() < 1e-2


@pytest.mark.parametrize("seed", range(4))
def test_flash_reinforce_conforms_to_its_formula_where_its_filter_binds(seed):
    """Stale batches (pi_old away from mu), delta between two responses' mean binary KLs: some dropped, some kept."""
    logits, batch = make("random", seed)
    g = torch.Generator().manual_seed(100 + seed)
    old = batch.rollout_logp + 0.2 * torch.randn(batch.logp.shape, generator=g, dtype=F64)
    stale = dataclasses.replace(batch, old_logp=old.clamp(max=-1e-3))
    p, q = stale.old_logp.exp(), stale.rollout_logp.exp()
    kl = q * torch.log(q / p) + (1 - q) * torch.log((1 - q) / (1 - p))
    means = (torch.where(stale.active, kl, 0.0).sum(-1) / stale.active.sum(-1)).sort().values
    delta = float(means[1:3].mean())  # two of the four responses kept, two dropped
    ours = get("flash_reinforce")(stale, delta=delta).loss
    ref = flash_reinforce_formula(stale, delta)
    ours_grad, ref_grad = (torch.autograd.grad(x, logits, retain_graph=True)[0] for x in (ours, ref))
    torch.testing.assert_close(ours, ref, **TOL)
    torch.testing.assert_close(ours_grad, ref_grad, **TOL)
    dropped = (ours_grad.abs().sum((-1, -2)) == 0) & stale.active.any(-1)
    assert dropped.sum() == 2, dropped
