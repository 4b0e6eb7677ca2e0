"""Small tiny-engine runs for tests: the engine parameters of a fast model and a run config built
on a base model (the ``base`` fixture of conftest.py builds one per test module)."""
from grid.expand import resolve_run_config

SMALL = {"preset": "demo", "width": 32, "heads": 2, "expert_hidden": 32, "top_k": 2, "warmstart_steps": 30,
         "warmstart_batch": 64, "prompts_per_step": 4, "samples_per_step": 4, "progress_every": 1000}


def config(base, recipe="grpo", lag=2, mode="interval", steps=6, eval_every=2, seed=0, extra_recipes=None,
           lag_queue=None, **params):
    """The run config of one run of a one-cell grid on the base model ``base`` (``extra_recipes``:
    the grid's own recipes; ``lag_queue``: the queue model of lag mode queue; ``params``: engine
    parameters over SMALL)."""
    grid = {"grid": "test", "engine": "tiny", "lag_mode": mode, "steps": steps, "eval_every": eval_every,
            "recipes": [recipe], "lags": [lag], "seeds": [seed], "engine_params": {**SMALL, **params},
            "extra_recipes": extra_recipes or {}, "lag_queue": lag_queue}
    run_config = resolve_run_config(grid, recipe, lag, seed)
    run_config["base_model"] = str(base)
    return run_config
