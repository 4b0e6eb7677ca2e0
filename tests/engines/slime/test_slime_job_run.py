"""engines.slime.launch.run and the job script it writes, run against a fake `ray`
(tests/support/fake_ray.py): HF saves published to step folders, status, the pre-flight before Ray, the
time-limit stop, divergence as a result, the strict commit check, a finished run never relaunched."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
import yaml

from engines.slime import job_script, launch
from engines.slime.job_script import write_job_script
from engines.slime.params import REPO
from grid.expand import resolve_run_config
from grid.folder import GridDir
from harness.engine import EXIT_RESUME, TimeLimitReached
from harness.run import RunDir
from harness.run_config import RunConfig
from tests.support.fake_ray import PIN, fake_job_environment, fake_slime_job
from tests.support.slime_checkpoints import write_hf_save


def test_publish_renames_complete_hf_saves_to_step_directories(tmp_path):
    hf = tmp_path / "train" / "hf"
    for rollout_id, shards in ((15, 3), (31, 3), (47, 2)):  # iter_47: killed after 2 of 3 shards
        write_hf_save(hf / f"iter_{rollout_id}", shards_written=shards)
    write_hf_save(hf / "iter_63", shards_written=1, total_shards=1)  # a single-file save (no index)
    (tmp_path / "train" / "checkpoints" / "step_16").mkdir(parents=True)  # from an earlier attempt
    published, problems = launch.publish_hf_checkpoints(RunDir(tmp_path))
    assert [p.name for p in published] == ["step_16", "step_32", "step_64"]
    assert (tmp_path / "train" / "checkpoints" / "step_16" / "model.safetensors.index.json").exists()
    assert (hf / "iter_47").exists() and not (hf / "iter_15").exists()
    assert len(problems) == 1 and "iter_47" in problems[0] and "model.safetensors.index.json" in problems[0]



def test_a_publish_killed_inside_its_swap_keeps_one_whole_copy_of_each_step(tmp_path):
    """publish renames a re-saved step's old folder to step_<N>.replaced, the newer save in, then deletes the
    old one: killed after the first rename, the next publish takes the newer save (still whole in hf/);
    killed after the second, it deletes the leftover; with no newer save, the old folder goes back."""
    hf, checkpoints = tmp_path / "train" / "hf", tmp_path / "train" / "checkpoints"
    write_hf_save(hf / "iter_15", shards_written=3)  # step 16 re-saved; its old copy set aside
    write_hf_save(checkpoints / "step_16.replaced", shards_written=1, total_shards=1)
    write_hf_save(checkpoints / "step_32", shards_written=3)  # swapped in, the old one not yet deleted
    write_hf_save(checkpoints / "step_32.replaced", shards_written=1, total_shards=1)
    write_hf_save(checkpoints / "step_48.replaced", shards_written=3)  # the newer save died in hf/
    write_hf_save(hf / "iter_47", shards_written=1)
    published, problems = launch.publish_hf_checkpoints(RunDir(tmp_path))
    assert [p.name for p in published] == ["step_16"] and "iter_47" in problems[0]
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step_16", "step_32", "step_48"]
    assert (checkpoints / "step_16" / "model.safetensors.index.json").exists()  # the newer save
    assert (checkpoints / "step_48" / "model.safetensors.index.json").exists()  # the only whole copy



@pytest.mark.slow  # the job script with a fake ray
@pytest.mark.parametrize("fail_after", [None, 6])
def test_run_executes_the_script_and_writes_status(table1, tmp_path, monkeypatch, fail_after):
    slime, calls = fake_job_environment(tmp_path, monkeypatch)
    if fail_after:
        monkeypatch.setenv("FAKE_RAY_FAIL_AFTER", str(fail_after))
    table1.update(steps=8, eval_every=2)
    table1["engine_params"].update(container_runtime="none", slime_dir=str(slime), slime_commit_check="warn")
    run_config = resolve_run_config(table1, "sat_grpo", 8, 0)
    directory = GridDir.of(table1).run("sat_grpo", 8, 0).path
    megatron = directory / "train" / "megatron"

    if fail_after:  # killed in the middle of the HF save of step 6, after its Megatron save
        with pytest.raises(RuntimeError, match="exited with code 1 after step 6"):
            launch.run(RunConfig.check(run_config), RunDir(directory))
        status = json.loads((directory / "train" / "status.json").read_text())
        assert (status["status"], status["step"]) == ("failed", 6)
        assert sorted(p.name for p in (directory / "train" / "checkpoints").iterdir()) == ["step_2", "step_4"]
        assert "iter_5" in status["incomplete_hf_checkpoints"][0]
        assert sorted(p.name for p in megatron.glob("iter_*")) == ["iter_0000003", "iter_0000005"]
        return
    assert launch.run(RunConfig.check(run_config), RunDir(directory)) == "completed"
    status = json.loads((directory / "train" / "status.json").read_text())
    assert (status["status"], status["step"]) == ("completed", 8)
    assert sorted(p.name for p in (directory / "train" / "checkpoints").iterdir()) == [
        "step_2", "step_4", "step_6", "step_8"]
    assert sorted(p.name for p in megatron.glob("iter_*")) == ["iter_0000005", "iter_0000007"]  # keep 2
    recorded = [json.loads(line) for line in calls.read_text().splitlines()]
    assert [c[:2] for c in recorded] == [["start", "--head"], ["job", "submit"], ["stop"]]
    submit = recorded[1]
    assert submit[-4:] == ["--num-layers", "2", "--hidden-size", "8"]  # MODEL_ARGS expanded last
    assert submit[submit.index("--") + 1:submit.index("--") + 4] == ["python3", "-m", "engines.slime.driver"]
    assert (directory / "train" / "slime_commit.txt").read_text().strip() == "unknown"



@pytest.mark.slow  # the job script with a fake ray
def test_the_job_runs_the_preflight_before_ray_starts(table1, tmp_path, monkeypatch):
    slime, calls = fake_job_environment(tmp_path, monkeypatch)
    table1["engine_params"].update(container_runtime="none", slime_dir=str(slime), slime_commit_check="warn")
    run_config = resolve_run_config(table1, "grpo", 1, 0)
    script = write_job_script(RunConfig.check(run_config), GridDir.of(table1).run("grpo", 1, 0))
    # a config changed after the dry run (here: the reward) is caught by the job itself
    changed = dict(run_config, engine_params=dict(run_config["engine_params"], rm_type="deepscaler", reward_key=None))
    GridDir.of(table1).run("grpo", 1, 0).config_path.write_text(json.dumps(changed))  # what the job reads
    result = subprocess.run(["bash", str(script)], check=False, capture_output=True, text=True)
    assert result.returncode != 0
    assert "engines.slime.preflight: engine_params.rm_type = 'deepscaler' cannot score prompt_format 'dapo'" in (
        result.stderr)
    assert not calls.exists()  # ray was never called



@pytest.mark.slow  # the job script with a fake ray
def test_time_limit_warning_saves_and_stops_without_a_status(table1, tmp_path, monkeypatch):
    """SIGURG to the job script -> train/stop_requested -> the driver saves after step 5 and ends ->
    TimeLimitReached, no status.json, the off-cadence HF save dropped; the retry finishes the run."""
    run_config, directory, _ = fake_slime_job(table1, tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_RAY_WARN_AFTER", "5")
    with pytest.raises(TimeLimitReached, match="after step 5 of 8"):
        launch.run(RunConfig.check(run_config), RunDir(directory))
    train = directory / "train"
    assert not (train / "status.json").exists()
    assert sorted(p.name for p in (train / "checkpoints").iterdir()) == ["step_4"]
    assert not list((train / "hf").glob("iter_*"))  # the save at step 5 is Megatron's resume point only
    monkeypatch.delenv("FAKE_RAY_WARN_AFTER")
    (train / "metrics.jsonl").unlink()  # the fake job replays every step (slime's metrics hook cuts back)
    assert launch.run(RunConfig.check(run_config), RunDir(directory)) == "completed"
    assert sorted(p.name for p in (train / "checkpoints").iterdir()) == ["step_4", "step_8"]



@pytest.mark.slow  # the job script with a fake ray
def test_the_clock_stops_the_job_with_no_signal_and_the_retry_finishes(table1, tmp_path, monkeypatch, time_limit):
    """No SIGURG anywhere (proctrack/cgroup, Apptainer): the job's end, 30 s away, is within the 60 s lead
    when it starts, so the driver stops by the clock after its first step (the custom config's
    stalebench_stop_at), saves and marks stopped -> TimeLimitReached; the retry, with no end time, finishes."""
    run_config, directory, _ = fake_slime_job(table1, tmp_path, monkeypatch)
    time_limit(60, end_time=lambda: (time.time() + 30, "a test"))
    with pytest.raises(TimeLimitReached, match="after step 1 of 8"):
        launch.run(RunConfig.check(run_config), RunDir(directory))
    train = directory / "train"
    assert not (train / "stop_requested").exists() and (train / "stopped").read_text() == "0"
    assert yaml.safe_load(RunDir(directory).engine_file("engine_settings").read_text())["stalebench_stop_at"] is not None
    time_limit(None)
    (train / "metrics.jsonl").unlink()  # the fake job replays every step (slime's metrics hook cuts back)
    assert launch.run(RunConfig.check(run_config), RunDir(directory)) == "completed"
    assert sorted(p.name for p in (train / "checkpoints").iterdir()) == ["step_4", "step_8"]


@pytest.mark.slow  # the job script with a fake ray
def test_a_non_finite_step_ends_the_run_diverged_and_its_checkpoints_stay_scorable(table1, tmp_path, monkeypatch):
    """slime logs a non-finite grad norm at step 6 (Megatron's NaN check is off, so nothing raises) and
    the driver ends the job there: the run is "diverged" at step 6, with no retry (run returns, as the
    tiny engine's train does), its HF checkpoints before it are published for scoring, and a rerun
    starts no job."""
    run_config, directory, calls = fake_slime_job(table1, tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_RAY_NAN_AT", "6")
    assert launch.run(RunConfig.check(run_config), RunDir(directory)) == "diverged"
    status = json.loads((directory / "train" / "status.json").read_text())
    assert (status["status"], status["step"]) == ("diverged", 6)
    assert sorted(RunDir(directory).checkpoints()) == [4]  # what eval.score scores, as for a tiny run
    jobs = calls.read_text()
    assert launch.run(RunConfig.check(run_config), RunDir(directory)) == "diverged" and calls.read_text() == jobs


@pytest.mark.slow  # the job script with a fake ray
def test_an_fp16_loss_scale_overflow_is_a_skipped_step_not_divergence(table1, tmp_path, monkeypatch):
    """fp16: the same NaN grad norm at step 6 with a finite loss is Megatron's loss scaler skipping an
    overflowed update (engines.slime.metrics.first_non_finite): the run goes on, completes, and its
    status names the skipped step."""
    table1["engine_params"]["precision"] = "fp16"
    run_config, directory, _ = fake_slime_job(table1, tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_RAY_NAN_AT", "6")
    assert launch.run(RunConfig.check(run_config), RunDir(directory)) == "completed"
    status = json.loads((directory / "train" / "status.json").read_text())
    assert status["message"] == "completed 8 steps (1 skipped at an fp16 loss-scale overflow: steps [6])"
    assert sorted(RunDir(directory).checkpoints()) == [4, 8]



@pytest.mark.slow  # the job script with a fake ray
def test_a_job_that_fails_after_the_warning_is_a_failure_not_a_stop(table1, tmp_path, monkeypatch):
    """The warning came (train/stop_requested), but the job died before the driver's save and mark
    (train/stopped): a failure with its status, not a time-limit stop to resume."""
    run_config, directory, _ = fake_slime_job(table1, tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_RAY_WARN_AFTER", "5")
    monkeypatch.setenv("FAKE_RAY_FAIL_AT_STOP", "1")
    with pytest.raises(RuntimeError, match="exited with code 1 after step 5"):
        launch.run(RunConfig.check(run_config), RunDir(directory))
    train = directory / "train"
    assert (train / "stop_requested").exists() and not (train / "stopped").exists()
    assert json.loads((train / "status.json").read_text())["status"] == "failed"



@pytest.mark.slow  # the job script with a fake ray
def test_a_warning_before_the_job_starts_still_saves_and_exits_75(table1, tmp_path, monkeypatch):
    """SIGURG during `ray start`, before the job is submitted: the trap is already in place, so the
    driver stops after its first step with a save, and engines.train exits with EXIT_RESUME."""
    run_config, directory, _ = fake_slime_job(table1, tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_RAY_WARN_AT_START", "1")
    (directory / "train").mkdir(parents=True)
    (directory / "train" / "stop_requested").touch()  # a mark left by the last attempt is cleared first
    result = subprocess.run([sys.executable, "-m", "engines.train", "--run-dir", str(directory),
                             "--config-json", json.dumps(run_config)], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == EXIT_RESUME, result.stderr
    assert "stopped after step 1 of 8 at the time-limit warning" in result.stderr
    train = directory / "train"
    assert [p.name for p in (train / "megatron").glob("iter_*")] == ["iter_0000000"]  # saved after step 1
    assert not (train / "status.json").exists()



@pytest.mark.slow  # the job script with a fake ray
@pytest.mark.parametrize("at_the_pin", [True, False])
def test_strict_commit_check_reads_a_checkout_owned_by_another_user(table1, tmp_path, monkeypatch, at_the_pin):
    """As in a container whose /root/slime another user built: at the pinned commit the job runs; at
    another, it exits 3 naming both commits."""
    slime, calls = fake_job_environment(tmp_path, monkeypatch)
    git = ["git", "-C", str(slime), "-c", "user.name=test", "-c", "user.email=test@example.org"]
    for command in (["init", "-q"], ["add", "."], ["commit", "-qm", "slime"]):
        subprocess.run(git + command, check=True)
    head = subprocess.run(git + ["rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    if os.geteuid() == 0:
        for path in (slime, *slime.rglob("*")):
            os.chown(path, 4321, 4321, follow_symlinks=False)
    else:  # git's own switch for the same ownership check
        monkeypatch.setenv("GIT_TEST_ASSUME_DIFFERENT_OWNER", "1")
    pinned = head if at_the_pin else "0" * 40
    monkeypatch.setattr(job_script, "pinned_container", lambda: {**PIN, "slime": {**PIN["slime"], "commit": pinned}})
    table1.update(steps=2, eval_every=1)
    table1["engine_params"].update(container_runtime="none", slime_dir=str(slime), slime_commit_check="strict")
    script = write_job_script(RunConfig.check(resolve_run_config(table1, "grpo", 1, 0)), GridDir.of(table1).run("grpo", 1, 0))
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=120)
    if at_the_pin:
        assert result.returncode == 0, result.stderr
        assert (script.parent / "slime_commit.txt").read_text().strip() == head
        assert [json.loads(line)[:2] for line in calls.read_text().splitlines()][1] == ["job", "submit"]
    else:
        assert result.returncode == 3
        assert f"is at commit {head}, not the pinned {pinned}" in result.stderr
        assert not calls.exists()  # stopped before Ray



@pytest.mark.slow  # the job script with a fake ray
def test_a_finished_run_is_never_relaunched(table1, tmp_path, monkeypatch):
    """A params-triggered rerun of a completed cluster run starts no job script (no Ray, no model);
    one whose last HF checkpoint is gone says so instead of starting a job with nothing to train."""
    run_config, directory, calls = fake_slime_job(table1, tmp_path, monkeypatch)
    assert launch.run(RunConfig.check(run_config), RunDir(directory)) == "completed"
    jobs = calls.read_text()
    (directory / "train" / "job.sh").unlink()
    assert launch.run(RunConfig.check(run_config), RunDir(directory)) == "completed"
    assert calls.read_text() == jobs and not (directory / "train" / "job.sh").exists()  # no script written or run
    shutil.rmtree(directory / "train" / "checkpoints" / "step_8")
    with pytest.raises(FileNotFoundError, match=r"says completed, but its last HF checkpoint .*step_8"):
        launch.run(RunConfig.check(run_config), RunDir(directory))
    assert calls.read_text() == jobs

