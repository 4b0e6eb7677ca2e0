"""A fabricated grid with an equal tuning budget (config tuning; grid.tuning): its config and
finished runs whose test score is chosen, for the pick and its report (tests/analysis/test_tuning.py)
and its MLflow sync (tests/tracking/test_track.py)."""
from __future__ import annotations

import json

from grid.folder import GridDir
from harness.run import RunDir
from harness.run_config import recipe_fingerprint

STEPS, EVAL_EVERY = 20, 5
TUNING = {"seeds": [10, 11], "recipes": {"grpo": {"param": ["eps_low", "eps_high"], "values": [0.2, 0.1]},
                                        "sat_grpo": {"param": "alpha", "values": [0.9, 0.5]}}}
CLAIM = {"name": "sat_beats_grpo", "kind": "recipes", "recipe": "sat_grpo", "versus": "grpo", "lag": 8,
         "expect": "greater", "smallest_effect": 0.05}
# each candidate's test score on the tuning seeds: grpo's eps 0.1 is better, sat_grpo's two tie (alpha 0.9,
# listed first, keeps it)
TUNING_SCORE = {"grpo.eps_low_eps_high-0.2": 0.30, "grpo.eps_low_eps_high-0.1": 0.50,
                "sat_grpo.alpha-0.9": 0.40, "sat_grpo.alpha-0.5": 0.40}


def raw_config(results_dir="results", **changes) -> dict:
    """The grid's config before validation: 2 recipes x 2 candidates, lags 1 and 8, tuning seeds 10-11,
    confirmation seeds 0-2."""
    return {"grid": "tuned", "results_dir": str(results_dir), "engine": "tiny", "recipes": ["grpo", "sat_grpo"],
            "lags": [1, 8], "seeds": [0, 1, 2], "steps": STEPS, "eval_every": EVAL_EVERY,
            "engine_params": {"preset": "demo"}, "eval": {"tasks": ["tiny_test"]}, "baseline": "grpo",
            "tuning": TUNING, "claims": [CLAIM], **changes}


def write_run(config, model, run, score):
    """A finished run whose test score is ``score`` at every checkpoint (``model``: grid.settings.Config
    of ``config``, which resolves the run's config)."""
    folder = RunDir(GridDir.of(config).run(*run).path)
    run_config = folder.pin_config(model.run_config(run))
    folder.write_fingerprint(recipe_fingerprint(json.dumps(run_config["recipe"], sort_keys=True)))
    folder.append_metrics([{"step": step, "realized_lag": min(step, run[1]) or 0, "reward": 0.1}
                           for step in range(1, STEPS + 1)])
    folder.write_status("completed", STEPS, "")
    folder.write_eval("tiny_test", [{"step": step, "score": score, "k": 4, "per_problem": [], "n_problems": 0,
                                     "seed": 0, "task": "tiny_test", "task_version": 1}
                                    for step in range(EVAL_EVERY, STEPS + 1, EVAL_EVERY)])
