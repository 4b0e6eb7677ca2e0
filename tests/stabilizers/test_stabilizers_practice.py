"""The methods practitioners use most (issue 26): SAPO, DAPO's clip-higher, Dr.GRPO's aggregation,
Geo-RS, OPSM, DPPO-Binary-KL and prime-rl's DPPO+KL, against values worked out by hand (float64), and each
disabled case against its base bit for bit. The GRPO batch and its clipped surrogate S are tests/support/hand_batches.py's."""
import math

import pytest
import torch

from stabilizers import PolicyBatch, get, get_recipe, load_recipes
from tests.support.hand_batches import batch_from_ratios, check, grpo_batch


def test_sapo_by_hand():
    # r = 1, 1 + ln 3, 1 with A = +1, +1, -1 (tau 1, 1, 1.05); sigmoid(0) = 1/2, sigmoid(ln 3) = 3/4:
    #   g = 4 x 1/2 = 2,  4 x 3/4 = 3,  4/1.05 x 1/2 = 1.904761905;  S = g A = 2, 3, -1.904761905
    #   loss = -(2 + 3 - 1.904761905) / 3; dS/dlogp = A 4 sigmoid (1 - sigmoid) r = 1, 0.75 (1 + ln 3), -1
    r2 = 1 + math.log(3)
    two = batch_from_ratios([[1.0, r2], [1.0, 1.0]], [[1.0, 1.0], [-1.0, -1.0]], [[1, 1], [1, 0]])
    out = get("sapo")(two)
    check(out, two, -(2 + 3 - 2 / 1.05) / 3, [[-1 / 3, -0.75 * r2 / 3], [1 / 3, 0]])
    assert out.metrics["sapo/gate_mean"].item() == pytest.approx((2 + 3 + 2 / 1.05) / 3)
    assert get_recipe("sapo").params == {"tau_pos": 1.0, "tau_neg": 1.05}


def test_clip_higher_by_hand_and_at_0_2_it_is_grpo():
    # eps_high 0.28: r = 1.3 with A = +1 is clipped at 1.28 instead of 1.2: S = 1.1, 1.28, 0.7 | -13.5
    batch = grpo_batch()
    check(get_recipe("grpo_clip_higher").compute_loss(batch), batch, -(3.08 - 13.5) / 7,
          [[-1.1 / 7, 0, -0.7 / 7, 0], [1.8 / 7, 0, 8.0 / 7, 2.1 / 7]])
    assert get_recipe("grpo_clip_higher").params == {"eps_low": 0.2, "eps_high": 0.28}
    low, high = grpo_batch(), grpo_batch()
    at_0_2 = load_recipes(extra={"ch": {"loss": "grpo", "params": {"eps_low": 0.2, "eps_high": 0.2}}})["ch"]
    a, b = at_0_2.compute_loss(low), get_recipe("grpo").compute_loss(high)
    a.loss.backward()
    b.loss.backward()
    assert torch.equal(a.loss, b.loss) and torch.equal(low.logp.grad, high.logp.grad)


def test_dr_grpo_aggregation_by_hand():
    # each response's token SUM over L = 4 (the batch's width), then the mean over the 2 responses:
    #   -(3.0 / 4 - 13.5 / 4) / 2 = 1.3125; d loss / d logp = -A r / (4 x 2) where unclipped
    batch = grpo_batch()
    check(get_recipe("grpo_sum_norm").compute_loss(batch), batch, 1.3125,
          [[-1.1 / 8, 0, -0.7 / 8, 0], [1.8 / 8, 0, 8.0 / 8, 2.1 / 8]])
    # the constant is the width, not the lengths: one more padding column makes L 5
    wide = batch_from_ratios([row + [1.0] for row in [[1.1, 1.3, 0.7, 1.0], [0.9, 0.75, 4.0, 1.05]]],
                             [[1.0] * 5, [-2.0] * 5], [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]])
    check(get("grpo")(wide, aggregation="token_sum_norm"), wide, 1.3125 * 4 / 5)


def test_geo_rs_by_hand_and_with_an_infinite_band_it_is_no_weight():
    # rho = pi_old / mu per token; geometric means: response 0 (1.0005, 1.0005) -> 1.0005, kept;
    # response 1 (1.004, 1.0) -> sqrt(1.004) = 1.001998, outside [0.999, 1.001]: rejected (weight 0,
    # still in the denominator); r = 1 so S = A: loss = -(2 x 1) / 4 = -0.5
    rho = [[1.0005, 1.0005], [1.004, 1.0]]
    batch = batch_from_ratios([[1.0, 1.0], [1.0, 1.0]], [[1.0] * 2, [-1.0] * 2], [[1, 1], [1, 1]],
                              tis_raw=rho)
    out = get_recipe("grpo_geo_rs").compute_loss(batch)
    check(out, batch, -0.5, [[-0.25, -0.25], [0, 0]])
    assert out.metrics["rollout_is/frac_masked"].item() == pytest.approx(0.5)
    # the infinite band keeps everything and weighs it 1: GRPO bit for bit
    band = load_recipes(extra={"g": {"loss": "grpo", "rollout_is": {"level": "geometric", "lower": 0.0,
                                                                    "upper": math.inf, "reweight": False}}})["g"]
    random = torch.Generator().manual_seed(0)
    logp = (-2 + torch.randn(3, 5, generator=random, dtype=torch.float64)).requires_grad_(True)
    kwargs = dict(old_logp=logp.detach() + 0.1 * torch.randn(3, 5, generator=random, dtype=torch.float64),
                  rollout_logp=logp.detach() + 0.3 * torch.randn(3, 5, generator=random, dtype=torch.float64),
                  advantages=torch.randn(3, 1, generator=random, dtype=torch.float64).expand(3, 5),
                  mask=(torch.rand(3, 5, generator=random) > 0.3).double())
    weighted, plain = band.compute_loss(PolicyBatch(logp=logp, **kwargs)), get("grpo")(PolicyBatch(logp=logp, **kwargs))
    (weighted_grad,) = torch.autograd.grad(weighted.loss, logp)
    (plain_grad,) = torch.autograd.grad(plain.loss, logp)
    assert torch.equal(weighted.loss, plain.loss) and torch.equal(weighted_grad, plain_grad)


def test_opsm_by_hand_and_with_an_infinite_delta_it_is_grpo():
    # response 0 (A = +1): r = 1.1, 1.3, 0.7 -> never masked (A > 0): S = 1.1, 1.2, 0.7
    # response 1 (A = -2): r = 0.9, 0.85, 0.95, 1.0 -> KL = -(ln 0.9 + ln 0.85 + ln 0.95) / 4 = 0.0798 > 1e-4: masked
    # response 2 (A = -1): r = 1.1, 1.0 -> KL = -ln(1.1) / 2 < 0: kept, S = -1.1, -1.0
    # loss = -(3.0 - 2.1) / 9 (masked tokens stay in the denominator); d loss / d logp = -A r / 9 where kept and unclipped
    ratios = [[1.1, 1.3, 0.7, 1.0], [0.9, 0.85, 0.95, 1.0], [1.1, 1.0, 1.0, 1.0]]
    args = (ratios, [[1.0] * 4, [-2.0] * 4, [-1.0] * 4], [[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]])
    batch = batch_from_ratios(*args)
    out = get_recipe("opsm").compute_loss(batch)
    check(out, batch, -(3.0 - 2.1) / 9, [[-1.1 / 9, 0, -0.7 / 9, 0], [0] * 4, [1.1 / 9, 1.0 / 9, 0, 0]])
    assert out.metrics["opsm/masked_frac"].item() == pytest.approx(4 / 9)
    off, grpo = batch_from_ratios(*args), batch_from_ratios(*args)
    a, b = get("opsm")(off, delta=math.inf), get("grpo")(grpo)
    a.loss.backward()
    b.loss.backward()
    assert torch.equal(a.loss, b.loss) and torch.equal(off.logp.grad, grpo.logp.grad)


def test_opsm_decides_per_response_with_mixed_token_advantages():
    """DeepSeek-V3.2's rule is per sequence: A_b is the response's mean advantage over its active tokens.
    response 0: r = 0.9 x 3 (KL = -ln 0.9 = 0.105 > 1e-4), A_t = -0.5, 0.25, -0.25 (A_b = -1/6): every
      token masked, the positive one too (a per-token rule would keep it: S = 0.225)
    response 1: r = 0.9 x 3, A_t = 0.5, -0.25, 0 (A_b = 1/12 > 0): every token kept, the negative one
      too (a per-token rule would mask it): S = 0.45, -0.225, 0
    loss = -(0.45 - 0.225) / 6 = -0.0375 (the per-token rule: -(0.225 + 0.45) / 6 = -0.1125);
    d loss / d logp = -A r / 6 on response 1's tokens (r inside [0.8, 1.2]), 0 on response 0's."""
    batch = batch_from_ratios([[0.9] * 3, [0.9] * 3], [[-0.5, 0.25, -0.25], [0.5, -0.25, 0.0]], [[1] * 3, [1] * 3])
    out = get_recipe("opsm").compute_loss(batch)
    assert out.metrics["opsm/masked_frac"].item() == pytest.approx(0.5)
    check(out, batch, -0.0375, [[0.0] * 3, [-0.5 * 0.9 / 6, 0.25 * 0.9 / 6, 0.0]])


def test_dppo_kl_by_hand_and_without_a_region_it_is_cispo():
    # (q = mu, p = pi) per token; binary KL D = q ln(q/p) + (1 - q) ln((1 - q)/(1 - p)):
    #   response 0 (A = +1): (0.5, 0.6): D = 0.0204 kept;  (0.2, 0.5): D = 0.193 > 0.05, p > q: masked
    #   response 1 (A = -1): (0.5, 0.3): D = 0.0872 > 0.05, p < q: masked;  (0.3, 0.6): p > q, A < 0: kept
    # w = p / q: 1.2 and 2; loss = -(1.2 x 1 x ln 0.6 + 2 x (-1) x ln 0.6) / 4 = 0.2 ln 0.6
    # d loss / d logp = -w A / 4 on the kept tokens: -0.3, 0 | 0, +0.5
    q, p = torch.tensor([[0.5, 0.2], [0.5, 0.3]], dtype=torch.float64), torch.tensor([[0.6, 0.5], [0.3, 0.6]],
                                                                                       dtype=torch.float64)
    logp = p.log().requires_grad_(True)
    batch = PolicyBatch(logp=logp, old_logp=p.log(), rollout_logp=q.log(), mask=torch.ones(2, 2, dtype=torch.float64),
                        advantages=torch.tensor([[1.0, 1.0], [-1.0, -1.0]], dtype=torch.float64))
    out = get_recipe("dppo_kl").compute_loss(batch)
    check(out, batch, 0.2 * math.log(0.6), [[-0.3, 0], [0, 0.5]])
    assert out.metrics["dppo_kl/masked_frac"].item() == 0.5
    # no region (both deltas inf): CISPO against mu clamped to [0, 10], bit for bit
    random = torch.Generator().manual_seed(1)
    rollout = -2 + torch.randn(3, 6, generator=random, dtype=torch.float64)
    logp = (rollout + 0.8 * torch.randn(3, 6, generator=random, dtype=torch.float64)).requires_grad_(True)
    free = PolicyBatch(logp=logp, old_logp=logp.detach(), rollout_logp=rollout,
                       advantages=torch.randn(3, 1, generator=random, dtype=torch.float64).expand(3, 6),
                       mask=(torch.rand(3, 6, generator=random) > 0.2).double())
    a = get("dppo_kl")(free, delta_low=math.inf, delta_high=math.inf)
    b = get("cispo")(free, eps_low=1.0, eps_high=9.0)
    (grad_a,), (grad_b,) = torch.autograd.grad(a.loss, logp), torch.autograd.grad(b.loss, logp)
    assert torch.equal(a.loss, b.loss) and torch.equal(grad_a, grad_b)
    # DPPO+KL adds kl_coef x the token mean of (log pi / mu)^2
    plus = get("dppo_kl")(free, kl_coef=0.1).loss - get("dppo_kl")(free).loss
    expected = 0.1 * ((logp.detach() - rollout) ** 2 * free.mask).sum() / free.mask.sum()
    assert plus.item() == pytest.approx(expected.item(), rel=1e-12)


def test_dppo_pkl_by_hand_prime_rls_dppo_plus_kl():
    # prime-rl's default loss: mask where pi - mu > 0.2 (A > 0) or < -0.2 (A <= 0), w = pi/mu uncapped,
    # plus 1e-3 (ln pi/mu)^2 on every token, masked or not; (q = mu, p = pi) per token:
    #   response 0 (A = +1): (0.01, 0.15): p - q = 0.14 kept, w = 15 (dppo_kl would cap it at 10);
    #                        (0.2, 0.5): p - q = 0.3 masked
    #   response 1 (A = -1): (0.5, 0.2): p - q = -0.3 masked;  (0.3, 0.6): p > q, A < 0: kept, w = 2
    # policy term: -(15 ln 0.15 - 2 ln 0.6) / 4; KL term: 1e-3 (ln^2 15 + ln^2 2.5 + ln^2 0.4 + ln^2 2) / 4
    # d loss / d logp = -w A / 4 on the kept tokens + 2e-3 ln(pi/mu) / 4 on every token
    q, p = (torch.tensor(rows, dtype=torch.float64) for rows in ([[0.01, 0.2], [0.5, 0.3]], [[0.15, 0.5], [0.2, 0.6]]))
    logp = p.log().requires_grad_(True)
    batch = PolicyBatch(logp=logp, old_logp=p.log(), rollout_logp=q.log(), mask=torch.ones(2, 2, dtype=torch.float64),
                        advantages=torch.tensor([[1.0, 1.0], [-1.0, -1.0]], dtype=torch.float64))
    ln = math.log
    kl_term = 1e-3 * (ln(15) ** 2 + ln(2.5) ** 2 + ln(0.4) ** 2 + ln(2) ** 2) / 4
    assert kl_term == pytest.approx(0.00237329, rel=1e-5)  # on paper: 1e-3 (7.33354 + 2 x 0.83959 + 0.48045) / 4
    out = get_recipe("dppo_pkl").compute_loss(batch)
    check(out, batch, -(15 * ln(0.15) - 2 * ln(0.6)) / 4 + kl_term,
          [[-15 / 4 + 0.5e-3 * ln(15), 0.5e-3 * ln(2.5)], [0.5e-3 * ln(0.4), 2 / 4 + 0.5e-3 * ln(2)]])
    assert out.metrics["dppo_tv/masked_frac"].item() == 0.5
    assert out.metrics["dppo_tv/divergence_mean"].item() == pytest.approx((0.14 + 0.3 + 0.3 + 0.3) / 4)
    assert get_recipe("dppo_pkl").params == {"delta_low": 0.2, "delta_high": 0.2, "kl_coef": 1e-3}
