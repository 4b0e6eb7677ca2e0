"""What engines.slime.loss calls (the in-process stand-in is tests/support/slime_standin.py)."""


def get_log_probs_and_entropy(logits, *, args, unconcat_tokens, total_lengths, response_lengths, with_entropy=False):
    raise NotImplementedError("stand-in: see tests/support/slime_standin.py")
