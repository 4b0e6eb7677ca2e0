"""slime.utils.ppo_utils: the KL estimator engines.slime.loss calls."""


def compute_approx_kl(log_probs, log_probs_base, kl_loss_type, importance_ratio=None):
    raise NotImplementedError("stand-in: see tests/support/slime_standin.py")
