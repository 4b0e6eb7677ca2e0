"""The tiny engine's RL loop: determinism, resume after kill -9, lag, R3, bad input."""
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml

import engines.tiny.trainer
from engines.tiny import task
from engines.tiny.batch import group_advantages, step_seed
from engines.tiny.checkpoint import load_model
from engines.tiny.rollout import Rollout, RolloutEngine
from engines.tiny.trainer import Trainer
from engines.tiny.warmstart import build_base
from engines.train import run
from harness.engine import TimeLimitReached
from harness.io import read_jsonl
from harness.lag import sampling_version
from harness.run import RunDir
from harness.run_config import RunConfig
from tests.support.kill_points import counted, exit_code, forked, run_killed_at
from tests.support.tiny_runs import SMALL, config
from tests.support.untimed import untimed_rows
from tests.support.waiting import wait_until


def test_warm_start_is_cached(base):
    stamp = (base / "model.safetensors").stat().st_mtime_ns
    build_base(SMALL, base)
    assert (base / "model.safetensors").stat().st_mtime_ns == stamp


def test_same_config_twice_gives_identical_metrics(base, tmp_path):
    cfg = config(base, recipe="sat_grpo", kl_coef=0.1)
    assert run(cfg, tmp_path / "a") == "completed" and run(cfg, tmp_path / "b") == "completed"
    first = (tmp_path / "a" / "train" / "metrics.jsonl").read_text()
    assert untimed_rows(tmp_path / "a" / "train" / "metrics.jsonl") == untimed_rows(tmp_path / "b" / "train" / "metrics.jsonl")
    rows = read_jsonl(tmp_path / "a" / "train" / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, 7))
    times = [r["time"] for r in rows]  # when each step was produced: MLflow's wall-time axis
    assert all(a < b for a, b in zip(times, times[1:])) and abs(times[-1] - time.time()) < 600
    for key in ("realized_lag", "policy_version", "reward", "entropy", "grad_norm", "loss", "sat/q", "kl/k3",
                "d/mean_abs", "d/p50", "d/p90", "d/p99", "d/max", "d/lag_mean_abs", "d/impl_mean_abs",
                "tv/mean", "tv/p90", "routing/mismatch_rate",
                "offpolicy/ess", "offpolicy/chi2_token", "offpolicy/chi2_seq", "offpolicy/k3_kl"):
        assert all(key in r for r in rows), key
    assert all(r["d/mean_abs"] > 0 for r in rows)  # bf16 engine: mu != pi even where the lag is 0
    assert sorted(p.name for p in (tmp_path / "a" / "train" / "checkpoints").iterdir()) == \
        ["step_2", "step_4", "step_6"]
    assert json.loads((tmp_path / "a" / "train" / "status.json").read_text())["status"] == "completed"
    assert run(cfg, tmp_path / "a") == "completed"  # a finished run is not redone
    assert (tmp_path / "a" / "train" / "metrics.jsonl").read_text() == first


KILLED = {"recipe": "grpo_r3", "lag": 3, "steps": 14, "eval_every": 3}  # checkpoints at 3, 6, 9, 12, 14

# each kill test's seed: the same draws on every pytest-xdist worker (from the run's id), or the system's
DRAW = random.Random(os.environ["PYTEST_XDIST_TESTRUNUID"]) if "PYTEST_XDIST_TESTRUNUID" in os.environ \
    else random.SystemRandom()


def kill_seeds() -> list[int]:
    """The seeds of the kill tests: STALEBENCH_KILL_SEEDS=A-B runs A..B (the consecutive-seed check of
    engines/tiny/README.md), STALEBENCH_KILL_SEED=S replays one, otherwise one random seed (printed;
    DRAW: every pytest-xdist worker must collect the same tests)."""
    if os.environ.get("STALEBENCH_KILL_SEEDS"):
        first, last = (int(part) for part in os.environ["STALEBENCH_KILL_SEEDS"].split("-"))
        return list(range(first, last + 1))
    return [int(os.environ.get("STALEBENCH_KILL_SEED") or DRAW.randrange(2**32))]


@pytest.fixture(scope="module")
def uninterrupted(base, tmp_path_factory):
    """The run the killed ones must end as, and how many write events it made (kill points)."""
    folder = tmp_path_factory.mktemp("uninterrupted") / "run"
    with counted() as writes:
        assert run(config(base, **KILLED), folder) == "completed"
    return folder, writes[0]


def assert_same_run(resumed, reference, context: str) -> None:
    """Bit for bit: the metrics (but each row's time), every checkpoint file and the fingerprint; the
    same files in train/ (nothing left over), status completed at the last step."""
    train, expected = resumed / "train", reference / "train"
    assert untimed_rows(train / "metrics.jsonl") == untimed_rows(expected / "metrics.jsonl"), context
    files = sorted(str(p.relative_to(train)) for p in train.rglob("*"))
    assert files == sorted(str(p.relative_to(expected)) for p in expected.rglob("*")), context
    for name in files:
        if name.startswith("checkpoints/") and (train / name).is_file() or name == "fingerprint.json":
            assert (train / name).read_bytes() == (expected / name).read_bytes(), f"{context}: {name}"
    status, finished = (json.loads((folder / "status.json").read_text()) for folder in (train, expected))
    assert (status["status"], status["step"]) == ("completed", finished["step"]), context


@pytest.mark.parametrize("seed", kill_seeds())
def test_kill_9_at_any_write_then_resume_is_bit_identical(base, uninterrupted, scratch, seed):
    """Killed at a seeded write event (tests.support.kill_points: just before or after a file-system
    call, inside a checkpoint or resume-state save too), resumed and killed again at another, then
    resumed to the end: the uninterrupted run's numbers and files. STALEBENCH_KILL_SEED=<seed> replays."""
    reference, writes = uninterrupted
    choice = random.Random(seed)
    kills = [choice.randrange(1, writes + 1), choice.randrange(1, writes + 1)]
    context = f"seed {seed} (replay: STALEBENCH_KILL_SEED={seed}): killed at write events {kills} of {writes}"
    print(context)
    cfg, folder = config(base, **KILLED), scratch / "killed"
    assert run_killed_at(lambda: run(cfg, folder), kills[0]) == -signal.SIGKILL, context
    assert run_killed_at(lambda: run(cfg, folder), kills[1]) in (-signal.SIGKILL, 0), context  # a resume writes less
    assert run(cfg, folder) == "completed", context
    assert_same_run(folder, reference, context)


@pytest.mark.parametrize("seed", kill_seeds())
def test_kill_9_at_a_random_instant_then_resume_is_bit_identical(base, uninterrupted, scratch, seed):
    """A training process killed at a seeded instant after one of its checkpoints appears (0-100 ms:
    the next steps' writes included), then resumed. STALEBENCH_KILL_SEED=<seed> replays."""
    reference, _ = uninterrupted
    choice = random.Random(seed)
    kill_after, delay = choice.choice([3, 6, 9]), choice.uniform(0, 0.1)
    context = f"seed {seed} (replay: STALEBENCH_KILL_SEED={seed}): killed {delay * 1000:.0f} ms after step {kill_after}"
    print(context)
    cfg, folder = config(base, **KILLED), scratch / "killed"
    pid = forked(lambda: run(cfg, folder))
    checkpoint = folder / "train" / "checkpoints" / f"step_{kill_after}"
    wait_until(lambda: checkpoint.exists() or os.waitpid(pid, os.WNOHANG) != (0, 0), f"{checkpoint} ({context})")
    time.sleep(delay)
    os.kill(pid, signal.SIGKILL)
    assert exit_code(pid) == -signal.SIGKILL, f"{context}: the run was not killed"
    assert not (folder / "train" / "status.json").exists(), context
    assert run(cfg, folder) == "completed", context
    assert_same_run(folder, reference, context)


def test_a_run_whose_resume_state_was_deleted_trains_again_to_the_same_bits(base, uninterrupted, scratch):
    """Checkpoints without a resume state (deleted by hand, or a run of an older trainer): no refusal
    asking for the folder to be deleted; the run trains again from step 0 and rewrites the same files."""
    reference, _ = uninterrupted
    shutil.copytree(reference, scratch / "run")
    shutil.rmtree(scratch / "run" / "train" / "resume")
    (scratch / "run" / "train" / "status.json").unlink()
    assert run(config(base, **KILLED), scratch / "run") == "completed"
    assert_same_run(scratch / "run", reference, "resume state deleted")


def test_a_resume_state_written_before_the_policy_version_was_named_apart_resumes_to_the_same_bits(
        base, uninterrupted, scratch, monkeypatch):
    """The resume meta names the rollout engine's weights by their policy version
    (``rollout_policy_version``); a run folder from before (issue 60, item 3) holds it as
    ``engine_version``, the name provenance.json gave the arithmetic. Such a folder resumes to the
    uninterrupted run's bits."""
    reference, _ = uninterrupted
    cfg, folder = config(base, **KILLED), scratch / "old"
    polls = iter(range(1, 100))  # the trainer polls once per step: "near" at step 7 stops it there
    monkeypatch.setattr(engines.tiny.trainer, "time_limit_near", lambda: next(polls) == 7)
    with pytest.raises(TimeLimitReached, match="after step 7"):
        Trainer(RunConfig.check(cfg), RunDir(folder)).run()
    monkeypatch.undo()
    meta_path = folder / "train" / "resume" / "state.json"
    meta = json.loads(meta_path.read_text())
    assert meta["step"] == 7 and "engine_version" not in meta
    meta["engine_version"] = meta.pop("rollout_policy_version")  # the key as the trainer wrote it before
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    assert run(cfg, folder) == "completed"
    assert_same_run(folder, reference, "a resume state with the old key")


def test_a_run_folder_outside_a_grids_layout_is_refused_by_name(base, scratch, capsys):
    """The workflow's run configs name the base model relative to the grid folder, which the run
    folder's place in the grid's layout gives: a folder elsewhere is an error saying so."""
    from engines.train import main

    cfg = {**config(base), "base_model": "base"}
    assert main(["--run-dir", str(scratch / "shallow"), "--config-json", json.dumps(cfg)]) == 2
    error = capsys.readouterr().err
    assert "is not a run folder in a grid's layout (<grid>/runs/<recipe>/lag<lag>/seed<seed>" in error
    assert "Traceback" not in error and not (scratch / "shallow").exists()


@pytest.mark.slow
def test_kill_9_at_every_write_of_a_run_then_resume_is_bit_identical(base, scratch):
    """Every kill point of a short run, one after the other: each resumes to the uninterrupted run."""
    cfg = config(base, recipe="grpo", lag=2, steps=4, eval_every=2)
    with counted() as writes:
        assert run(cfg, scratch / "reference") == "completed"
    for kill_at in range(1, writes[0] + 1):
        folder = scratch / f"killed{kill_at}"
        assert run_killed_at(lambda folder=folder: run(cfg, folder), kill_at) == -signal.SIGKILL, kill_at
        assert run(cfg, folder) == "completed", kill_at
        assert_same_run(folder, scratch / "reference", f"killed at write event {kill_at} of {writes[0]}")
        shutil.rmtree(folder)


@pytest.mark.parametrize("mode", ["interval", "constant"])
def test_each_batch_is_sampled_by_the_scheduled_policy_version(base, tmp_path, mode):
    lag, steps = 3, 8
    cfg = config(base, lag=lag, mode=mode, steps=steps, eval_every=1)
    trainer = Trainer(RunConfig.check(cfg), RunDir(tmp_path))
    batches = {}
    generate = trainer.generate

    def recording(step):
        batches[step] = generate(step)
        return batches[step]

    trainer.generate = recording
    trainer.run()
    rows = read_jsonl(tmp_path / "train" / "metrics.jsonl")
    expected = {"interval": [0, 0, 0, 0, 3, 3, 3, 6], "constant": [0, 0, 0, 0, 1, 2, 3, 4]}[mode]
    assert [r["policy_version"] for r in rows] == expected
    assert [r["realized_lag"] for r in rows] == [s - 1 - v for s, v in zip(range(1, steps + 1), expected)]
    assert max(r["realized_lag"] for r in rows) == lag
    params = trainer.params
    for step in range(1, steps + 1):
        # Re-sample step's batch from the saved checkpoint of its scheduled version: it must be
        # bit-identical, and the next version's weights must give a different mu.
        def resample(version, step=step):
            source = base if version == 0 else tmp_path / "train" / "checkpoints" / f"step_{version}"
            engine = RolloutEngine(trainer.model.config, "bfloat16", params["temperature"])
            engine.broadcast(load_model(source).state_dict(), version)
            problems = task.problems("train", params["prompts_per_step"], seed=step_seed(0, step, 0))
            return engine.rollout(step, problems, params["samples_per_step"], params["reward"],
                                  seed=step_seed(0, step, 1))

        version = sampling_version(step, lag, mode, 0)
        assert batches[step].version == version
        again = resample(version)
        assert torch.equal(again.tokens, batches[step].tokens) and torch.equal(again.logmu_full, batches[step].logmu_full)
        assert not torch.equal(resample(version + 1).logmu_full, batches[step].logmu_full)


def test_routing_replay_makes_the_trainer_route_like_the_engine(base, tmp_path):
    run(config(base, recipe="grpo", lag=2, steps=6), tmp_path / "plain")
    run(config(base, recipe="grpo_r3", lag=2, steps=6), tmp_path / "r3")
    plain = read_jsonl(tmp_path / "plain" / "train" / "metrics.jsonl")
    replayed = read_jsonl(tmp_path / "r3" / "train" / "metrics.jsonl")
    assert all(r["routing/mismatch_rate"] == 0.0 for r in replayed)
    assert any(r["routing/own_mismatch_rate"] > 0 for r in replayed)
    assert any(r["routing/mismatch_rate"] > 0 for r in plain)
    assert all(r["routing/mismatch_rate"] == r["routing/own_mismatch_rate"] for r in plain)


def test_dr_grpo_advantages_are_the_reward_minus_the_group_mean(base, tmp_path):
    rewards = torch.tensor([1.0, 0.0, 0.25, 0.25])  # two prompts, two samples each
    # by hand: group (1, 0) has mean 0.5 and population std 0.5; group (0.25, 0.25) has std 0
    assert group_advantages(rewards, 2, std_normalization=False).tolist() == [0.5, -0.5, 0.0, 0.0]
    torch.testing.assert_close(group_advantages(rewards, 2), torch.tensor([0.5 / 0.500001, -0.5 / 0.500001, 0, 0]))
    # the recipe switch reaches the trainer: the same first batch, a different update
    dr = {"grpo_std_free": {"loss": "grpo", "params": {"eps_low": 0.2, "eps_high": 0.2}, "std_normalization": False}}
    assert run(config(base, steps=2), tmp_path / "grpo") == "completed"
    assert run(config(base, recipe="grpo_std_free", steps=2, extra_recipes=dr), tmp_path / "dr") == "completed"
    plain = read_jsonl(tmp_path / "grpo" / "train" / "metrics.jsonl")
    std_free = read_jsonl(tmp_path / "dr" / "train" / "metrics.jsonl")
    assert plain[0]["reward"] == std_free[0]["reward"] and plain[0]["grad_norm"] != std_free[0]["grad_norm"]


# the issue-50 recipes and a diagnostic each logs
AUTUMN_2026 = {"ipo": "ipo/masked_frac", "score_centering_mis": "score_centering/center_mass",
               "score_centering_top4": "score_centering/tail_q", "estr": "estr/masked_frac",
               "topr": "topr/tapered_frac",
               # and issue 62's: prime-rl's IPO with Score Centering, its IcePop, the per-token TOPR
               "ipo_score_centering": "ipo_score_centering/center_mass", "icepop_prime": "icepop_is/masked_frac",
               "topr_token": "topr_token/tapered_frac",
               # FlashREINFORCE: its filter, on advantages without the group-std division (an engine switch)
               "flash_reinforce": "flash_reinforce/dropped_frac"}


def test_the_autumn_2026_recipes_train_with_the_sampler_they_need(base, tmp_path, monkeypatch):
    """Two steps each, with the recorded fingerprint (the canned sampler for Score Centering and ESTR).
    The trainer gives Score Centering the rollout's log mu over the vocabulary and its own log pi with
    gradient, ESTR mu's entropy, and the other losses nothing."""
    given = {}
    supply = Rollout.sampler

    def recorded(self, needs, rows, logp_full):
        given[recipe] = out = supply(self, needs, rows, logp_full)
        return out

    monkeypatch.setattr(Rollout, "sampler", recorded)
    for recipe, key in AUTUMN_2026.items():
        assert run(config(base, recipe=recipe, steps=2), tmp_path / recipe) == "completed"
        assert all(key in row for row in read_jsonl(tmp_path / recipe / "train" / "metrics.jsonl")), recipe
        assert RunDir(tmp_path / recipe).read_fingerprint()["digest"], recipe
    assert given["ipo"] is None and given["topr"] is None and given["icepop_prime"] is None
    assert given["ipo_score_centering"].logp.requires_grad and given["ipo_score_centering"].entropy is None
    centering, estr = given["score_centering_mis"], given["estr"]
    assert centering.entropy is None and centering.logp.requires_grad and centering.logq.shape == centering.logp.shape
    assert centering.logq.shape[-1] == 13 and torch.allclose(centering.logq.exp().sum(-1), torch.ones(()))
    assert estr.logq is None and estr.logp is None
    assert ((estr.entropy >= 0) & (estr.entropy <= math.log(13) + 1e-6)).all()


def test_vcpo_scales_each_steps_lr_by_its_ess(base, tmp_path):
    """VCPO's switch: lr x sqrt(min(1, ESS)) per Adam step; off, the run is the plain one."""
    assert run(config(base, lag=4, steps=6), tmp_path / "plain") == "completed"
    assert run(config(base, lag=4, steps=6, vcpo_ess_lr=True), tmp_path / "vcpo") == "completed"
    plain = read_jsonl(tmp_path / "plain" / "train" / "metrics.jsonl")
    vcpo = read_jsonl(tmp_path / "vcpo" / "train" / "metrics.jsonl")
    assert all("vcpo/lr_scale" not in r for r in plain)
    assert all(0 < r["vcpo/lr_scale"] <= 1 for r in vcpo) and any(r["vcpo/lr_scale"] < 1 for r in vcpo)
    assert all(0 < r["offpolicy/ess"] <= 1 for r in plain)
    assert plain[0]["reward"] == vcpo[0]["reward"]  # the same first batch, sampled before any training
    assert [r["loss"] for r in plain] != [r["loss"] for r in vcpo]


def test_bad_inputs_fail_before_anything_is_written(base, tmp_path):
    cfg = config(base)
    bad_recipe = {**cfg, "recipe": {"name": "mystery", "loss": "no_such_loss", "params": {}}}
    with pytest.raises(ValueError, match="no_such_loss"):
        run(bad_recipe, tmp_path / "r")
    for lag in (-1, 1.5, "2"):
        with pytest.raises(ValueError, match="lag must be an integer >= 0"):
            run({**cfg, "lag": lag}, tmp_path / "r")
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['learning_rate'\]"):
        run({**cfg, "engine_params": {**SMALL, "learning_rate": 1.0}}, tmp_path / "r")
    with pytest.raises(FileNotFoundError, match="base model not found"):
        run({**cfg, "base_model": str(tmp_path / "nobase")}, tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_a_directory_holding_another_config_is_refused(base, tmp_path):
    run(config(base, steps=2), tmp_path / "r")
    def files():  # the writer lock's file names its last holder: not the run's content
        return {p: p.read_bytes() for p in (tmp_path / "r").rglob("*") if p.is_file() and p.parent.name != "locks"}
    before = files()
    with pytest.raises(ValueError, match="different config"):
        run(config(base, steps=2, seed=1), tmp_path / "r")
    assert files() == before


def test_corrupt_or_missing_resume_state_is_an_error(base, tmp_path):
    cfg = config(base, steps=4)
    trainer = Trainer(RunConfig.check(cfg), RunDir(tmp_path))
    trainer.steps = 2  # stop part way, as a killed run would
    trainer.run()
    (tmp_path / "train" / "status.json").unlink()
    state = tmp_path / "train" / "resume" / "state.safetensors"
    state.write_bytes(state.read_bytes()[:100])
    metrics = (tmp_path / "train" / "metrics.jsonl").read_text()
    with pytest.raises(ValueError, match="corrupt checkpoint file .*state.safetensors"):
        Trainer(RunConfig.check(cfg), RunDir(tmp_path)).run()
    state.unlink()
    with pytest.raises(FileNotFoundError, match="state.safetensors"):
        Trainer(RunConfig.check(cfg), RunDir(tmp_path)).run()
    assert (tmp_path / "train" / "metrics.jsonl").read_text() == metrics


def test_a_kill_between_the_two_renames_of_a_resume_save_is_recovered(base, tmp_path, monkeypatch):
    """save() swaps the new resume state in with two renames (the old one aside, the new one in).
    Killed between them, the run has no resume/ but the previous state aside and an unfinished
    new one: the restart puts the previous state back and ends as if nothing had happened."""
    cfg = config(base, steps=6, eval_every=2)
    assert run(cfg, tmp_path / "reference") == "completed"
    polls = iter(range(1, 100))  # the trainer polls once per step: "near" at step 4 stops it there
    monkeypatch.setattr(engines.tiny.trainer, "time_limit_near", lambda: next(polls) == 4)
    with pytest.raises(TimeLimitReached, match="after step 4"):
        Trainer(RunConfig.check(cfg), RunDir(tmp_path / "killed")).run()
    monkeypatch.undo()
    train = tmp_path / "killed" / "train"
    aside = train / ".resume.old-killed"
    aside.mkdir()
    os.replace(train / "resume", aside / "x")  # the first rename of the next save
    (train / ".resume.tmp-killed").mkdir()
    (train / ".resume.tmp-killed" / "state.safetensors").write_bytes(b"half written")
    assert Trainer(RunConfig.check(cfg), RunDir(tmp_path / "killed")).run() == "completed"
    assert untimed_rows(train / "metrics.jsonl") == untimed_rows(tmp_path / "reference" / "train" / "metrics.jsonl")
    for step in (2, 4, 6):
        name = f"checkpoints/step_{step}/model.safetensors"
        assert (train / name).read_bytes() == (tmp_path / "reference" / "train" / name).read_bytes()
    assert sorted(path.name for path in train.iterdir() if path.name.startswith(".")) == []


def test_non_finite_training_is_reported_as_diverged(base, tmp_path):
    assert run(config(base, steps=5, lr=1e30), tmp_path) == "diverged"
    status = json.loads((tmp_path / "train" / "status.json").read_text())
    assert status["status"] == "diverged" and "diverged at step" in status["message"]


def test_clis_report_bad_input_without_a_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-m", "engines.prepare", "--engine", "tiny", "--engine-params-json",
                             '{"preset": "demo", "widht": 8}', "--out", str(tmp_path / "base")],
                            capture_output=True, text=True)
    assert result.returncode != 0 and "unknown key(s) ['widht']" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "base").exists()


def test_dispatcher_routes_by_engine(base, tmp_path, monkeypatch):
    import engines.slime.launch as launch

    calls = []
    monkeypatch.setattr(launch, "run", lambda cfg, directory: calls.append((cfg, directory)) or "completed")
    table1 = yaml.safe_load(open("workflow/presets/table1.yaml"))
    cfg = {**config(base), "engine": "slime", "engine_params": table1["engine_params"], "run_key": "stale"}
    assert run(cfg, tmp_path / "s") == "completed"
    pinned = json.loads((tmp_path / "s" / "config.json").read_text())
    # the slime engine gets the checked RunConfig of the pinned config and its RunDir, like the tiny engine
    (run_config, directory), = calls
    assert json.loads(json.dumps(run_config.raw, default=dict)) == pinned and pinned["run_key"] != "stale"
    assert run_config.engine.name == "slime" and directory.path == tmp_path / "s"
    with pytest.raises(ValueError, match="unknown engine 'vllm'"):
        run({**cfg, "engine": "vllm"}, tmp_path / "v")
