"""Run identity: the run key (a hash of the resolved run config) and the eval key (a hash of the settings that change a task's scores).

The run key names a run in MLflow and guards its directory: config.json pins the config a run
directory was started with (harness.run.RunDir.pin_config), and a different config is refused
before anything is written.
The eval key marks each score line, so that a score is reused only under the same settings.
"""
from __future__ import annotations

import hashlib
import json

# How the harness reaches an evaluation server, not what the server computes: changing one
# re-scores nothing.
SERVER_TRANSPORT_KEYS = ("url", "concurrency", "timeout", "max_retries", "command_prefix")
# Read by aggregation, not by scoring.
NOT_SCORING_KEYS = ("tasks", "selection_task", "fixed_step")


def _digest(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def run_key(run_config: dict) -> str:
    return _digest({k: v for k, v in run_config.items() if k != "run_key"})


def eval_key(task: str, task_version, settings: dict, run_key: str | None, prompts: str | None = None) -> str:
    """The key of ``task``'s scores of the run ``run_key`` (its checkpoints) under ``settings``
    (the eval section, defaults filled and the back end resolved): sampling, seed, back end and its
    model settings, data files, this task's problem count, the task's version, and ``prompts`` (a
    digest of the prompts the task sends: eval.score.prompts_digest), so that a changed prompt
    re-scores even where nobody bumped the version. Not another task's problem count, nor server
    transport."""
    body = {key: value for key, value in settings.items() if key not in NOT_SCORING_KEYS}
    body["problems"] = (settings.get("problems") or {}).get(task)
    body["server"] = {key: value for key, value in (settings.get("server") or {}).items()
                      if key not in SERVER_TRANSPORT_KEYS}
    return _digest({**body, "task": task, "task_version": task_version, "run_key": run_key, "prompts": prompts})
