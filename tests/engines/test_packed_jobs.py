"""Packed jobs (grid.jobs.run_packs): a cell's runs trained one after another in one `engines.train`
process and scored in one `eval.score` process end with the files of each run trained and scored alone,
byte for byte, and a packed job killed inside its second run resumes each run where it stopped."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from eval.score import score_run
from harness.cli import EXIT_BAD_INPUT, EXIT_OK, run_each
from harness.engine import EXIT_RESUME, TimeLimitReached
from tests.support.paths import ROOT
from tests.support.tiny_runs import config
from tests.support.untimed import untimed_rows
from tests.support.waiting import wait_until

SEEDS = (0, 1)
SETTINGS = {"k": 2, "seed": 5, "temperature": 1.0, "top_p": 1.0, "max_gen_toks": 7, "backend": "tiny",
            "problems": {"tiny_test": 8}}
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}


def train_command(runs: list[tuple[Path, dict]]) -> list[str]:
    command = [sys.executable, "-m", "engines.train"]
    for folder, run_config in runs:
        command += ["--run-dir", str(folder), "--config-json", json.dumps(run_config)]
    return command


def files(folder: Path) -> dict[str, str]:
    """What a run must reproduce: its tensors byte for byte, metrics but their time, status, eval lines."""
    found = {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted(folder.rglob("*.safetensors"))}
    found["metrics"] = untimed_rows(folder / "train" / "metrics.jsonl")
    status = json.loads((folder / "train" / "status.json").read_text())
    found["status"] = (status["status"], status["step"])
    for path in sorted((folder / "eval").glob("[!.]*.jsonl")):
        found[path.name] = path.read_text()
    return found


@pytest.mark.slow  # seven processes, ~40 s on 2 cores
def test_packed_jobs_equal_unpacked_ones_and_resume_each_run(base, tmp_path):
    configs = {seed: config(base, seed=seed, steps=6, eval_every=2) for seed in SEEDS}

    def folders(name: str) -> list[tuple[Path, dict]]:
        return [(tmp_path / name / f"seed{seed}", configs[seed]) for seed in SEEDS]

    for pair in folders("alone"):  # the reference: each run in a process of its own, scored alone
        subprocess.run(train_command([pair]), cwd=ROOT, env=ENV, check=True, capture_output=True)
        score_run(pair[0], ["tiny_test"], SETTINGS)
    packed = folders("packed")
    subprocess.run(train_command(packed), cwd=ROOT, env=ENV, check=True, capture_output=True)
    killed = folders("killed")
    job = subprocess.Popen(train_command(killed), cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    second = killed[1][0] / "train"
    wait_until(lambda: (second / "checkpoints" / "step_2").is_dir(), "the second run's first checkpoint", job)
    job.send_signal(signal.SIGKILL)
    job.wait()
    assert (killed[0][0] / "train" / "status.json").is_file() and not (second / "status.json").exists()
    subprocess.run(train_command(killed), cwd=ROOT, env=ENV, check=True, capture_output=True)
    for name in ("packed", "killed"):
        scored = subprocess.run([sys.executable, "-m", "eval.score", "--run-dir", *(str(f) for f, _ in folders(name)),
                                 "--tasks", "tiny_test", "--settings-json", json.dumps(SETTINGS)],
                                cwd=ROOT, env=ENV, capture_output=True, text=True)
        assert scored.returncode == 0, scored.stderr
    for index, seed in enumerate(SEEDS):
        alone = files(folders("alone")[index][0])
        assert "tiny_test.jsonl" in alone and len(alone) == 7 and alone["status"] == ("completed", 6)
        assert files(packed[index][0]) == alone, seed
        assert files(killed[index][0]) == alone, seed


def test_a_packed_job_tries_every_run_and_stops_at_the_time_limit():
    tried = []

    def work(item):
        tried.append(item)
        if item == "bad":
            raise ValueError("a bad run")
        if item == "stop":
            raise TimeLimitReached("stopped")
        return item

    assert run_each("x", ["a", "bad", "b"], work, lambda *_: "done") == EXIT_BAD_INPUT
    assert tried == ["a", "bad", "b"]  # a bad run does not hold back the others
    tried.clear()
    assert run_each("x", ["a", "stop", "b"], work, lambda *_: "done") == EXIT_RESUME
    assert tried == ["a", "stop"]  # the retry resumes from here
    assert run_each("x", ["a", "b"], work, lambda *_: "done") == EXIT_OK
