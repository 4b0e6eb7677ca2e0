"""slime.observability.logging_utils: what the driver and the metrics hook use."""


def configure_logger():
    pass


def init_tracking(args):
    pass


def finish_tracking(args):
    pass


def log(args, metrics, step_key):
    pass
