"""The run on disk: ``RunDir`` owns every path and file of one run folder, ``RunConfig`` is its
resolved config, typed and checked once per process.

    run = RunDir("results/demo/runs/grpo/lag1/seed0")
    run.read_config()        config.json: the resolved run config the folder was started with
    run.read_status()        train/status.json ({"status", "step", "message", ...}) or None
    run.read_metrics()       train/metrics.jsonl rows, one per training step
    run.checkpoints()        step -> train/checkpoints/step_<N>/
    run.eval_path(task)      eval/<task>.jsonl (one score line per checkpoint)
    run.read_fingerprint()   train/fingerprint.json: the recipe on the canned batch, as the job ran it

Layout (docs/design.md): config.json and provenance.json at the top; train/ (status.json,
metrics.jsonl, fingerprint.json, checkpoints/step_<N>/ and the engine's own files); eval/ (the
declared <task>.jsonl files and the score caches .<task>.scores.jsonl); locks/<name>.lock. No other
module spells these names: a stage that needs one asks this class. Every reader of a JSON or JSONL
file names the file (and the line) it could not read.
"""
from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

from harness.identity import run_key
from harness.io import (
    append_jsonl_atomic,
    read_json,
    read_jsonl,
    remove_temp_files,
    write_json_atomic,
    write_jsonl_atomic,
)
from harness.lock import writer_lock
from harness.run_config import BASE_MODEL, PinnedRun, recipe_fingerprint

CONFIG, PROVENANCE = "config.json", "provenance.json"
STATUS, METRICS, FINGERPRINT = "status.json", "metrics.jsonl", "fingerprint.json"
SAMPLES = "samples.jsonl"  # under train/: sampled completions at the evaluation steps (an engine's, if it keeps any)
STATUS_PATTERN = f"train/{STATUS}"  # relative to a run folder: the workflow's train output
# An engine's own files and folders under train/, by role (RunDir.engine_file): the cluster engine's
# resume checkpoints and HF saves, its job script and the settings slime reads, the marks of a
# time-limit stop, its per-rollout log, the trainer's loss fingerprint and the commit that ran.
ENGINE_FILES = {"resume_checkpoints": "megatron", "hf_saves": "hf", "job_script": "job.sh",
                "engine_settings": "slime_custom.yaml", "stop_requested": "stop_requested", "stopped": "stopped",
                "rollouts": "rollouts.jsonl", "trainer_fingerprint": "fingerprint_trainer.json",
                "engine_commit": "slime_commit.txt"}
_STEP_DIR = re.compile(r"^step_(\d+)$")
# A run's folder relative to the grid folder (grid.folder.GridDir.run); with its braces, also the
# rule files' wildcard pattern. RunDir.grid_dir reads it back.
RUN_FOLDER = "runs/{recipe}/lag{lag}/seed{seed}"
_RUN_FOLDER_PARTS = re.compile(r"^runs/[^/]+/lag\d+/seed\d+$")


def eval_file_pattern(task: str) -> str:
    """A task's score file relative to a run folder (the workflow's evaluate outputs)."""
    return f"eval/{task}.jsonl"


class RunDir:
    """One run folder; paths are properties, files are read and written by methods."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # ------------------------------------------------------------------ paths
    @property
    def config_path(self) -> Path:
        return self.path / CONFIG

    @property
    def provenance_path(self) -> Path:
        return self.path / PROVENANCE

    @property
    def grid_dir(self) -> Path:
        """The grid folder of a run folder laid out by RUN_FOLDER
        (<grid>/runs/<recipe>/lag<lag>/seed<seed>): what a run config's relative paths are under.
        ValueError naming the folder and the layout for a folder laid out otherwise."""
        parts = self.path.absolute().parts
        if len(parts) < 6 or not _RUN_FOLDER_PARTS.match("/".join(parts[-4:])):
            raise ValueError(f"{self.path} is not a run folder in a grid's layout "
                             f"(<grid>/{RUN_FOLDER.format(recipe='<recipe>', lag='<lag>', seed='<seed>')}, grid.folder.GridDir.run): a run config "
                             f"naming its base model relative to the grid folder needs one; pass the run folder "
                             f"the workflow plans, or an absolute base_model")
        return self.path.parents[3]

    @property
    def train_dir(self) -> Path:
        """The engine's folder: besides the files named here, it keeps its own (resume state, logs)."""
        return self.path / "train"

    def engine_file(self, role: str) -> Path:
        """train/<the file or folder of ``role``> (ENGINE_FILES); ValueError naming the roles otherwise."""
        if role not in ENGINE_FILES:
            raise ValueError(f"no engine file {role!r} in a run folder; the roles are {', '.join(ENGINE_FILES)}")
        return self.train_dir / ENGINE_FILES[role]

    @property
    def status_path(self) -> Path:
        return self.train_dir / STATUS

    @property
    def metrics_path(self) -> Path:
        return self.train_dir / METRICS

    @property
    def samples_path(self) -> Path:
        return self.train_dir / SAMPLES

    @property
    def fingerprint_path(self) -> Path:
        return self.train_dir / FINGERPRINT

    @property
    def checkpoints_dir(self) -> Path:
        return self.train_dir / "checkpoints"

    def checkpoint_path(self, step: int) -> Path:
        return self.checkpoints_dir / f"step_{step}"

    @property
    def eval_dir(self) -> Path:
        return self.path / "eval"

    def eval_path(self, task: str) -> Path:
        return self.path / eval_file_pattern(task)

    def scores_path(self, task: str) -> Path:
        """Every score of ``task`` ever computed for this run (eval.score's cache, not a declared output)."""
        return self.eval_dir / f".{task}.scores.jsonl"

    def lock_path(self, name: str) -> Path:
        return self.path / "locks" / f"{name}.lock"

    # ------------------------------------------------------------------ files
    def read_config(self) -> dict:
        """config.json; FileNotFoundError or ValueError naming the file."""
        if not self.config_path.is_file():
            raise FileNotFoundError(f"run output missing: {self.config_path}")
        return read_json(self.config_path)

    def read_pinned(self) -> PinnedRun:
        """config.json typed for the stages after training (``PinnedRun``); errors name the file."""
        return PinnedRun.of(self.read_config(), self.config_path)

    def pin_config(self, run_config: dict) -> dict:
        """Write config.json, or check that the one there is this config (same run key); returns
        the config with its run key. A folder holding another config is refused, nothing written."""
        run_config = {**run_config, "run_key": run_key(run_config)}
        if refusal := self.config_refusal(run_config):
            raise ValueError(refusal)
        if not self.config_path.exists():
            write_json_atomic(self.config_path, run_config)
        return run_config

    def config_refusal(self, run_config: dict) -> str | None:
        """Why this folder cannot hold ``run_config``: None when it has no config.json or one of the
        same run key; otherwise one message naming the folder, both run keys, how far it got and the
        values that differ. (grid.expand.refuse_changed_runs asks it of every run before any job.)"""
        if not self.config_path.exists():
            return None
        try:
            existing = read_json(self.config_path)
        except ValueError as error:
            return f"{error}; refusing to overwrite it"
        wanted = run_key(run_config)
        if run_key(existing) == wanted:
            return None
        changed = differences(existing, run_config)
        if [path for path, _, _ in changed] == ["base_model"] and run_config.get("base_model") == BASE_MODEL:
            return (f"{self.path} was started when run keys held the base model's path "
                    f"({existing.get('base_model')!r}), which changes when results/ moves; they now name "
                    f"it relative to the grid folder ({BASE_MODEL!r}). Its run key and its scores' eval "
                    f"keys are of the old form: nothing was overwritten — train it again in a new "
                    f"results_dir, or delete the folder")
        status = self.read_status()
        state = f"{status['status']} at step {status['step']}" if status else "not finished"
        shown = "; ".join(f"{path}: {old!r} -> {new!r}" for path, old, new in changed[:6])
        more = f" (and {len(changed) - 6} more)" if len(changed) > 6 else ""
        return (f"{self.path} ({state}) holds a run with a different config: run key {run_key(existing)}, the "
                f"config asks for {wanted} (keys differing: {shown}{more}); nothing was overwritten — restore "
                f"the setting, or train the changed grid under another grid name or results_dir")

    def read_status(self) -> dict | None:
        """train/status.json, or None before training has ended once."""
        return read_json(self.status_path) if self.status_path.is_file() else None

    def write_status(self, status: str, step: int, message: str, **extra) -> None:
        """The engine's last word on a run (completed | diverged | failed), written last."""
        write_json_atomic(self.status_path, {"status": status, "step": step, "message": message, **extra})

    def read_metrics(self) -> list[dict]:
        return read_jsonl(self.metrics_path)

    def append_metrics(self, rows: list[dict]) -> None:
        """Append training steps; a step not after the last one raises (two writers on one run)."""
        append_jsonl_atomic(self.metrics_path, rows, increasing="step")

    def read_samples(self) -> list[dict]:
        """The run's sampled completions ([] for an engine or a run that kept none)."""
        return read_jsonl(self.samples_path)

    def write_samples(self, rows: list[dict]) -> None:
        write_jsonl_atomic(self.samples_path, rows)

    def keep_metrics_through(self, step: int) -> None:
        """Cut metrics.jsonl back to the steps up to ``step`` (a resume redoes the later ones)."""
        write_jsonl_atomic(self.metrics_path, [row for row in self.read_metrics() if row["step"] <= step])

    def checkpoints(self) -> dict[int, Path]:
        """step -> checkpoint folder, in step order ({} before the first checkpoint)."""
        root = self.checkpoints_dir
        found = {int(m.group(1)): p for p in root.iterdir()
                 if (m := _STEP_DIR.match(p.name)) and p.is_dir()} if root.is_dir() else {}
        return dict(sorted(found.items()))

    def read_eval(self, task: str) -> list[dict]:
        return read_jsonl(self.eval_path(task))

    def write_eval(self, task: str, rows: list[dict]) -> None:
        write_jsonl_atomic(self.eval_path(task), rows)

    def read_scores(self, task: str) -> list[dict]:
        return read_jsonl(self.scores_path(task))

    def append_scores(self, task: str, rows: list[dict]) -> None:
        append_jsonl_atomic(self.scores_path(task), rows)

    def read_fingerprint(self) -> dict | None:
        """train/fingerprint.json (stabilizers.fingerprint of the recipe as the train job ran it), or
        None for a run trained before train jobs recorded it."""
        return read_json(self.fingerprint_path) if self.fingerprint_path.is_file() else None

    def write_fingerprint(self, fingerprint: dict) -> None:
        write_json_atomic(self.fingerprint_path, fingerprint)

    def check_fingerprint(self) -> None:
        """The loss that ran is the loss configured: train/fingerprint.json is the fingerprint of the
        recipe in config.json, computed now (once per recipe per process). ValueError naming the run
        and both hashes otherwise, or naming the missing file."""
        recorded = self.read_fingerprint()
        if recorded is None:
            raise ValueError(f"{self.fingerprint_path} is missing: the run was trained before train jobs "
                             f"recorded the loss that ran; train it again (python -m engines.train --run-dir "
                             f"{self.path} --config-json {self.config_path} records it and resumes)")
        expected = recipe_fingerprint(json.dumps(self.read_config().get("recipe"), sort_keys=True))
        if recorded.get("digest") != expected["digest"]:
            raise ValueError(f"{self.path}: the loss that ran is not its recipe's (train/fingerprint.json "
                             f"{recorded.get('digest')}, recipe in config.json {expected['digest']}): the train "
                             f"job's stabilizer code or parameters differ from this checkout's")

    def read_provenance(self) -> dict | None:
        return read_json(self.provenance_path) if self.provenance_path.is_file() else None

    def write_provenance(self, record: dict) -> None:
        write_json_atomic(self.provenance_path, record)

    def remove_train_temp_files(self) -> None:
        """The temp files of atomic writes that a kill cut off, in the folders the train lock guards
        (the run folder's top and train/); call it holding that lock."""
        remove_temp_files(self.path)
        remove_temp_files(self.train_dir)

    def lock(self, name: str, purpose: str) -> contextlib.AbstractContextManager:
        """The exclusive writer lock ``locks/<name>.lock`` (harness.lock; RunLocked if held)."""
        return writer_lock(self.lock_path(name), purpose)


def differences(old, new, prefix: str = "") -> list[tuple[str, object, object]]:
    """(dotted key, old value, new value) of every leaf where two configs differ (the run key aside)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [change for key in sorted(set(old) | set(new)) if key != "run_key" or prefix
                for change in differences(old.get(key), new.get(key), f"{prefix}{key}" if not prefix
                                          else f"{prefix}.{key}")]
    return [] if old == new else [(prefix, old, new)]
