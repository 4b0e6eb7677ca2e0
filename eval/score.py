"""Score every not-yet-scored checkpoint of runs on one or more lm-eval tasks, in one process.

    python -m eval.score --run-dir DIR [DIR ...] --tasks NAME [NAME ...] --settings-json JSON

Several run folders (a packed evaluate job, grid.jobs.run_packs): scored one after another, each as if
alone (its own locks and files; harness.cli.run_each), lm-eval imported once.

JSON is the eval settings of the run's evaluate job (grid.settings.Eval.job_settings; the config's
whole eval section is accepted too), shared by every task, checked and completed with the defaults
of the config schema (grid.config.check_eval_settings): k, temperature, top_p, max_gen_toks,
seed, backend (an lm-eval model name, eval/__init__.py; null = the one the run's engine names),
server {url, model, ...}, data {aime24: path}, problems {task: n} (a prefix of each task's
problems), batch_size (tiny). One set of settings for all tasks: each checkpoint's model is built
once (the server back end: its weights swapped in once) and scores every task that has no score
for it yet.
Each task is still scored by its own lm-eval `evaluate` call, so its samples are those of scoring
it alone (the tiny back end seeds its generation per chunk of one call's requests).
Writes DIR/eval/<task>.jsonl per task (atomically, in step order), one line per checkpoint:
{"step", "score" (avg@k), "k", "per_problem" (correct counts out of k, problem order),
 "n_problems", "pass_at_k", "maj_at_k", "seed", "task", "task_version", "eval_key"}.
Every line scored is also kept in DIR/eval/.<task>.scores.jsonl, appended as each checkpoint is
done and never deleted by Snakemake (it is not a declared output): a killed or rerun job re-scores
only the checkpoints that have no line there under the same eval key (harness.identity.eval_key:
the task's own settings and a digest of its prompts, so changing one task's problem count or
prompt re-scores that task only).
A run that diverged before its first checkpoint gets empty files; bad input fails before any write.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys
import time
from pathlib import Path

# lm-eval and datasets must never reach for the Hub unasked (the cluster nodes are offline too).
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from lm_eval.api.registry import get_model  # noqa: E402
from lm_eval.evaluator import evaluate  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402
from lm_eval.tasks._yaml_loader import load_yaml  # noqa: E402

from grid.config import ConfigError, check_eval_settings  # noqa: E402
from harness.cli import run_each  # noqa: E402
from harness.identity import eval_key  # noqa: E402
from harness.run import RunDir  # noqa: E402

TASKS_DIR = Path(__file__).parent / "tasks"
FILTER = "all_k"  # the filter name in every task YAML


class ScoreError(ValueError):
    """Bad input to the scorer: reported before any checkpoint is scored."""


def check_settings(settings: dict) -> dict:
    """The eval settings with the schema's defaults filled in; a clear error naming the key otherwise."""
    try:
        out = check_eval_settings(settings)
    except ConfigError as error:
        raise ScoreError(str(error)) from None
    if out["backend"] is not None:
        try:
            backend(out["backend"]).check_settings(out)
        except ValueError as error:
            raise ScoreError(str(error)) from None
    return out


def backend(name: str):
    """The back end `name` (an lm-eval model class, registered by eval/__init__.py)."""
    try:
        return get_model(name)
    except ValueError as error:
        raise ScoreError(f"eval.backend: {error}") from None


def load_task(name: str, settings: dict):
    """The lm-eval task `name` from eval/tasks/, with k, sampling and data from the settings.

    Loads the dataset, so a missing or empty data file fails here, before any scoring.
    Returns lm-eval's task dict ({"tasks": {name: Task}, ...}) ready for `evaluate`.
    """
    settings = check_settings(settings)
    metadata = {"data": settings.get("data") or {}, "problems": settings.get("problems") or {}}
    manager = TaskManager(include_path=str(TASKS_DIR), include_defaults=False, metadata=metadata)
    if name not in manager.all_subtasks:
        raise ScoreError(f"unknown eval task {name!r}; tasks in {TASKS_DIR}: {manager.all_subtasks}")
    config = load_yaml(manager.task_index[name].yaml_path, resolve_func=True)
    k = settings["k"]
    generation = dict(config["generation_kwargs"], temperature=float(settings["temperature"]),
                      top_p=float(settings["top_p"]), do_sample=settings["temperature"] > 0)
    if settings["max_gen_toks"] is not None:
        generation["max_gen_toks"] = settings["max_gen_toks"]
    config.update(repeats=k, generation_kwargs=generation,
                  filter_list=[{"name": FILTER, "filter": [{"function": "take_first_k", "k": k}]}])
    return manager.load(config)


def prompts_digest(task) -> str:
    """A digest of every prompt the task sends (its template over its problems), for the eval key:
    a score made under another prompt or other problems is not reused."""
    digest = hashlib.sha256()
    for doc in task.test_docs():
        digest.update(task.doc_to_text(doc).encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def checkpoints(run: RunDir) -> dict[int, Path]:
    """step -> checkpoint directory, in step order.

    A run that diverged before its first checkpoint has none, and that is a result, not an
    error (its status says "diverged"); any other run without checkpoints is an error."""
    found = run.checkpoints()
    if not found and (run.read_status() or {}).get("status") != "diverged":
        raise ScoreError(f"no checkpoints (step_<N>/) under {run.checkpoints_dir}")
    return found


def engine_backend(run: RunDir) -> str:
    """The eval back end of the engine that trained the run (its config.json names the engine)."""
    from harness import engine as engines

    if not run.config_path.is_file():
        raise ScoreError(f"{run.config_path} is missing: not a run directory")
    try:
        return engines.get(run.read_config()["engine"]).eval_backend
    except KeyError as error:
        raise ScoreError(f"{run.config_path}: {error.args[0]}") from None


def score_checkpoint(lm, task_dict: dict, name: str, step: int, settings: dict, key: str) -> dict:
    """One eval line: lm-eval's aggregated metrics and per-problem correct counts."""
    out = evaluate(lm=lm, task_dict=task_dict, bootstrap_iters=0, log_samples=True, verbosity="WARNING")
    metrics = out["results"][name]
    samples = sorted(out["samples"][name], key=lambda s: s["doc_id"])
    task = task_dict["tasks"][name]
    return {"step": step, "score": metrics[f"avg_at_k,{FILTER}"], "k": settings["k"],
            "per_problem": [int(s["n_correct"]) for s in samples], "n_problems": len(samples),
            "pass_at_k": metrics[f"pass_at_k,{FILTER}"], "maj_at_k": metrics[f"maj_at_k,{FILTER}"],
            "seed": settings["seed"], "task": name, "task_version": task.VERSION, "eval_key": key}


def score_run(run_dir: str | Path, tasks: list[str], settings: dict, *, log=None) -> list[dict]:
    """Score the run's unscored checkpoints on every task of `tasks`; returns the new lines, in step
    order and, within a step, in the order of `tasks`. One scorer per run and task: it holds
    the run's evaluate-<task> lock of each task (RunDir.lock; RunLocked otherwise)."""
    run = RunDir(run_dir)
    settings = check_settings(settings)
    if isinstance(tasks, str) or not tasks or len(set(tasks)) != len(tasks):
        raise ScoreError(f"give each eval task to score once, and at least one; got {list(tasks)}")
    found = checkpoints(run)
    task_dicts = {name: load_task(name, settings) for name in tasks}  # every task loads before any write
    if settings["backend"] is None:
        settings = check_settings({**settings, "backend": engine_backend(run)})
    with contextlib.ExitStack() as locks:
        for name in tasks:
            locks.enter_context(run.lock(f"evaluate-{name}", f"evaluate {name}"))
        return _score_unlocked(run, task_dicts, settings, found, log)


def _score_unlocked(run: RunDir, task_dicts: dict[str, dict], settings: dict, found: dict[int, Path],
                    log) -> list[dict]:
    # The run key too: a score is of these checkpoints, not of a retrained run in the same folder.
    run_key = run.read_config().get("run_key") if run.config_path.is_file() else None
    keys = {name: eval_key(name, task_dict["tasks"][name].VERSION, settings, run_key,
                           prompts_digest(task_dict["tasks"][name]))
            for name, task_dict in task_dicts.items()}
    done = {name: {int(row["step"]): row for row in run.read_scores(name) if row.get("eval_key") == keys[name]}
            for name in task_dicts}
    # step -> the tasks that have no score for it yet
    pending = {step: todo for step in found if (todo := [name for name in task_dicts if step not in done[name]])}
    scorer = backend(settings["backend"])
    for step in pending:  # every checkpoint is checked before the first is scored
        if problem := scorer.checkpoint_problem(found[step]):
            raise ScoreError(f"incomplete checkpoint: {problem}")
    rows = []
    if pending:
        with scorer.models(settings, [found[step] for step in pending]) as model_for:
            for step, todo in pending.items():
                lm = model_for(found[step])  # once per checkpoint, for all its tasks
                for name in todo:
                    start = time.perf_counter()
                    row = score_checkpoint(lm, task_dicts[name], name, step, settings, keys[name])
                    run.append_scores(name, [row])
                    done[name][step] = row
                    rows.append(row)
                    if log:
                        log(f"{name} step {step}: avg@{row['k']} {row['score']:.4f} "
                            f"({time.perf_counter() - start:.2f} s)")
    # The declared outputs last, whole: this run's checkpoints under these settings, in step order
    # (empty for a run that diverged before its first checkpoint).
    for name in task_dicts:
        run.write_eval(name, [done[name][step] for step in found])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.score", description=__doc__.split("\n")[0])
    parser.add_argument("--run-dir", required=True, nargs="+")
    parser.add_argument("--tasks", nargs="+", required=True, metavar="NAME", help="the lm-eval tasks to score")
    parser.add_argument("--settings-json", required=True, help="the eval settings of every task, as JSON")
    args = parser.parse_args(argv)
    try:
        settings = json.loads(args.settings_json)
    except json.JSONDecodeError as error:
        parser.error(f"--settings-json is not valid JSON: {error}")
    from eval.server import ServerError

    def work(run_dir: str):
        try:
            return score_run(run_dir, args.tasks, settings, log=lambda m: print(m, file=sys.stderr))
        except ServerError as error:  # an unreachable or failing server: bad input, one clear line
            raise ScoreError(str(error)) from None

    return run_each("eval.score", args.run_dir, work, lambda run_dir, rows, seconds: "\neval.score: ".join(
        [f"{sum(row['task'] == task for row in rows)} checkpoint(s) of {run_dir} scored on {task}"
         for task in args.tasks] + [f"done in {seconds:.2f} s"]))

if __name__ == "__main__":
    sys.exit(main())
