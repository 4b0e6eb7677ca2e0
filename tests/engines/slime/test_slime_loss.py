"""engines.slime.loss driven through slime's calling convention (tests/support/slime_standin.py):
the loss and the logits' gradient equal those of the recipe called directly on the same [B, L] batch."""
from __future__ import annotations

import math

import pytest
import torch

from engines.slime import loss as slime_loss
from stabilizers import Recipe, load_recipes, offpolicy_diagnostics, recipe_from_dict
from tests.support import slime_standin
from tests.support.slime_batches import PADDED_VOCAB, args_for, direct_loss, make_sample_batch, padded
from tests.support.slime_standin import get_log_probs_and_entropy, slime_args, slime_loss_function

slime_standin.install()
torch.set_num_threads(1)

# Geo-RS's band (0.999-1.001) rejects every response of the random batch (zero gradient): its code
# path is checked with a band this batch passes
RECIPES = load_recipes(extra={"geo_rs_wide": {"loss": "grpo", "rollout_is": {"level": "geometric", "lower": 0.5,
                                                                             "upper": 2.0, "reweight": False}}})
TABLE1 = [name for name, recipe in RECIPES.items() if recipe.table1] + ["grpo_mu", "gspo_mu"]
FIELD = ["m2po", "icepop", "decoupled_ppo", "cispo", "cispo_old", "grpo_seq_tis", "grpo_seq_mis",  # beyond the paper
         "grpo_clip_higher", "geo_rs_wide", "sapo", "opsm", "dppo_kl", "dppo_pkl",  # issue 26 (grpo_sum_norm: slime refuses it by name)
         "p3o", "mu_grpo"]  # issue 40


def grad_of(loss, logits):
    (grad,) = torch.autograd.grad(loss, logits)
    return grad


@pytest.mark.parametrize("name", TABLE1 + FIELD)
def test_loss_and_gradient_match_the_stabilizer(name):
    recipe = RECIPES[name]
    logits, batch = make_sample_batch(seed=len(name))
    loss, logged = slime_loss_function(args_for(recipe), batch, logits, slime_loss.policy_loss)
    expected = direct_loss(logits, batch, recipe)

    torch.testing.assert_close(loss, expected.loss, rtol=1e-6, atol=1e-7)
    expected_grad = grad_of(expected.loss, logits)
    torch.testing.assert_close(grad_of(loss, logits), expected_grad, rtol=1e-5, atol=1e-7)
    assert expected_grad.abs().sum() > 0  # a real gradient, not two zeros
    # the stabilizer's diagnostics come out of slime's metric reduction unchanged (one micro-batch)
    for key, value in expected.metrics.items():
        torch.testing.assert_close(logged[key], value.to(logged[key].dtype), rtol=1e-6, atol=1e-7)


def test_offpolicy_diagnostics_are_logged_for_every_recipe():
    """ESS, chi^2 and k3 KL of the micro-batch (stabilizers._diagnostics) come out of slime's reduction."""
    logits, batch = make_sample_batch(seed=5)
    _, logged = slime_loss_function(args_for(RECIPES["grpo"]), batch, logits, slime_loss.policy_loss)
    length = max(batch["response_lengths"])
    expected = offpolicy_diagnostics(padded(batch["log_probs"], length), padded(batch["rollout_log_probs"], length),
                                     padded([m.float() for m in batch["loss_masks"]], length))
    assert 0 < expected["offpolicy/ess"] < 1
    for key, value in expected.items():
        torch.testing.assert_close(logged[key], value, rtol=1e-6, atol=1e-7)


def test_sample_mean_aggregation_uses_slimes_per_sample_normalisation():
    recipe = recipe_from_dict("sat_gspo_sm", {"loss": "sat_gspo",
                                             "params": {"aggregation": "sample_mean"}})
    assert slime_loss.per_token_loss_flag(recipe) is False
    logits, batch = make_sample_batch(seed=3)
    loss, _ = slime_loss_function(args_for(recipe), batch, logits, slime_loss.policy_loss)
    expected = direct_loss(logits, batch, recipe)
    torch.testing.assert_close(loss, expected.loss, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad_of(loss, logits), grad_of(expected.loss, logits), rtol=1e-5, atol=1e-7)


def test_tis_against_values_worked_by_hand():
    """w = min(exp(old_logp - log mu), C), C = 2 (methods.md); per-token GRPO objective times sg(w), token mean.

    Zero logits make every current log-prob -ln 16 (PADDED_VOCAB = 16), so the ratios and weights are
    the ones chosen here: old = -ln 16 - ln r and log mu = old - ln w_raw.
      sample 0, A = +1: r = 1.1, 1, 1;  w_raw = 0.5, 3, 10 -> w = 0.5, 2, (masked out)   w S = 0.55, 2
      sample 1, A = -1: r = 1;          w_raw = 1.5         -> w = 1.5                  w S = -1.5
    loss = -(0.55 + 2 - 1.5) / 3 = -0.35; 1 of the 3 active weights is capped (the masked 10 does not count);
    weight mean (0.5 + 2 + 1.5) / 3 = 4/3. d loss / d logp = -w A r / 3 = -0.55/3, -2/3, 0 | +0.5.
    """
    recipe = RECIPES["grpo_tis"]
    ln16 = math.log(16)
    # prompt 2 + response 3, prompt 2 + response 1: 8 packed positions
    logits = torch.zeros(1, 8, PADDED_VOCAB, requires_grad=True)
    tokens = [torch.tensor([1, 2, 3, 4, 5]), torch.tensor([6, 7, 8])]
    old = [torch.tensor([-ln16 - math.log(1.1), -ln16, -ln16]), torch.tensor([-ln16])]
    w_raw = [torch.tensor([0.5, 3.0, 10.0]), torch.tensor([1.5])]
    advantages = [torch.full((3,), 1.0), torch.full((1,), -1.0)]
    batch = {"unconcat_tokens": tokens, "total_lengths": [5, 3], "response_lengths": [3, 1],
             "loss_masks": [torch.tensor([1, 1, 0]), torch.tensor([1])], "log_probs": old,
             "rollout_log_probs": [o - w.log() for o, w in zip(old, w_raw)], "advantages": advantages,
             "returns": advantages, "ref_log_probs": old, "values": None, "multimodal_train_inputs": None}
    loss, logged = slime_loss_function(args_for(recipe), batch, logits, slime_loss.policy_loss)

    torch.testing.assert_close(loss, torch.tensor(-0.35), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(logged["tis/frac_capped"], torch.tensor(1 / 3), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(logged["tis/weight_mean"], torch.tensor(4 / 3), rtol=1e-6, atol=1e-7)
    # the logits' gradient: the row before each response token gets g (onehot(token) - 1/16), g = d loss / d logp
    expected_grad = torch.zeros(8, PADDED_VOCAB)
    for row, token, g in ((1, 3, -0.55 / 3), (2, 4, -2 / 3), (3, 5, 0.0), (6, 8, 0.5)):
        expected_grad[row] = -g / PADDED_VOCAB
        expected_grad[row, token] += g
    torch.testing.assert_close(grad_of(loss, logits)[0], expected_grad, rtol=1e-5, atol=1e-7)


def test_kl_and_entropy_terms_follow_slimes_flags():
    recipe = RECIPES["sat_grpo"]
    logits, batch = make_sample_batch(seed=11)
    args = args_for(recipe, use_kl_loss=True, kl_loss_coef=1e-3, kl_loss_type="low_var_kl", entropy_coef=0.01)
    loss, logged = slime_loss_function(args, batch, logits, slime_loss.policy_loss)

    _, current = get_log_probs_and_entropy(
        logits, args=slime_args(), unconcat_tokens=batch["unconcat_tokens"],
        total_lengths=batch["total_lengths"], response_lengths=batch["response_lengths"], with_entropy=True)
    masks = torch.cat(batch["loss_masks"]).float()
    tokens = masks.sum()
    kl = slime_standin.compute_approx_kl(torch.cat(current["log_probs"]), torch.cat(batch["ref_log_probs"]),
                                         "low_var_kl")
    entropy = torch.cat(current["entropy"])
    expected = (direct_loss(logits, batch, recipe).loss + 1e-3 * (kl * masks).sum() / tokens
                - 0.01 * (entropy * masks).sum() / tokens)
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(logged["entropy_loss"], (entropy * masks).sum() / tokens, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(logged["kl_loss"], (kl * masks).sum() / tokens, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("overrides, message", [
    ({"calculate_per_token_loss": False}, "--calculate-per-token-loss"),
    ({"use_rollout_routing_replay": True}, "routing_replay"),
    ({"use_tis": True}, "--use-tis"),
    ({"rollout_top_p": 0.9}, "top_p"),
    ({"stalebench_recipe": None}, "stalebench_recipe"),
    ({"stalebench_recipe": {"name": "x", "loss": "no_such_loss"}}, "no_such_loss"),
])
def test_inconsistent_slime_args_are_refused(overrides, message):
    logits, batch = make_sample_batch()
    args = args_for(RECIPES["grpo"])
    vars(args).update(overrides)
    with pytest.raises((ValueError, KeyError), match=message):
        slime_loss_function(args, batch, logits, slime_loss.policy_loss)


@pytest.mark.parametrize("flag, attribute, default", [(flag, attribute, default) for flag, attribute, default, _
                                                     in slime_loss.UNHANDLED_SLIME_OPTIONS])
def test_slime_options_that_change_the_loss_inputs_are_refused_by_name(flag, attribute, default):
    logits, batch = make_sample_batch()
    args = args_for(RECIPES["grpo"])
    assert getattr(args, attribute) == default  # the stand-in carries slime's default
    setattr(args, attribute, not default if isinstance(default, bool) else "set")
    with pytest.raises(ValueError, match=f"slime runs with {flag} "):
        slime_loss_function(args, batch, logits, slime_loss.policy_loss)


def test_missing_rollout_log_probs_is_refused():
    logits, batch = make_sample_batch()
    batch["rollout_log_probs"] = None  # what slime's data iterator gives for a key the rollout lacks
    with pytest.raises(ValueError, match="rollout_log_probs"):
        slime_loss_function(args_for(RECIPES["grpo"]), batch, logits, slime_loss.policy_loss)


def test_a_stabilizer_without_a_slime_normalisation_is_refused():
    recipe = Recipe(name="odd", loss="grpo", params={"aggregation": "seq_sum"})
    with pytest.raises(ValueError, match="no slime normalisation"):
        slime_loss.aggregation_of(recipe)
    with pytest.raises(ValueError, match="aggregation 'token_sum_norm' has no slime normalisation"):
        slime_loss.aggregation_of(RECIPES["grpo_sum_norm"])  # Dr.GRPO's constant: no slime reducer


@pytest.mark.slow  # dynamo traces slime's whole loss call
@pytest.mark.parametrize("name", ["sat_grpo", "gspo_tis"])
def test_the_entry_point_traces_without_a_graph_break(name):
    """slime's whole custom-loss call (log-probs, recipe, loss, metrics) traces with dynamo in one
    graph: no host sync inside Megatron's micro-batch loop (the recipe is parsed on the first call)."""
    import torch._dynamo

    recipe = RECIPES[name]
    logits, batch = make_sample_batch(seed=1)
    args = args_for(recipe)
    reducer = slime_standin.sum_of_sample_mean_factory(batch["response_lengths"], batch["loss_masks"], True)
    slime_loss.policy_loss(args, batch, logits, reducer)
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(lambda lg: slime_loss.policy_loss(args, batch, lg, reducer))(logits)
    assert explanation.graph_break_count == 0, [r.reason for r in explanation.break_reasons]


# (use_rollout_routing_replay, use_routing_replay) -> the replay they run; slime_validate_args turns
# (True, False) into (True, True) (slime/utils/arguments.py 2010-2011), so slime never runs (True, False)
# and R3's state is (True, True); tests/engines/slime/test_slime_upstream.py checks it on slime's own code
SLIME_REPLAY_STATES = {(False, False): None, (True, True): "r3", (False, True): "r2"}


@pytest.mark.parametrize("replay", [False, True, "r2"])
def test_each_routing_replay_needs_its_own_slime_flag(replay):
    from engines.slime.loss import check_args
    recipe = recipe_from_dict("x", {"loss": "grpo", "routing_replay": replay}, "test")
    for (rollout, recompute), runs in SLIME_REPLAY_STATES.items():
        args = slime_standin.slime_args(use_rollout_routing_replay=rollout, use_routing_replay=recompute,
                                        calculate_per_token_loss=True)  # grpo: token_mean
        if runs == recipe.replay:
            check_args(args, recipe)
        else:
            with pytest.raises(ValueError, match="routing_replay"):
                check_args(args, recipe)


def test_r3_is_also_accepted_before_slimes_implication():
    """The rollout's routing alone (what the launcher emits, before slime_validate_args) is R3 too."""
    from engines.slime.loss import check_args
    check_args(slime_standin.slime_args(use_rollout_routing_replay=True, calculate_per_token_loss=True),
               recipe_from_dict("x", {"loss": "grpo", "routing_replay": True}, "test"))


def test_dr_grpos_advantages_need_slimes_std_free_normalisation():
    from engines.slime.loss import check_args
    std_free = recipe_from_dict("x", {"loss": "grpo", "std_normalization": False}, "test")
    check_args(slime_standin.slime_args(calculate_per_token_loss=True, grpo_std_normalization=False), std_free)
    with pytest.raises(ValueError, match="std_normalization=False but slime runs with grpo_std_normalization=True"):
        check_args(slime_standin.slime_args(calculate_per_token_loss=True), std_free)
    with pytest.raises(ValueError, match="std_normalization=True but slime runs with grpo_std_normalization=False"):
        check_args(slime_standin.slime_args(calculate_per_token_loss=True, grpo_std_normalization=False),
                   recipe_from_dict("y", {"loss": "grpo"}, "test"))


def test_opsm_through_slime_masks_whole_responses_with_mixed_token_advantages():
    """Token advantages that differ within a response (as a token-level reward would give): slime's
    calling convention gives the stabilizer's per-sequence OPSM, loss and gradient, and a masked
    response has no gradient on any token while a kept one has gradient on its negative tokens too."""
    recipe = recipe_from_dict("opsm_wide", {"loss": "opsm", "params": {"delta": 0.0}})  # mask on any drift
    logits, batch = make_sample_batch(seed=7)
    batch["advantages"] = [torch.linspace(-1.0, 1.0, len(a)) + (0.4 if i % 2 else -0.4)  # signs mixed within
                           for i, a in enumerate(batch["advantages"])]
    batch["returns"] = list(batch["advantages"])
    loss, logged = slime_loss_function(args_for(recipe), batch, logits, slime_loss.policy_loss)
    expected = direct_loss(logits, batch, recipe)
    torch.testing.assert_close(loss, expected.loss, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad_of(loss, logits), grad_of(expected.loss, logits), rtol=1e-5, atol=1e-7)
    signs = [(torch.sign(a) * m).tolist() for a, m in zip(batch["advantages"], batch["loss_masks"])]
    assert any(1.0 in s and -1.0 in s for s in signs)  # the batch really mixes signs within responses
    # the per-response decision, recomputed here: A_b and the drift are means over b's active tokens
    _, current = get_log_probs_and_entropy(
        logits, args=slime_args(), unconcat_tokens=batch["unconcat_tokens"],
        total_lengths=batch["total_lengths"], response_lengths=batch["response_lengths"])
    masked_tokens, per_token_rule, active = 0.0, 0.0, 0.0
    for logp, old, adv, mask in zip(current["log_probs"], batch["log_probs"], batch["advantages"], batch["loss_masks"]):
        mask = mask.float()
        drift = ((old - logp.detach()) * mask).sum() / mask.sum().clamp(min=1)
        masked_tokens += float(mask.sum()) * float(((adv * mask).sum() < 0) and drift > 0)
        per_token_rule += float(((adv < 0).float() * mask).sum()) * float(drift > 0)
        active += float(mask.sum())
    assert logged["opsm/masked_frac"].item() == pytest.approx(masked_tokens / active, rel=1e-6)
    assert masked_tokens != per_token_rule  # the batch tells the two rules apart


def test_the_fingerprint_is_taken_on_the_trainer_and_a_different_loss_stops_it(monkeypatch, tmp_path):
    """At its first micro-batch the loss hook fingerprints the recipe where Megatron computes the loss
    and compares it with train/fingerprint.json (engines.train's record): equal, it writes its own."""
    from harness.run import RunDir
    from stabilizers import fingerprint

    recipe = RECIPES["grpo"]
    logits, batch = make_sample_batch(seed=2)
    monkeypatch.setattr(slime_loss, "_RECIPES", {})
    RunDir(tmp_path).write_fingerprint(fingerprint(RECIPES["gspo"]))  # the launcher recorded another loss
    with pytest.raises(ValueError, match="the trainer's stabilizer code or numerics are not the launcher's"):
        slime_loss_function(args_for(recipe, stalebench_run_dir=str(tmp_path)), batch, logits, slime_loss.policy_loss)
    RunDir(tmp_path).write_fingerprint(fingerprint(recipe))
    slime_loss_function(args_for(recipe, stalebench_run_dir=str(tmp_path)), batch, logits, slime_loss.policy_loss)
    assert (tmp_path / "train" / "fingerprint_trainer.json").read_text() == RunDir(tmp_path).fingerprint_path.read_text()
