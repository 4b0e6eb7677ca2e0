"""The evaluation back ends: lm-eval models found by name in lm-eval's model registry, named by the engines."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from lm_eval.api.model import LM
from lm_eval.api.registry import get_model

from eval.score import ScoreError, backend
from harness import engine as engines
from tests.support.paths import ROOT


@pytest.mark.parametrize("engine", ["tiny", "slime"])
def test_each_engine_names_a_registered_back_end(engine):
    model = get_model(engines.get(engine).eval_backend)
    assert issubclass(model, LM)
    assert all(callable(getattr(model, hook)) for hook in ("check_settings", "checkpoint_problem", "models"))


def test_naming_a_back_end_imports_neither_torch_nor_an_http_client():
    code = ("import sys, eval; from lm_eval.api.registry import model_registry; "
            "print(sorted(set(model_registry) & {'tiny', 'server'}), 'torch' in sys.modules, 'aiohttp' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert result.stdout.strip() == "['server', 'tiny'] False False"


def test_an_unregistered_back_end_names_the_key():
    with pytest.raises(ScoreError, match="eval.backend: .*'no_such_model'"):
        backend("no_such_model")


# An engine from outside the project ($STALEBENCH_ENGINES) with its own back end: an lm-eval model
# that answers each tiny problem from a file in the checkpoint ("right": the answer, else "wrong").
ORACLE_ENGINE = '''
from contextlib import contextmanager

from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from harness.engine import Engine, get, register
from engines.tiny import task

register(Engine(name="oracle", resolve_params=get("tiny").resolve_params, train=lambda c, d: "completed",
                eval_backend="oracle-lm"))
ANSWERS = {row["prompt"]: row["answer"] for row in task.problems("validation", 4)}


@register_model("oracle-lm")
class OracleLM(LM):
    def __init__(self, mode):
        super().__init__()
        self.mode = mode

    @classmethod
    def check_settings(cls, settings):
        pass

    @classmethod
    def checkpoint_problem(cls, checkpoint):
        return None if (checkpoint / "mode").is_file() else f"{checkpoint / 'mode'} is missing"

    @classmethod
    @contextmanager
    def models(cls, settings, checkpoints):
        yield lambda checkpoint: cls((checkpoint / "mode").read_text())

    def generate_until(self, requests, disable_tqdm=False):
        return [ANSWERS[r.args[0]] if self.mode == "right" else "wrong" for r in requests]

    def loglikelihood(self, requests, disable_tqdm=False):
        raise NotImplementedError

    def loglikelihood_rolling(self, requests, disable_tqdm=False):
        raise NotImplementedError
'''


@pytest.mark.slow  # a subprocess
def test_an_engines_own_back_end_scores_its_runs_without_a_change_to_eval(tmp_path):
    (tmp_path / "oracle_engine.py").write_text(ORACLE_ENGINE)
    run = tmp_path / "run"
    for step, mode in ((1, "right"), (2, "wrong")):
        (run / "train" / "checkpoints" / f"step_{step}").mkdir(parents=True)
        (run / "train" / "checkpoints" / f"step_{step}" / "mode").write_text(mode)
    (run / "config.json").write_text(json.dumps({"engine": "oracle", "run_key": "r"}))
    env = {**os.environ, "STALEBENCH_ENGINES": "oracle_engine",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    settings = {"k": 2, "problems": {"tiny_val": 4}}  # backend null: the one the run's engine names
    result = subprocess.run([sys.executable, "-m", "eval.score", "--run-dir", str(run), "--tasks", "tiny_val",
                             "--settings-json", json.dumps(settings)], capture_output=True, text=True, cwd=ROOT,
                            env=env)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (run / "eval" / "tiny_val.jsonl").read_text().splitlines()]
    assert [(row["step"], row["score"], row["per_problem"]) for row in rows] == [(1, 1.0, [2] * 4), (2, 0.0, [0] * 4)]
