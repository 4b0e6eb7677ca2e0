"""slime.ray.actor_group.RayTrainGroup: the calls of the constant-lag driver."""


class RayTrainGroup:
    def __init__(self, args):
        self.args = args
        self._actor_handlers = []

    def async_train(self, rollout_id, rollout_data_ref, external_data=None):
        raise NotImplementedError("stand-in")

    def update_weights(self):
        raise NotImplementedError("stand-in")

    def save_model(self, rollout_id, force_sync=False):
        raise NotImplementedError("stand-in")
