"""slime.rollout.rm_hub.async_rm: the pre-flight's model of slime's rule-based rewards, behind slime's signature."""
from engines.slime.reward_model import rule_reward


async def async_rm(args, sample, **kwargs):
    return rule_reward(args.rm_type)(sample.response, sample.label)
