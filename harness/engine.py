"""The engine contract: the Engine record, the registry every engine registers into, and the
signals and errors an engine and the training entry point (engines.train) share.

An engine provides everything the workflow needs to know about it (docs/design.md):

    resolve_params(engine_params) -> dict   the config's engine_params checked and completed
                                            (ValueError naming the key); no file access
    resources[rule]                         default job resources per rule (config `resources` overrides);
                                            train's slurm_extra asks for the time-limit warning signal
    supplies, supplies_note                 what of the sampler's distribution beyond the sampled token
                                            it fills in PolicyBatch.sampler (stabilizers.SAMPLER_NEEDS),
                                            and why not more: a recipe whose loss needs more is refused
                                            by the config check (check_supplies), before any job
    step_minutes                            an upper estimate of one training step's wall time (minutes):
                                            with the train job's runtime it sets the training job's retries
    packs_runs                              whether one train job trains a cell's runs of a look one after
                                            another in one process (and one evaluate job scores them): the
                                            start-up paid once (grid.jobs.run_packs); else a job per run
    train(run_config, run_dir) -> status    train or resume one run (a checked harness.run_config.RunConfig and
                                            its harness.run.RunDir); writes its status (RunDir.write_status)
    eval_backend                            the lm-eval model that scores its checkpoints, by its name
                                            in lm-eval's model registry (eval/__init__.py)
    check_run(run_config)                   optional: what else a run needs before its directory is
                                            written (the tiny engine: its warm-start model); given the
                                            RunConfig while RunConfig.check builds it
    prepare(engine_params, out_dir)         optional: a grid-wide step every run depends on (the
                                            tiny engine's warm-start model), writing prepare_outputs
    prepare_keys                            the resolved engine_params that step reads: it is given
                                            only these, so that changing another one (lr) does not
                                            redo it
    null_check(params, base_dir) -> report  optional: the lag-0 null check, a grid-wide step after
                                            prepare that every run waits for: with identical weights,
                                            the engine's importance ratio pi/mu must average 1 and stay
                                            near it (the tiny engine: engines/tiny/null_ratios.py). It
                                            raises ValueError with the numbers to refuse the grid.
                                            params: grid.settings.Config.null_check_params (the
                                            config's null_check settings and each distinct setting
                                            of the grid's recipes, reading only null_check_keys)
    canary(run_config, run_dir) -> report   optional: one run through the paths every job meets, run alone
                                            before every other train job of the grid (the cluster engine:
                                            on the cluster's own nodes and image, pushes, the lag, a save,
                                            a stop and a resume, so that a failure common to every job
                                            costs one job, not the grid). It trains the grid's heaviest
                                            run (grid.jobs.canary_run) in a scratch folder (grid.folder.
                                            GridDir.canary_dir), leaves its saves published as the run's
                                            checkpoints (engines.canary then scores one problem on them
                                            with the grid's eval command) and returns what it checked, or
                                            raises CanaryFailed naming each check that failed. Both
                                            engines have one; the workflow runs it where the config's
                                            ``canary`` (default: canary_by_default) says so
    canary_by_default                       whether a grid runs the canary unless its config says (the
                                            cluster engine: yes; the tiny engine's runs take seconds: no)
    arithmetic_version(engine_params)       the version of the arithmetic resolved engine params ask
                                            for (default: 1), recorded in each run's provenance.json;
                                            numbers that change are a new version, which the params
                                            (so the run key) carry (the tiny engine: params.py)

Adding an engine = a package under engines/ that calls ``harness.engine.register(Engine(...))``
in its ``__init__``, or any importable module named in $STALEBENCH_ENGINES (comma separated) that
does. The packages are found on the ``engines`` package's path when an engine is first looked up
(importlib, not a static import: harness/ imports only stabilizers/). Nothing in workflow/rules/
names an engine. Callables are imported lazily by the engine packages, so looking an engine up
does not import torch.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable

RULES = ("prepare", "train", "evaluate", "aggregate", "track")
ENGINES_PACKAGE = "engines"  # the namespace whose sub-packages are the built-in engines


@dataclass(frozen=True)
class Engine:
    name: str
    resolve_params: Callable[[dict], dict]
    train: Callable[..., str]  # (harness.run_config.RunConfig, harness.run.RunDir) -> status
    eval_backend: str
    resources: dict[str, dict] = field(default_factory=dict)
    check_run: Callable[..., None] | None = None  # (harness.run_config.RunConfig) -> None
    prepare: Callable[[dict, Path], object] | None = None
    prepare_outputs: tuple[str, ...] = ()
    prepare_keys: tuple[str, ...] = ()
    null_check: Callable[[dict, Path | None], dict] | None = None
    null_check_keys: tuple[str, ...] = ()
    step_minutes: float = 0.0
    supplies: tuple[str, ...] = ()
    supplies_note: str = ""
    packs_runs: bool = False
    canary: Callable[..., dict] | None = None  # (harness.run_config.RunConfig, harness.run.RunDir) -> report
    canary_by_default: bool = False
    arithmetic_version: Callable[[dict], int] = lambda params: 1

    def __post_init__(self) -> None:
        unknown = sorted(set(self.resources) - set(RULES))
        if unknown:
            raise ValueError(f"engine {self.name!r}: resources for unknown rule(s) {unknown}; rules: {list(RULES)}")
        if len({self.prepare is None, not self.prepare_outputs, not self.prepare_keys}) > 1:
            raise ValueError(f"engine {self.name!r}: prepare, prepare_outputs and prepare_keys go together")
        if (self.null_check is None) != (not self.null_check_keys):
            raise ValueError(f"engine {self.name!r}: null_check and null_check_keys go together")
        if self.canary_by_default and self.canary is None:
            raise ValueError(f"engine {self.name!r}: canary_by_default without a canary")


def check_supplies(engine: Engine, recipe_name: str, loss: str) -> None:
    """A ValueError naming the recipe, its loss and the engine when the loss needs of the sampler's
    distribution what the engine cannot supply (read from source: no torch)."""
    from stabilizers import SAMPLER_NEEDS, loss_needs

    missing = [need for need in loss_needs(loss) if need not in engine.supplies]
    if missing:
        wanted = "; ".join(f"{need}: {SAMPLER_NEEDS[need]}" for need in missing)
        raise ValueError(f"recipe {recipe_name!r} (loss {loss!r}) needs {wanted}, which engine {engine.name!r} "
                         f"cannot supply" + (f" ({engine.supplies_note})" if engine.supplies_note else ""))


class CanaryFailed(Exception):
    """An engine's canary found what a job of the grid would meet and fail on; ``problems``: one line per
    failed check, naming the job, the step and the file."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


class TrainingDiverged(Exception):
    """Training met a non-finite loss, log-probability or weight; the message says which.
    Engines raise it where they detect it and catch it in one place, which writes status "diverged"."""


# The stop before a job's time limit. SLURM's warning signal (the engines' train resources ask for it
# with `sbatch --signal=URG@<seconds>`) reaches only the processes SLURM's proctrack plugin signals:
# every process of the job step with proctrack/linuxproc, but only the step's direct child with
# proctrack/cgroup (what cgroup-isolated GPU sites run): under Snakemake's job step that is the inner
# snakemake, which ignores SIGURG, and Apptainer's monitor drops SIGURG in any case. So a job reads
# the clock: at its start it learns its end time from SLURM's record of the job (job_end_time), and
# from then on ``now >= end - lead`` is the warning (lead: the train rule's --signal lead, which
# engines.slime.plan checks against the stop's budget). The signal stays a second trigger where it
# arrives. SIGURG because its default action is "ignore": Snakemake's own processes, which linuxproc
# signals too, must survive it (SIGUSR1 would kill them). An engine that sees the warning saves its
# resume state and raises TimeLimitReached; engines.train then exits with EXIT_RESUME, the job fails
# before its limit, and the retry resumes.
TIME_LIMIT_SIGNAL = signal.SIGURG
EXIT_RESUME = os.EX_TEMPFAIL  # 75
_UNKNOWN_TIMES = ("", "N/A", "NONE", "UNKNOWN", "UNLIMITED", "INVALID")


class TimeLimitReached(Exception):
    """Training stopped early because the job's time limit is near; its resume state is on disk."""


def parse_slurm_time(text: str) -> float | None:
    """SLURM's time of day in its standard format (``YYYY-MM-DDTHH:MM:SS``, the node's local time) as
    seconds since the epoch; None for what SLURM prints when there is none (N/A, Unknown, NONE)."""
    text = text.strip()
    if text.upper() in _UNKNOWN_TIMES:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp()
    except ValueError:
        raise ValueError(f"SLURM end time {text!r} is not in SLURM's standard format YYYY-MM-DDTHH:MM:SS") from None


def job_end_time(environ=os.environ) -> tuple[float | None, str]:
    """The SLURM job's end time (epoch seconds) and where it was read; None outside a SLURM job or
    where SLURM knows none (no time limit). $SLURM_JOB_END_TIME where the site's SLURM sets it, else
    ``squeue -h -j $SLURM_JOB_ID -o %e`` (SLURM_TIME_FORMAT=standard: a user's own format would not parse)."""
    job = environ.get("SLURM_JOB_ID")
    if not job:
        return None, "not a SLURM job (no SLURM_JOB_ID)"
    given = environ.get("SLURM_JOB_END_TIME", "")
    if given.isdigit() and int(given) > 0:
        return float(given), "SLURM_JOB_END_TIME"
    try:
        result = subprocess.run(["squeue", "-h", "-j", job, "-o", "%e"], capture_output=True, text=True, timeout=60,
                                env={**environ, "SLURM_TIME_FORMAT": "standard"})
    except (OSError, subprocess.TimeoutExpired) as error:
        return None, f"squeue failed ({error})"
    if result.returncode:
        return None, f"squeue failed ({result.stderr.strip()})"
    return parse_slurm_time(result.stdout), f"squeue -j {job} -o %e ({result.stdout.strip() or 'empty'})"


@dataclass
class _TimeLimit:
    stop_at: float | None = None  # epoch seconds: end - lead
    clock: Callable[[], float] = time.time
    signalled: threading.Event = field(default_factory=threading.Event)


_LIMIT = _TimeLimit()


def watch_time_limit(lead_seconds: float | None = None, *, end_time: Callable[[], tuple[float | None, str]] = job_end_time,
                     clock: Callable[[], float] = time.time) -> str:
    """From now on the time limit is near once ``clock() >= end - lead_seconds`` (end: ``end_time()``, the
    job's end; no lead: no clock stop) or once TIME_LIMIT_SIGNAL arrives (engines poll time_limit_near).
    Returns a line saying which triggers are armed, for the job's log."""
    global _LIMIT
    end, source = end_time() if lead_seconds is not None else (None, "no stop lead given")
    _LIMIT = _TimeLimit(None if end is None else end - lead_seconds, clock)
    signal.signal(TIME_LIMIT_SIGNAL, lambda signum, frame: _LIMIT.signalled.set())
    if end is None:
        return f"time-limit stop: at SLURM's warning signal only ({source})"
    return (f"time-limit stop: at {datetime.fromtimestamp(_LIMIT.stop_at).isoformat(timespec='seconds')}, "
            f"{lead_seconds:g} s before the job's end (from {source}), or at SLURM's warning signal")


def stop_time() -> float | None:
    """When the clock says stop (epoch seconds), None where it does not (outside SLURM, no lead)."""
    return _LIMIT.stop_at


def time_limit_near() -> str | None:
    """What said the time limit is near (the clock or the signal), None while nothing has."""
    if _LIMIT.stop_at is not None and _LIMIT.clock() >= _LIMIT.stop_at:
        return "the clock: the job's end less the stop lead"
    return "SLURM's warning signal" if _LIMIT.signalled.is_set() else None


def merge_metrics(engine_metrics: dict, loss_metrics: dict) -> dict:
    """One metrics row from the engine's keys and the loss's namespaced diagnostics; a loss key that
    would overwrite an engine key raises instead of silently replacing a number."""
    clash = sorted(set(engine_metrics) & set(loss_metrics))
    if clash:
        raise ValueError(f"loss metric(s) {clash} collide with the engine's metrics; namespace them ('<loss>/...')")
    return {**engine_metrics, **loss_metrics}


_REGISTRY: dict[str, Engine] = {}
_DISCOVERED = False


def register(engine: Engine) -> Engine:
    """Add ``engine``; a second engine of the same name raises (nothing is silently replaced)."""
    if engine.name in _REGISTRY and _REGISTRY[engine.name] is not engine:
        raise ValueError(f"engine {engine.name!r} is registered twice")
    _REGISTRY[engine.name] = engine
    return engine


def _discover() -> None:
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    package = importlib.util.find_spec(ENGINES_PACKAGE)
    for module in pkgutil.iter_modules(package.submodule_search_locations if package else []):
        if module.ispkg:
            importlib.import_module(f"{ENGINES_PACKAGE}.{module.name}")
    for name in filter(None, (part.strip() for part in os.environ.get("STALEBENCH_ENGINES", "").split(","))):
        importlib.import_module(name)


def available() -> list[str]:
    _discover()
    return sorted(_REGISTRY)


def get(name: str) -> Engine:
    _discover()
    if name not in _REGISTRY:
        raise KeyError(f"unknown engine {name!r}; available: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]
