"""The lag-0 null check (engines/tiny/null_ratios.py): the demo config passes it; a planted top-p
sampler bias is refused with its numbers, in both forms (TRL #6789's: mu renormalised over the
kept tokens, the trainer on the full vocabulary; and a sampler that truncates but records the
untruncated mu, which leaves r = 1 and is caught by the calibration statistic); the workflow
runs it before every train job."""
import json
import re
import tempfile
from tempfile import TemporaryDirectory

import pytest

import engines.tiny.model as tiny_model
import engines.tiny.rollout as rollout
from engines.null_check import main
from engines.prepare import main as prepare
from engines.tiny.null_ratios import NullCheckFailed, null_check
from grid.config import load
from grid.settings import Config
from tests.support.tiny_runs import SMALL
from tests.support.workflow_cli import planned_jobs, snakemake

honest_generate = tiny_model.generate


def truncating(model, prompts, new_tokens, *, temperature, top_p, generator, stop_at_eos=False, repeats=1):
    """The planted sampler: top_p 0.8 whatever it is asked; mu = the truncated, renormalised distribution."""
    return honest_generate(model, prompts, new_tokens, temperature=temperature, top_p=0.8, generator=generator,
                           stop_at_eos=stop_at_eos, repeats=repeats)


def truncating_recording_the_full_softmax(model, prompts, new_tokens, *, temperature, top_p, generator,
                                          stop_at_eos=False, repeats=1):
    """The planted sampler: samples at top_p 0.8 but records mu as if unrestricted."""
    out = truncating(model, prompts, new_tokens, temperature=temperature, top_p=top_p, generator=generator,
                     repeats=repeats)
    plen = prompts.shape[1]
    logits = model(out.tokens[:, :-1]).logits[:, plen - 1:].float() / temperature
    return tiny_model.Samples(out.tokens, logits.log_softmax(-1), out.routing)


def params_of(config: dict) -> dict:
    return Config.build(load("config.yaml", config)).null_check_params()


SMALL_GRID = {"engine_params": SMALL, "recipes": ["grpo", "gspo", "grpo_r3"], "baseline": "grpo", "claims": []}


def test_the_cases_are_the_grids_distinct_rollout_settings():
    params = params_of({**SMALL_GRID, "recipe_engine_params": {"gspo": {"rollout_dtype": "float32"}}})
    cases = [(c["engine_params"]["rollout_dtype"], c["routing_replay"]) for c in params["cases"]]
    assert sorted(cases, key=str) == sorted([("bfloat16", False), ("float32", False), ("bfloat16", True)], key=str)
    assert "lr" not in params["cases"][0]["engine_params"]  # a training knob does not redo the check
    assert params_of({**SMALL_GRID, "null_check": {"enabled": False}}) is None


def test_the_demo_config_passes(tmp_path):
    config = load("config.yaml")
    assert prepare(["--engine", "tiny", "--engine-params-json", json.dumps(config["engine_params"]),
                    "--out", str(tmp_path / "base")]) == 0
    out = tmp_path / "null_check.json"
    params = Config.build(config).null_check_params()
    assert main(["--engine", "tiny", "--params-json", json.dumps(params), "--base", str(tmp_path / "base"),
                 "--out", str(out)]) == 0
    (case,) = json.loads(out.read_text())["cases"]
    assert case["rollout_dtype"] == "bfloat16" and case["tokens"] > 1000 and not case["failures"]
    assert abs(case["ratio_mean"] - 1) < 1e-3 and case["outside_fraction"] < 0.02 and abs(case["calibration_z"]) < 4


def test_the_check_leaves_no_folder_behind(base, monkeypatch, tmp_path):
    """The trainer the check drives gets a run folder of this process's own, removed after (two checks at once
    on a machine never share one)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made = []
    monkeypatch.setattr(tempfile, "TemporaryDirectory",
                        lambda **kwargs: made.append(kwargs) or TemporaryDirectory(**kwargs))
    null_check(params_of(SMALL_GRID | {"recipes": ["grpo"]}), base)
    assert made and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("planted, message", [
    (truncating, r"mean ratio 0\.\d+ is more than 0\.01 from 1; \d+\.\d% of tokens outside \[0\.9, 1\.1\]"),
    (truncating_recording_the_full_softmax, r"calibration z \+\d+\.\d: the sampled tokens are not distributed"),
])
def test_a_planted_top_p_bias_is_refused_with_its_numbers(base, monkeypatch, tmp_path, planted, message):
    params = params_of(SMALL_GRID | {"recipes": ["grpo"]})
    null_check(params, base)  # the honest sampler passes on this base
    monkeypatch.setattr(rollout, "generate", planted)
    with pytest.raises(NullCheckFailed, match="the lag-0 null check refuses the grid") as error:
        null_check(params, base)
    assert "rollout_dtype bfloat16, routing_replay False" in str(error.value)
    assert re.search(message, str(error.value)), str(error.value)
    out = tmp_path / "null_check.json"
    assert main(["--engine", "tiny", "--params-json", json.dumps(params), "--base", str(base), "--out", str(out)]) == 2
    assert not out.exists()  # a refused grid gets no report, so no train job can start


@pytest.mark.slow  # two Snakemake dry runs
def test_every_train_job_waits_for_the_check(scratch):
    result = snakemake("-n", "-C", f"results_dir={scratch}", "seeds=[0]")
    assert result.returncode == 0, result.stderr
    assert ("null_check", f"{scratch}/demo/null_check.json") in planned_jobs(result.stdout)
    assert snakemake("-n", "-C", f"results_dir={scratch}", "seeds=[0]", "null_check={enabled: false}").stdout \
        .count("rule null_check") == 0


@pytest.mark.slow  # Snakemake runs the check
def test_the_workflow_refuses_a_grid_with_the_numbers_and_trains_nothing(scratch):
    """A real refusal through Snakemake: a band of +-1e-6 holds no bf16 sampler's tokens."""
    small = json.dumps({**SMALL, "warmstart_steps": 5})
    result = snakemake("-c1", "-C", f"results_dir={scratch}", "grid=refused", "recipes=[grpo]", "baseline=grpo",
                       "lags=[1]", "seeds=[0]", "claims=[]", "steps=2", "eval_every=2", f"engine_params={small}",
                       "null_check={band: 1.0e-6, rollouts: 1}", timeout=300)
    assert result.returncode != 0
    printed = result.stdout + result.stderr
    assert re.search(r"the lag-0 null check refuses the grid \(config key 'null_check'\):\n  rollout_dtype bfloat16, "
                     r"routing_replay False, \d+ tokens: \d+\.\d% of tokens outside \[0\.999999, 1\] \(declared level 2%\)",
                     printed), printed[-3000:]
    assert not (scratch / "refused" / "runs").exists() and not (scratch / "refused" / "null_check.json").exists()
