"""slime.ray.placement_group: what the constant-lag driver builds its actors with."""


def create_placement_groups(args):
    raise NotImplementedError("stand-in")


def create_rollout_manager(args, placement_group):
    raise NotImplementedError("stand-in")


def create_training_models(args, placement_groups, rollout_manager):
    raise NotImplementedError("stand-in")
