"""Every loss against values worked out by hand on small batches (float64; built in tests/support/hand_batches.py).

Each expected number is derived in the comments from the paper's formulas (methods.md), with the
ratios chosen so the arithmetic is short; the code under test is only called to be checked.
"""
import math

import pytest

from stabilizers import PolicyBatch, get, get_recipe, with_tis
from tests.support.hand_batches import batch_from_ratios, check, grpo_batch, tensor

e = math.exp


def test_grpo_token_mean():
    # loss = -(3.0 - 13.5) / 7 = 1.5; d loss / d logp = -A r / 7 where unclipped, 0 where clipped
    batch = grpo_batch()
    check(get("grpo")(batch), batch, 1.5,
          [[-1.1 / 7, 0, -0.7 / 7, 0], [1.8 / 7, 0, 8.0 / 7, 2.1 / 7]])


def test_grpo_sample_mean():
    # per response: 3.0 / 3 = 1.0 and -13.5 / 4 = -3.375; loss = -(1.0 - 3.375) / 2 = 1.1875
    batch = grpo_batch()
    check(get("grpo")(batch, aggregation="sample_mean"), batch, 1.1875,
          [[-1.1 / 6, 0, -0.7 / 6, 0], [1.8 / 8, 0, 8.0 / 8, 2.1 / 8]])


def test_grpo_dual_clip():
    # c = 3 bounds A < 0 tokens below by c A = -6: the r = 4 token's -8 becomes -6 (and loses its gradient).
    # token mean: -(3.0 - 11.5) / 7 = 8.5 / 7; sample mean: -(1.0 - 11.5 / 4) / 2 = 0.9375
    batch = grpo_batch()
    out = get("grpo")(batch, dual_clip_c=3.0)
    check(out, batch, 8.5 / 7, [[-1.1 / 7, 0, -0.7 / 7, 0], [1.8 / 7, 0, 0, 2.1 / 7]])
    assert out.metrics["clip/frac_dual"].item() == pytest.approx(1 / 7)
    check(get("grpo")(grpo_batch(), dual_clip_c=3.0, aggregation="sample_mean"), batch, 0.9375)


def test_grpo_against_rollout_and_metrics():
    # the same ratios against mu instead of old_logp give the same numbers
    batch = grpo_batch(against="rollout")
    out = get("grpo")(batch, ratio_against="rollout")
    check(out, batch, 1.5)
    # clipped with zero gradient: upper side r = 1.3 (A > 0); lower side r = 0.75 (A < 0): 1 of 7 each
    assert out.metrics["clip/frac_upper"].item() == pytest.approx(1 / 7)
    assert out.metrics["clip/frac_lower"].item() == pytest.approx(1 / 7)
    assert out.metrics["ratio/max"].item() == pytest.approx(4.0)


def test_gspo_both_aggregations():
    # responses of unequal length (3 and 4 active tokens):
    # s_0 = (1.1 * 1.3 * 0.7)^(1/3) = 1.001^(1/3) = 1.000333222 (inside [0.8, 1.2]), S_0 = +1 s_0
    # s_1 = (0.9 * 0.75 * 4.0 * 1.05)^(1/4) = 2.835^(1/4) = 1.297592318; A = -2 < 0 so S_1 = A max(s, 0.8) = -2 s_1
    # the default, GSPO's per-response mean: -mean_b S_b = -(s_0 - 2 s_1) / 2 = 0.797425707;
    #   d loss / d logp = -A_b s_b / (2 len_b) on each token of b (the 1/len of s_b's mean, the 1/2 of the mean over b)
    # token mean (length-weighted): -(3 s_0 - 8 s_1) / 7 = 1.054248411; d loss / d logp = -A_b s_b / 7
    s0, s1 = 1.001 ** (1 / 3), 2.835 ** (1 / 4)
    batch = grpo_batch()
    check(get("gspo")(batch), batch, -(s0 - 2 * s1) / 2,
          [[-s0 / 6] * 3 + [0], [2 * s1 / 8] * 4])
    assert -(s0 - 2 * s1) / 2 == pytest.approx(0.797425707, abs=1e-9)
    batch = grpo_batch()
    check(get("gspo")(batch, aggregation="token_mean"), batch, 1.054248411,
          [[-s0 / 7] * 3 + [0], [2 * s1 / 7] * 4])
    # gspo_mu: the same loss with the ratio against mu
    batch = grpo_batch(against="rollout")
    check(get_recipe("gspo_mu").compute_loss(batch), batch, 0.797425707, [[-s0 / 6] * 3 + [0], [2 * s1 / 8] * 4])


def test_tis_weight_on_grpo():
    # w = min(exp(old - rollout), 2): raw [0.5, 1, 3, 1 | 1, 2.5, 0.8, 1.2] -> [0.5, 1, 2, - | 1, 2, 0.8, 1.2]
    # sum w S = 0.55 + 1.2 + 1.4 - 1.8 - 3.2 - 6.4 - 2.52 = -10.77; loss = 10.77 / 7 = 1.538571429
    raw = [[0.5, 1.0, 3.0, 1.0], [1.0, 2.5, 0.8, 1.2]]
    batch = grpo_batch(tis_raw=raw)
    out = get_recipe("grpo_tis").compute_loss(batch)
    check(out, batch, 10.77 / 7, [[-0.55 / 7, 0, -1.4 / 7, 0], [1.8 / 7, 0, 6.4 / 7, 2.52 / 7]])
    assert out.metrics["tis/frac_capped"].item() == pytest.approx(2 / 7)
    assert out.metrics["tis/weight_mean"].item() == pytest.approx((0.5 + 1 + 2 + 1 + 2 + 0.8 + 1.2) / 7)
    # a floor of 0.9 lifts 0.5 -> 0.9 and 0.8 -> 0.9: 0.99 + 1.2 + 1.4 - 1.8 - 3.2 - 7.2 - 2.52 = -11.13
    weighted, _ = with_tis(grpo_batch(tis_raw=raw), cap=2.0, floor=0.9)
    assert get("grpo")(weighted).loss.item() == pytest.approx(11.13 / 7, abs=1e-9)
    # sample mean: -((0.55 + 1.2 + 1.4) / 3 + (-13.92) / 4) / 2 = 1.215
    weighted, _ = with_tis(grpo_batch(tis_raw=raw))
    assert get("grpo")(weighted, aggregation="sample_mean").loss.item() == pytest.approx(1.215, abs=1e-9)


def dppo_batch():
    # p and mu given directly: logp = log p, rollout_logp = log mu; r = p / mu
    p = [[0.5004, 0.502, 0.45, 0.0105], [0.19, 0.2005, 0.0995, 0.3]]
    mu = [[0.5, 0.5, 0.5, 0.01], [0.2, 0.2, 0.1, 0.3]]
    logp = tensor([[math.log(x) for x in row] for row in p]).requires_grad_(True)
    rollout = tensor([[math.log(x) for x in row] for row in mu])
    return PolicyBatch(logp=logp, old_logp=logp.detach().clone(), rollout_logp=rollout,
                       advantages=tensor([[1.0] * 4, [-1.0] * 4]), mask=tensor([[1, 1, 1, 1], [1, 1, 1, 0]]))


def test_dppo_both_aggregations():
    # M = 1[A (r - 1) <= 0 or |p - mu| <= 1e-3]; S = clipped GRPO surrogate (all r inside [0.8, 1.2]) times M
    #   A = +1: r = 1.0008 (|dp| 4e-4, kept)  1.004 (outward, |dp| 2e-3, MASKED)  0.9 (inward, kept)  1.05 (|dp| 5e-4, kept)
    #   A = -1: r = 0.95 (outward, |dp| 1e-2, MASKED)  1.0025 (inward, kept)  0.995 (|dp| 5e-4, kept)  (pad)
    # token mean: -(1.0008 + 0.9 + 1.05 - 1.0025 - 0.995) / 7 = -0.9533 / 7
    # sample mean: -((1.0008 + 0.9 + 1.05) / 4 + (-1.0025 - 0.995) / 3) / 2 = -(0.7377 - 0.665833333) / 2 = -0.035933333
    batch = dppo_batch()
    out = get("dppo")(batch)
    check(out, batch, -0.9533 / 7, [[-1.0008 / 7, 0, -0.9 / 7, -1.05 / 7], [0, 1.0025 / 7, 0.995 / 7, 0]])
    assert out.metrics["dppo/mask_rate"].item() == pytest.approx(2 / 7)
    check(get("dppo")(dppo_batch(), aggregation="sample_mean"), batch, -0.035933333)
    # a looser delta of 0.02 keeps every token: -(1.0008 + 1.004 + 0.9 + 1.05 - 0.95 - 1.0025 - 0.995) / 7
    check(get("dppo")(dppo_batch(), delta=0.02), batch, -1.0073 / 7)


# The SAT batch: d = log(pi / mu) given directly (r = e^d), 10 active tokens.
#   response 0, A = +1: d = 0.01, -0.02, -0.04, 0.10, (pad, pad)
#   response 1, A = -1: d = 0.03, 0.05, 0.06, -0.07, 0.08, -0.30
# |d| sorted: .01 .02 .03 .04 .05 .06 .07 .08 .10 .30
SAT_D = [[0.01, -0.02, -0.04, 0.10, 0.0, 0.0], [0.03, 0.05, 0.06, -0.07, 0.08, -0.30]]
SAT_ADV = [[1.0] * 6, [-1.0] * 6]
SAT_MASK = [[1, 1, 1, 1, 0, 0], [1] * 6]


def sat_batch():
    return batch_from_ratios([[e(d) for d in row] for row in SAT_D], SAT_ADV, SAT_MASK, against="rollout")


def test_sat_grpo_both_aggregations():
    # alpha = 0.8, n = 10: k = ceil(8) = 8 -> q = 0.08. Gated (|d| > q): d = 0.10 and d = -0.30.
    #   d = 0.10 > 0: c+ = 1 / (1 + (0.1/0.08)^2) = 1 / 2.5625 = 0.390243902, upper bound 1 + 0.2 c+ = 1.078048780;
    #       r = e^0.1 = 1.105170918 > 1.078 with A > 0: newly clipped, S = 1.078048780 (PPO: 1.105170918)
    #   d = -0.30 < 0: c- = 1 / (1 + (0.3/0.08)^2) = 1 / 15.0625 = 0.066390041, lower bound 1 - 0.2 c- = 0.986721992;
    #       A < 0: S = -max(e^-0.3, 0.986722) = -0.986721992
    # others inside [0.8, 1.2]: S = A e^d.
    #   response 0: e^.01 + e^-.02 + e^-.04 + 1.078048780 = 1.010050167 + 0.980198673 + 0.960789439 + 1.078048780 = 4.029087059
    #   response 1: -(e^.03 + e^.05 + e^.06 + e^-.07 + e^.08 + 0.986721992) = -6.145965057
    # token mean: -(4.029087059 - 6.145965057) / 10 = 0.211687800
    # sample mean: -(4.029087059 / 4 - 6.145965057 / 6) / 2 = 0.008527872
    batch = sat_batch()
    out = get("sat_grpo")(batch, alpha=0.8)
    grad = [[-e(0.01) / 10, -e(-0.02) / 10, -e(-0.04) / 10, 0, 0, 0],
            [e(0.03) / 10, e(0.05) / 10, e(0.06) / 10, e(-0.07) / 10, e(0.08) / 10, 0]]
    check(out, batch, 0.211687800, grad)
    m = {k: v.item() for k, v in out.metrics.items()}
    assert m["sat/q"] == pytest.approx(0.08)
    assert m["sat/gate_rate"] == pytest.approx(0.2)
    assert m["sat/c_min"] == pytest.approx(0.066390041)
    assert m["sat/eps_high_mean"] == pytest.approx((9 * 0.2 + 0.2 * 0.390243902) / 10)
    assert m["sat/eps_low_mean"] == pytest.approx((9 * 0.2 + 0.2 * 0.066390041) / 10)
    assert m["clip/frac_upper"] == pytest.approx(0.1) and m["clip/frac_lower"] == pytest.approx(0.1)
    assert m["sat/scope_global"] == 0.0
    check(get("sat_grpo")(sat_batch(), alpha=0.8, aggregation="sample_mean"), batch, 0.008527872)
    # paper default alpha = 0.9: k = 9 -> q = 0.10; only d = -0.30 is gated, now with c- = 1 / (1 + 3^2) = 0.1,
    # lower bound 1 - 0.02 = 0.98; response 0 is plain PPO:
    #   response 0: 1.010050167 + 0.980198673 + 0.960789439 + 1.105170918 = 4.056209197
    #   response 1: -(1.030454534 + 1.051271096 + 1.061836547 + 0.932393820 + 1.083287068 + 0.98) = -6.139243065
    # token mean: -(4.056209197 - 6.139243065) / 10 = 0.208303387
    check(get("sat_grpo")(sat_batch()), batch, 0.208303387)


def test_sat_fixed_both_aggregations():
    # q = 0.055 (fixed). Gated: 0.06, -0.07, 0.08, 0.10, -0.30. Changes where the contracted side binds:
    #   0.10, A>0: upper 1 + 0.2 / (1 + (0.1/0.055)^2) = 1.046449136 < e^.1 -> S = 1.046449136
    #   -0.30, A<0: lower 1 - 0.2 / (1 + (0.3/0.055)^2) = 0.993496372 -> S = -0.993496372
    #   -0.07, A<0: lower 1 - 0.2 / (1 + (0.07/0.055)^2) = 0.923659306 < e^-.07 = 0.932393820 -> unchanged
    #   0.06, 0.08 (A<0): only their upper side shrinks, which does not bind for A < 0 -> unchanged
    # response 0: 1.010050167 + 0.980198673 + 0.960789439 + 1.046449136 = 3.997487415
    # response 1: -(1.030454534 + 1.051271096 + 1.061836547 + 0.932393820 + 1.083287068 + 0.993496372) = -6.152739437
    # token mean: 0.215525202; sample mean: -(3.997487415 / 4 - 6.152739437 / 6) / 2 = 0.013042359
    batch = sat_batch()
    out = get("sat_fixed")(batch, threshold=0.055)
    check(out, batch, 0.215525202)
    assert out.metrics["sat/gate_rate"].item() == pytest.approx(0.5)
    check(get("sat_fixed")(sat_batch(), threshold=0.055, aggregation="sample_mean"), batch, 0.013042359)


def test_sat_gspo_both_aggregations():
    # rho_b = mean d of response b, broadcast to its tokens BEFORE the quantile (length-weighted):
    #   response 0 (A=+1): d = 0.02, 0.04 -> 0.03 (x2);  response 1 (A=+1): 0.10, 0.14, 0.12 -> 0.12 (x3)
    #   response 2 (A=-1): d = -0.05 -> -0.05 (x1)
    # |rho| sorted: .03 .03 .05 .12 .12 .12; alpha = 0.5: k = 3 -> q = 0.05; gated: response 1 (|-0.05| = q is not > q)
    #   c+ = 1 / (1 + (0.12/0.05)^2) = 1 / 6.76; upper bound 1 + 0.2 / 6.76 = 1.029585799 < e^.12 -> S = 1.029585799
    # sample mean (the default, one weight per response): -(e^.03 + 1.029585799 - e^-.05) / 3 = -0.369603636
    # token mean: -(2 e^.03 + 3 x 1.029585799 - e^-.05) / 6 = -0.699739507
    d = [[0.02, 0.04, 0.0], [0.10, 0.14, 0.12], [-0.05, 0.0, 0.0]]
    args = ([[e(x) for x in row] for row in d], [[1.0] * 3, [1.0] * 3, [-1.0] * 3],
            [[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    batch = batch_from_ratios(*args, against="rollout")
    out = get("sat_gspo")(batch, alpha=0.5, aggregation="token_mean")
    check(out, batch, -0.699739507, [[-e(0.03) / 6] * 2 + [0], [0] * 3, [e(-0.05) / 6, 0, 0]])
    assert out.metrics["sat/q"].item() == pytest.approx(0.05)
    assert out.metrics["sat/gate_rate"].item() == pytest.approx(0.5)
    # sample mean: each token of response b gets -A_b rho_b' / (3 len_b) where unclipped
    batch = batch_from_ratios(*args, against="rollout")
    check(get("sat_gspo")(batch, alpha=0.5), batch, -0.369603636,
          [[-e(0.03) / 6] * 2 + [0], [0] * 3, [e(-0.05) / 3, 0, 0]])
    # alpha = 0.6: k = ceil(3.6) = 4 -> q = 0.12, a tie: no token has |rho| > q, so nothing is gated (GSPO vs mu)
    out = get("sat_gspo")(batch_from_ratios(*args, against="rollout"), alpha=0.6)
    assert out.metrics["sat/gate_rate"].item() == 0.0
    assert out.loss.item() == pytest.approx(-(e(0.03) + e(0.12) - e(-0.05)) / 3, abs=1e-9)


@pytest.mark.parametrize("aggregation", ["token_mean", "sample_mean"])
def test_sat_random(aggregation):
    # 9 tokens with d = 0.05, A = +1 and one outlier d = 0.5 with A = 0 (its S = 0 whatever its bounds).
    # alpha = 0.9, n = 10: k = 9 -> q = 0.05; SAT gates only the outlier: c+ = 1 / (1 + 10^2) = 1/101.
    # SAT-GRPO: the outlier's contraction changes nothing: token mean S = 9 e^.05 / 10 = 0.946143987
    # sat_random moves that one contraction to a random active token: either the outlier again (same value)
    # or a d = 0.05 token, whose upper bound 1 + 0.2/101 = 1.001980198 < e^.05 clips it:
    #   (8 e^.05 + 1.001980198) / 10 = 0.941214897.  Sample mean (one response of 10 tokens) is the same.
    d = [[0.05] * 9 + [0.5]]
    adv = [[1.0] * 9 + [0.0]]
    def make():
        return batch_from_ratios([[e(x) for x in d[0]]], adv, [[1] * 10], against="rollout")
    sat = get("sat_grpo")(make(), aggregation=aggregation).loss.item()
    assert sat == pytest.approx(-0.946143987, abs=1e-9)
    values = []
    for seed in range(40):
        out = get("sat_random")(make(), seed=seed, aggregation=aggregation)
        assert out.metrics["sat_random/gate_rate"].item() == pytest.approx(0.1)
        values.append(out.loss.item())
        assert get("sat_random")(make(), seed=seed, aggregation=aggregation).loss.item() == values[-1]  # seeded
    outlier_chosen = [v == pytest.approx(-0.946143987, abs=1e-9) for v in values]
    other_chosen = [v == pytest.approx(-0.941214897, abs=1e-9) for v in values]
    assert all(a or b for a, b in zip(outlier_chosen, other_chosen))
    assert any(other_chosen) and any(outlier_chosen)
