"""megatron.core.parallel_state: the process groups and ranks engines.slime reads."""


def get_data_parallel_group(with_context_parallel=False):
    raise NotImplementedError("stand-in")


def get_data_parallel_rank(with_context_parallel=False):
    raise NotImplementedError("stand-in")


def get_tensor_model_parallel_rank():
    raise NotImplementedError("stand-in")


def is_pipeline_last_stage(ignore_virtual=False):
    raise NotImplementedError("stand-in")
