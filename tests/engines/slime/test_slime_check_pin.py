"""engines.slime.check_pin: the flags, symbols and files the adapter uses, checked on the stand-in
checkouts (tests/support/slime_pkg, tests/support/megatron_pkg); each kind of removal is named."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from engines.slime import check_pin
from tests.support.paths import ROOT, SUPPORT


@pytest.fixture
def checkouts(tmp_path):
    slime, megatron = tmp_path / "slime", tmp_path / "megatron"
    shutil.copytree(SUPPORT / "slime_pkg", slime)
    shutil.copytree(SUPPORT / "megatron_pkg", megatron)
    return slime, megatron


@pytest.mark.slow  # check_pin in a process
def test_the_stand_in_has_everything_the_adapter_uses():
    result = subprocess.run([sys.executable, "-m", "engines.slime.check_pin", "--slime", str(SUPPORT / "slime_pkg"),
                             "--megatron", str(SUPPORT / "megatron_pkg")], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "0 problem(s)" in result.stdout
    # what the lists hold: derived from the adapter's code, not restated
    assert {"--custom-loss-function-path", "--update-weights-interval", "--use-rollout-logprobs"} <= \
        check_pin.adapter_flags()
    assert {("slime.backends.megatron_utils.loss", "get_log_probs_and_entropy"),
            ("megatron.core.parallel_state", "get_data_parallel_group"),
            ("slime.observability.logging_utils", "log")} <= check_pin.adapter_symbols()
    assert check_pin.job_files() == ["scripts/models/qwen3-30B-A3B.sh"]  # every lag mode: the harness's driver


@pytest.mark.parametrize("path, removed, problem", [
    ("slime/slime/ray/rollout.py", "    def dispose(self):\n", "symbol slime.ray.rollout.RolloutManager.dispose"),
    ("slime/slime/ray/actor_group.py", "        self._actor_handlers = []\n",
     "symbol slime.ray.actor_group.RayTrainGroup._actor_handlers"),
    ("slime/slime/backends/megatron_utils/loss.py", "def get_log_probs_and_entropy(",
     "symbol slime.backends.megatron_utils.loss.get_log_probs_and_entropy"),
    ("megatron/megatron/core/parallel_state.py", "def is_pipeline_last_stage(",
     "symbol megatron.core.parallel_state.is_pipeline_last_stage"),
    ("slime/slime/utils/arguments.py", '    parser.add_argument("--custom-rollout-log-function-path")\n',
     "flag --custom-rollout-log-function-path"),
    ("megatron/megatron/training/arguments.py", '    parser.add_argument("--recompute-granularity")\n',
     "flag --recompute-granularity"),
    ("slime/scripts/models/qwen3-30B-A3B.sh", None, "file $SLIME_DIR/scripts/models/qwen3-30B-A3B.sh"),
])
def test_a_removed_dependency_fails_the_check_naming_it(checkouts, path, removed, problem):
    slime, megatron = checkouts
    target = slime.parent / path
    if removed is None:
        target.unlink()
    else:
        text = target.read_text()
        assert removed in text
        # a renamed function: what a refactor upstream does to a name the adapter imports
        target.write_text(text.replace(removed, removed.replace("def ", "def renamed_", 1) if "def " in removed else ""))
    problems = check_pin.check(slime, megatron)
    assert len(problems) == 1 and problems[0].startswith(problem), problems
    assert check_pin.main(["--slime", str(slime), "--megatron", str(megatron)]) == 1


def test_a_model_script_flag_missing_from_models_yaml_is_named(checkouts):
    """script_flags (engines/slime/models.yaml) must equal the script's MODEL_ARGS flags, so that the
    pre-flight refuses every extra_args flag the script would override."""
    slime, megatron = checkouts
    script = slime / "scripts" / "models" / "qwen3-30B-A3B.sh"
    script.write_text(script.read_text().replace("--moe-aux-loss-coeff 0", "--moe-aux-loss-coeff 0\n   --moe-z-loss-coeff 1e-3"))
    problems = check_pin.check(slime, megatron)
    assert problems == [f"model qwen3-30B-A3B: {script} sets --moe-z-loss-coeff, missing from script_flags in models.yaml"]
    script.write_text(script.read_text().replace("--swiglu", "# --swiglu"))  # a comment sets nothing
    assert "lists --swiglu, which" in check_pin.check(slime, megatron)[1]
