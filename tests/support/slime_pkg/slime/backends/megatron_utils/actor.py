"""slime.backends.megatron_utils.actor.MegatronTrainRayActor: what a stop's save uses (engines.slime.driver)."""


class MegatronTrainRayActor:
    def init(self, args, role, with_ref=False):
        self.args = args

    def save_model(self, rollout_id, force_sync=False):
        raise NotImplementedError("stand-in")
