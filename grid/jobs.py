"""The Snakemake plumbing of the workflow (workflow/rules/common.smk): what a config means to
Snakemake rather than to a stage. ``-C`` values retyped, each rule's job resources, the training
job's retries, the runs each train and evaluate job packs. The grid folder's file names: grid.folder.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from grid.config import ConfigError
from grid.settings import Config
from harness import engine as engines
from stabilizers.recipes import recipe_from_named_dict


def retype_cli_values(value):
    """Snakemake reads a list or mapping given with ``-C`` (``lags=[1,8]``) through YAML's
    BaseLoader, which leaves every leaf a string ('1', 'null'); read each leaf string as a YAML
    scalar again so that ``-C lags=[1,8]`` means integers, as it would in a config file."""
    if isinstance(value, dict):
        return {key: retype_cli_values(item) for key, item in value.items()}
    if isinstance(value, list):
        return [retype_cli_values(item) for item in value]
    if isinstance(value, str):
        try:
            return yaml.safe_load(value) if value else value
        except yaml.YAMLError:
            return value
    return value


def rule_resources(config: dict, rule: str) -> dict:
    """Resources of ``rule``'s jobs, threads included: one thread, updated by the engine's defaults
    (its package's ``resources``), updated by config['resources'][rule]."""
    engine = engines.get(config["engine"])
    return {"threads": 1, **engine.resources.get(rule, {}), **(config.get("resources") or {}).get(rule, {})}


def job_resources(config: dict, rule: str) -> dict:
    """``rule_resources`` without threads, for a rule's ``resources:`` (threads go to ``threads:``)."""
    return {key: value for key, value in rule_resources(config, rule).items() if key != "threads"}


_WARNING_LEAD = re.compile(r"--signal=(?:[RB]:)?\w+@(\d+)")


def warning_lead_seconds(resources: dict) -> int | None:
    """The time-limit warning's lead of a rule's resources (slurm_extra's ``--signal=<sig>@<s>``), or None."""
    lead = _WARNING_LEAD.search(resources.get("slurm_extra", ""))
    return int(lead.group(1)) if lead else None


def stop_arguments(config: dict) -> list[str]:
    """engines.train's ``--stop-lead``: its jobs stop at the warning's lead before the end time SLURM
    records for them (harness.engine.watch_time_limit), whether or not the warning signal reaches them."""
    lead = warning_lead_seconds(rule_resources(config, "train"))
    return ["--stop-lead", str(lead)] if lead else []


def train_retries(config: dict, runs: int = 1) -> int:
    """How often a failed training job of ``runs`` runs is submitted again: the jobs its step budget
    needs within the job's time limit (runs x steps x the engine's step_minutes, over the train runtime
    less the warning lead of slurm_extra's --signal), less the first job, plus one spare for a job lost
    to a cancel, a node failure or a preemption. Each job resumes where the previous one stopped."""
    resources = rule_resources(config, "train")
    if not resources.get("runtime"):  # no time limit the config knows of
        return 1
    lead = warning_lead_seconds(resources)
    usable = resources["runtime"] - (lead / 60 if lead else 0)
    if usable <= 0:
        raise ConfigError(f"config key 'resources.train.runtime': {resources['runtime']} minutes leave no time "
                          f"before the time-limit warning (--signal=...@{lead})")
    jobs = math.ceil(runs * config["steps"] * engines.get(config["engine"]).step_minutes / usable)
    return max(jobs, 1)  # (jobs - 1) resubmissions + 1 spare


@dataclass(frozen=True)
class Pack:
    """The runs of a cell (recipe, lag) that one train job trains one after another in one process, and
    one evaluate job scores: those at ``seeds``, or (None) one run per job, the ``{seed}`` wildcard."""

    suffix: str  # of its rules' names: train<suffix>, evaluate<suffix>
    seeds: tuple[int, ...] | None

    @property
    def label(self) -> str:
        """Its jobs' log and benchmark file names (Snakemake wildcards in braces)."""
        return "seed{seed}" if self.seeds is None else "seeds" + "_".join(map(str, self.seeds))

    @property
    def size(self) -> int:
        return 1 if self.seeds is None else len(self.seeds)

    def folders(self, run_pattern: str) -> list[str]:
        """Its runs' folders in a cell: ``run_pattern`` (harness.run.RUN_FOLDER under a grid) at each seed."""
        if self.seeds is None:
            return [run_pattern]
        return [run_pattern.replace("{seed}", str(seed)) for seed in self.seeds]


def run_packs(config: Config) -> list[Pack]:
    """The packs of an engine that packs runs (Engine.packs_runs), one pair of rules each: the runs the
    grid always adds to a cell together. With a seed schedule, a look's seeds (the look's interim job
    says which cells get them); with a tuning section, the tuning seeds and then the grid's; otherwise
    every seed. Disjoint, so that one rule makes each run's files. Another engine: a job per run."""
    if not config.engine.packs_runs:
        return [Pack("", None)]
    tuning, seeding, seeds = config.tuning, config.seeding, config.seeds
    packs = [Pack("_tuning", tuple(tuning.seeds))] if tuning is not None else []
    if seeding is None:
        return packs + [Pack("", seeds)]
    bounds = (0, *seeding.looks)
    return packs + [Pack("" if look == 1 else f"_look{look}", seeds[start:end])
                    for look, (start, end) in enumerate(zip(bounds, bounds[1:]), start=1)]


def train_arguments(model, pack: Pack):
    """The params function of a pack's train job: ``--run-dir DIR --config-json JSON`` per run, from its
    outputs (each run's status file) and ``model`` (grid.settings.Config: the resolved run configs), so
    that a change to any run's config reruns the job (whose finished runs are not redone)."""

    def arguments(wildcards, output) -> list[str]:
        seeds = pack.seeds if pack.seeds is not None else (int(wildcards.seed),)
        runs = []
        for status, seed in zip(output, seeds):
            run_config = model.run_config((wildcards.recipe, int(wildcards.lag), seed))
            runs += ["--run-dir", str(Path(status).parent.parent), "--config-json", json.dumps(run_config, sort_keys=True)]
        return runs

    return arguments


def canary_run(model: Config):
    """The run the engine's canary walks: the grid's heaviest, an R3 recipe (routed experts through SGLang,
    the replay and its host memory) at the grid's largest lag (the most generations held, the latest
    second push); the first in the grid's order among equals."""
    return max(model.runs, key=lambda run: (recipe_from_named_dict(model.run_config(run)["recipe"], run[0]).replay == "r3",
                                            run[1]))

