"""The Snakemake plumbing of the workflow (workflow/rules/common.smk): what a config means to
Snakemake rather than to a stage. ``-C`` values retyped, each rule's job resources, the training
job's retries. The grid folder's file names: harness.grid_dir.
"""
from __future__ import annotations

import math
import re

import yaml

from harness import engine as engines
from harness.config import ConfigError


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


def train_retries(config: dict) -> int:
    """How often a failed training job is submitted again: the jobs its step budget needs within
    the job's time limit (steps x the engine's step_minutes, over the train runtime less the
    warning lead of slurm_extra's --signal), less the first job, plus one spare for a job lost to
    a cancel, a node failure or a preemption. Each job resumes where the previous one stopped."""
    resources = rule_resources(config, "train")
    if not resources.get("runtime"):  # no time limit the config knows of
        return 1
    lead = warning_lead_seconds(resources)
    usable = resources["runtime"] - (lead / 60 if lead else 0)
    if usable <= 0:
        raise ConfigError(f"config key 'resources.train.runtime': {resources['runtime']} minutes leave no time "
                          f"before the time-limit warning (--signal=...@{lead})")
    jobs = math.ceil(config["steps"] * engines.get(config["engine"]).step_minutes / usable)
    return max(jobs, 1)  # (jobs - 1) resubmissions + 1 spare
