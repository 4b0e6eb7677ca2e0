"""Value ranges declared beside the defaults (stabilizers._ranges): read from source without torch,
so that planning a grid (`snakemake -n`) refuses a value the loss would refuse at its first step."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from stabilizers import PolicyBatch, api, available, get, load_recipes, parameters
from stabilizers.api import value_ranges
from tests.support.workflow_cli import ROOT, snakemake


@pytest.mark.slow  # Snakemake
@pytest.mark.parametrize(("recipe", "message"), [
    ("{loss: grpo, params: {eps_low: 5}}", "eps_low = 5 is outside [0.0, 1.0]"),
    ("{loss: sat_grpo, params: {alpha: 1.7}}", "alpha = 1.7 is outside (0.0, 1.0]"),
    ("{loss: icepop, params: {alpha: 2.0, beta: 1.0}}", "beta = 1.0 is outside [2.0, inf]"),
    ("{loss: grpo, tis: {cap: 2.0, floor: 3.0}}", "tis floor = 3.0 is outside [0.0, 2.0]"),
    ("{loss: gspo, params: {aggregation: seq_mean}}", "aggregation = 'seq_mean'; expected one of"),
])
def test_dry_run_refuses_an_out_of_range_parameter_naming_it(scratch, recipe, message):
    result = snakemake("-n", "-C", f"results_dir={scratch}", f"extra_recipes={{bad: {recipe}}}",
                       "recipes=[grpo,bad]", timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"config key 'extra_recipes': recipe 'bad' (config): {message}" in output, output
    assert "Building DAG of jobs" not in output
    assert list(scratch.iterdir()) == []


def test_range_checks_need_no_torch():
    script = ("import sys\nfrom stabilizers import load_recipes\n"
              "try:\n    load_recipes(extra={'bad': {'loss': 'sat_gspo', 'params': {'eps_high': -1}}}, check_values=False)\n"
              "except ValueError as error:\n    print(error)\n"
              "print('torch imported' if 'torch' in sys.modules else 'no torch')\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.splitlines() == ["recipe 'bad' (config): eps_high = -1 is outside [0.0, inf)", "no torch"]


@pytest.mark.parametrize("name", available())
def test_source_ranges_are_the_ones_the_loss_checks(name):
    """The ranges read from source (the dry run's) are those the loss enforces when it runs."""
    assert value_ranges(name) == api._REGISTRY[name].__ranges__
    assert set(value_ranges(name)) == set(parameters(name))


def test_the_loss_refuses_at_run_time_what_the_dry_run_refuses():
    zero, one = torch.zeros(1, 1), torch.ones(1, 1)
    batch = PolicyBatch(logp=zero, old_logp=zero, rollout_logp=zero, advantages=one, mask=one)
    for name, params in [("grpo", {"eps_low": 5}), ("sat_grpo", {"alpha": 1.7})]:
        with pytest.raises(ValueError) as run_time:
            get(name)(batch, **params)
        with pytest.raises(ValueError) as planned:
            load_recipes(extra={"bad": {"loss": name, "params": params}}, check_values=False)
        assert str(planned.value) == f"recipe 'bad' (config): {run_time.value}"
