"""The evaluate stage: lm-eval tasks (tasks/<family>/) and the model back ends that score checkpoints.

A back end is an lm-eval model (an `lm_eval.api.model.LM` class) found by name in lm-eval's model
registry. An engine names the one that scores its checkpoints (`Engine.eval_backend`); the config's
`eval.backend` may name another. Beyond lm-eval's LM interface, eval.score asks a back end for
three class methods:

    check_settings(settings)              raise ValueError naming the eval.* key it cannot use
    checkpoint_problem(checkpoint)        why a checkpoint directory cannot be scored (None: it can)
    models(settings, checkpoints)         a context manager, entered once per scoring job (and only
                                          when there is a checkpoint to score), yielding
                                          model_for(checkpoint) -> LM, called once per checkpoint

The back ends are registered lazily ("module:Class"), as lm-eval registers its own models, so that
naming one imports neither torch nor an HTTP client. A new back end: a class with these methods,
and its name here (or a `register_model` decorator in a module its engine imports).
"""
from lm_eval.api.registry import model_registry

# The names are those of the config's eval.backend, which every score's eval key records.
BACKENDS = {
    "tiny": "eval.lm_model:TinyCheckpointLM",  # the tiny engine's safetensors checkpoints, in process
    "server": "eval.server:SeededCompletionsLM",  # HF checkpoints served by SGLang, via OpenAI completions
}
for _name, _target in BACKENDS.items():
    model_registry.register(_name, target=_target)
