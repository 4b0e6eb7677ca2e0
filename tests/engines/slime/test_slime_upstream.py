"""The adapter checked against slime and Megatron-LM at the pinned commits (../shared/upstream,
tests/support/slime_upstream.py): check_pin on the real trees, and every Table-1 job's argument
list parsed by slime's own argument code, then handed to the adapter's loss checks."""
from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engines.slime import loss as slime_loss
from engines.slime.flags import slime_flags
from engines.slime.job_script import custom_config
from grid.config import load
from grid.expand import resolve_run_config
from harness.io import write_text_atomic
from harness.run import RunDir
from harness.run_config import RunConfig
from stabilizers import fingerprint
from tests.support.paths import ROOT
from tests.support.slime_upstream import slime_parsed_args, upstream_dir

PRESET = ROOT / "workflow" / "presets" / "table1.yaml"


@pytest.mark.slow  # check_pin reads both upstream trees
def test_check_pin_passes_on_the_pinned_trees_and_the_docs_quote_its_figures():
    upstream = upstream_dir()
    result = subprocess.run([sys.executable, "-m", "engines.slime.check_pin", "--slime", str(upstream / "slime"),
                             "--megatron", str(upstream / "Megatron-LM")], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    figures = re.search(r"(\d+) flags, (\d+) symbols, (\d+) files checked; 0 problem\(s\)", result.stdout)
    assert figures, result.stdout
    flags, symbols, files = figures.groups()
    docs = (ROOT / "docs" / "cluster.md").read_text()
    quoted = f"{flags} flags, {symbols} symbols, {files} file{'s' if files != '1' else ''}, none missing"
    assert quoted in docs, f"docs/cluster.md should quote check_pin's output: {quoted!r}"


def model_args(upstream: Path, model_type: str) -> list[str]:
    """MODEL_ARGS as slime's own model script defines them (the job script sources it the same way)."""
    script = upstream / "slime" / "scripts" / "models" / f"{model_type}.sh"
    out = subprocess.run(["bash", "-c", f'source "{script}" && printf "%s\\n" "${{MODEL_ARGS[@]}}"'],
                         capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def table1_with_empty_paths(folder: Path) -> dict:
    """The Table-1 preset with its model folders and prompt file made, empty, in ``folder``."""
    config = load(PRESET)
    for name in ("hf", "ref"):
        (folder / name).mkdir()
    (folder / "prompts.jsonl").write_text("")
    config["engine_params"].update(hf_checkpoint=str(folder / "hf"), ref_load=str(folder / "ref"),
                                   prompt_data=str(folder / "prompts.jsonl"))
    return config


@pytest.fixture(scope="module")
def table1_as_slime_parses_it(tmp_path_factory):
    """Every Table-1 recipe's lag-8 job: its argument list (the launcher's flags, then MODEL_ARGS, as
    the job script passes them) parsed and validated by slime's code, with the job's custom config."""
    upstream = upstream_dir()
    tmp = tmp_path_factory.mktemp("table1")
    config = table1_with_empty_paths(tmp)
    recipes, argvs = [], []
    for recipe in config["recipes"]:
        run_config = RunConfig.check(resolve_run_config(config, recipe, 8, 0))
        params = run_config.engine_params
        run = RunDir(tmp / recipe)
        write_text_atomic(run.engine_file("engine_settings"), yaml.safe_dump(custom_config(run_config, run)))
        run.write_fingerprint(fingerprint(run_config.recipe))
        argv = [token for flag in slime_flags(run_config, run) for token in flag]
        recipes.append(run_config.recipe)
        argvs.append(argv + model_args(upstream, params["model_type"]))
    return recipes, slime_parsed_args(argvs)


class Args:
    def __init__(self, values: dict):
        vars(self).update(values)


def test_every_table1_job_as_slime_parses_it_passes_the_loss_checks(table1_as_slime_parses_it):
    recipes, parsed = table1_as_slime_parses_it
    assert len(recipes) == 14
    for recipe, values in zip(recipes, parsed):
        args = Args(values)
        assert slime_loss.recipe_of(args).name == recipe.name  # the custom config, loaded by slime
        slime_loss.check_args(args, slime_loss.recipe_of(args))


def test_slime_implies_the_recompute_replay_for_every_r3_job(table1_as_slime_parses_it):
    """The state the R3 recipes run with is (True, True), which the loss check must accept."""
    recipes, parsed = table1_as_slime_parses_it
    states = {recipe.name: (values["use_rollout_routing_replay"], values["use_routing_replay"])
              for recipe, values in zip(recipes, parsed)}
    r3 = {recipe.name for recipe in recipes if recipe.replay == "r3"}
    assert len(r3) == 6
    assert {name: state for name, state in states.items() if name in r3} == {name: (True, True) for name in r3}
    assert {state for name, state in states.items() if name not in r3} == {(False, False)}


def test_slimes_parser_keeps_the_loss_settings_the_launcher_emits(table1_as_slime_parses_it):
    recipes, parsed = table1_as_slime_parses_it
    for recipe, values in zip(recipes, parsed):
        assert values["loss_type"] == "custom_loss"
        assert values["custom_loss_function_path"] == "engines.slime.loss.policy_loss"
        assert values["calculate_per_token_loss"] is slime_loss.per_token_loss_flag(recipe)
        assert values["grpo_std_normalization"] is recipe.std_normalization
        assert values["use_tis"] is False and values["rollout_top_p"] == 1.0


def test_megatrons_nan_check_is_off_so_a_non_finite_step_is_logged_not_raised(tmp_path):
    """Megatron's own definition of the flag (megatron/training/arguments.py at the pin, run on a
    Table-1 job's argument list) turns check_for_nan_in_loss_and_grad off, which it is by default.
    With it on, Megatron's DDP raises on a non-finite gradient (training.py hands it to
    check_for_nan_in_grad) before slime logs the step, and every retry raises again; off, slime's
    train_one_step skips that update and logs the non-finite grad norm, the row the driver and
    engines.slime.launch read as "diverged"."""
    upstream = upstream_dir()
    arguments = upstream / "Megatron-LM" / "megatron" / "training" / "arguments.py"
    call = next(node for node in ast.walk(ast.parse(arguments.read_text())) if isinstance(node, ast.Call)
                and getattr(node.func, "attr", None) == "add_argument"
                and any(getattr(arg, "value", None) == "--no-check-for-nan-in-loss-and-grad" for arg in node.args))
    call.func.value = ast.Name("parser", ast.Load())
    parser = argparse.ArgumentParser()
    eval(compile(ast.fix_missing_locations(ast.Expression(call)), str(arguments), "eval"), {"parser": parser})
    assert parser.parse_known_args([])[0].check_for_nan_in_loss_and_grad is True  # Megatron's default
    config = load(PRESET)
    for name in ("hf", "ref"):
        (tmp_path / name).mkdir()
    config["engine_params"].update(hf_checkpoint=str(tmp_path / "hf"), ref_load=str(tmp_path / "ref"),
                                   prompt_data=str(tmp_path / "prompts.jsonl"))
    run_config = RunConfig.check(resolve_run_config(config, "gspo", 8, 0))
    argv = [token for flag in slime_flags(run_config, RunDir(tmp_path / "run")) for token in flag]
    assert parser.parse_known_args(argv)[0].check_for_nan_in_loss_and_grad is False
    training = (upstream / "Megatron-LM" / "megatron" / "training" / "training.py").read_text()
    assert "kwargs['check_for_nan_in_grad'] = args.check_for_nan_in_loss_and_grad" in training
    model = (upstream / "slime" / "slime" / "backends" / "megatron_utils" / "model.py").read_text()
    assert 'if not getattr(args, "check_for_nan_in_loss_and_grad", True):' in model
    assert 'log_dict[f"train/{role_tag}grad_norm"] = grad_norm' in model


def test_a_resumed_job_loads_adams_state_by_slimes_own_reading_of_its_arguments(tmp_path):
    """What a CPU can say about a resume carrying Adam's state (the numbers: the `gpu` test of
    test_slime_gpu_resume.py). A Table-1 job's argument list, with the preset's optimizer flags (Adam's
    states on the CPU), through slime_validate_args at the pin: the first job, with no Megatron save in
    its --load folder, starts from the base model with a fresh optimizer (slime sets no_load_optim and
    finetune itself); a resumed job, whose folder holds a save, keeps them unset, so that Megatron loads
    the save's optimizer state, random states and iteration (no extra_args can undo it: params.py's
    RESUME_BREAKING_FLAGS)."""
    from tests.support.slime_checkpoints import write_megatron_save

    upstream = upstream_dir()
    config = table1_with_empty_paths(tmp_path)
    run_config = RunConfig.check(resolve_run_config(config, "grpo", 8, 0))
    run = RunDir(tmp_path / "run")
    write_text_atomic(run.engine_file("engine_settings"), yaml.safe_dump(custom_config(run_config, run)))
    argv = [token for flag in slime_flags(run_config, run) for token in flag] + model_args(upstream, "qwen3-30B-A3B")
    for flag in ("--optimizer-cpu-offload", "--overlap-cpu-optimizer-d2h-h2d", "--use-precision-aware-optimizer"):
        assert flag in argv  # the preset's optimizer: CPU-offloaded Adam
    megatron = str(run.engine_file("resume_checkpoints"))
    (first,) = slime_parsed_args([argv])
    assert (first["no_load_optim"], first["no_load_rng"], first["finetune"]) == (True, True, True)
    assert first["load"] == str(tmp_path / "ref") and first["start_rollout_id"] == 0
    write_megatron_save(megatron, 15)  # the periodic save of step 16
    (resumed,) = slime_parsed_args([argv])
    assert resumed["load"] == megatron and resumed["start_rollout_id"] is None  # Megatron's iteration decides
    for key in ("no_load_optim", "no_load_rng", "finetune"):
        assert not resumed.get(key), (key, resumed.get(key))
