"""slime.ray.rollout.RolloutManager: the calls of the constant-lag driver."""


class RolloutManager:
    def generate(self, rollout_id):
        raise NotImplementedError("stand-in")

    def save(self, rollout_id):
        raise NotImplementedError("stand-in")

    def dispose(self):
        raise NotImplementedError("stand-in")
