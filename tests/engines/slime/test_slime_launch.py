"""engines.slime.launch: golden job scripts (every flag that matters, with its value), bad input
refused before anything is written, and run() executing its script against a fake `ray`."""
from __future__ import annotations

import copy
import inspect
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import stabilizers.api
from engines.slime import job_script, launch
from engines.slime.job_script import write_job_script
from engines.slime.params import REPO, check_container
from harness.config import load
from harness.engine import EXIT_RESUME, TimeLimitReached
from harness.grid import resolve_run_config
from harness.grid_dir import GridDir
from harness.run import RunConfig, RunDir
from stabilizers import LossOutput, parameters
from tests.support import slime_standin
from tests.support.fake_ray import IMAGE, PIN, PRESET, fake_job_environment, fake_slime_job, table1_config
from tests.support.slime_checkpoints import write_hf_save


@pytest.fixture
def table1(tmp_path):
    return table1_config(tmp_path)


def parse_submit(script: str) -> tuple[list[str], dict[str, list[str]]]:
    """The entry point and flags of the script's `ray job submit ... -- <entry> <flags>`."""
    command = script[script.index("ray job submit"):].replace("\\\n", " ").split(" &\n")[0]
    tokens = shlex.split(command)
    tokens = tokens[tokens.index("--") + 1:]
    assert tokens[-1] == "${MODEL_ARGS[@]}"  # the model's architecture flags, from slime, last
    tokens = tokens[:-1]
    first_flag = next(i for i, t in enumerate(tokens) if t.startswith("--"))
    entry, flags, current = tokens[:first_flag], {}, None
    for token in tokens[first_flag:]:
        if token.startswith("--"):
            current = token
            assert current not in flags, f"flag {current} given twice"
            flags[current] = []
        else:
            flags[current].append(token)
    return entry, flags


def job(config, recipe, lag, seed):
    run_config = resolve_run_config(config, recipe, lag, seed)
    directory = GridDir.of(config).run(recipe, lag, seed).path
    script = write_job_script(RunConfig.check(run_config), RunDir(directory))
    text = script.read_text()
    subprocess.run(["bash", "-n", str(script)], check=True)  # valid shell
    custom = yaml.safe_load((script.parent / "slime_custom.yaml").read_text())
    return text, *parse_submit(text), custom, directory.resolve()


def assert_paper_settings(flags, train, seed, config, *, per_token_loss=True):
    engine = config["engine_params"]
    expected = {
        "--hf-checkpoint": [engine["hf_checkpoint"]], "--ref-load": [engine["ref_load"]],
        "--prompt-data": [engine["prompt_data"]], "--load": [f"{train}/megatron"], "--save": [f"{train}/megatron"],
        "--save-interval": ["16"], "--save-hf": [f"{train}/hf/iter_{{rollout_id}}"],
        "--seed": [str(seed)], "--rollout-seed": [str(seed)], "--num-rollout": ["544"],
        "--rollout-batch-size": ["256"], "--n-samples-per-prompt": ["16"], "--global-batch-size": ["4096"],
        "--rollout-max-response-len": ["30720"], "--rollout-temperature": ["1.0"], "--rollout-top-p": ["1.0"],
        # the Base model's context (engines/slime/models.yaml: the fixture's model has no config.json)
        "--rollout-max-context-len": ["32768"], "--rollout-max-prompt-len": ["2048"],
        "--rm-type": ["dapo"], "--reward-key": ["score"], "--num-gpus-per-node": ["8"],
        "--optimizer-cpu-offload": [], "--overlap-cpu-optimizer-d2h-h2d": [], "--use-precision-aware-optimizer": [],
        "--rollout-top-k": ["-1"], "--actor-num-nodes": ["1"], "--actor-num-gpus-per-node": ["4"],
        "--rollout-num-gpus": ["4"], "--tensor-model-parallel-size": ["4"], "--sequence-parallel": [],
        "--expert-model-parallel-size": ["4"], "--pipeline-model-parallel-size": ["1"],
        "--context-parallel-size": ["1"], "--optimizer": ["adam"], "--lr": ["1e-06"],
        "--lr-decay-style": ["constant"], "--adam-beta1": ["0.9"], "--adam-beta2": ["0.98"],
        "--loss-type": ["custom_loss"], "--custom-loss-function-path": ["engines.slime.loss.policy_loss"],
        "--calculate-per-token-loss": [] if per_token_loss else None, "--advantage-estimator": ["grpo"],
        "--use-kl-loss": [], "--kl-loss-coef": ["0.001"], "--kl-loss-type": ["low_var_kl"],
        "--kl-coef": ["0.0"], "--entropy-coef": ["0.0"],
        "--custom-config-path": [f"{train}/slime_custom.yaml"],
        "--rollout-data-postprocess-path": ["engines.slime.metrics.postprocess"],
        "--custom-rollout-log-function-path": ["engines.slime.metrics.log_rollout"],
    }
    for flag, values in expected.items():
        assert flags.get(flag) == values, f"{flag}: {flags.get(flag)} != {values}"
    for absent in ("--colocate", "--use-tis", "--no-save-optim", "--eval-interval"):
        assert absent not in flags  # TIS is the recipe's; evaluation is the workflow's


def assert_harness_script(text):
    assert f"SLIME_COMMIT={PIN['slime']['commit']}" in text
    assert "exit 3" in text  # strict commit check
    assert "apptainer exec --nv" in text and f"docker://{IMAGE}" in text
    assert PIN["image"].endswith(f":{PIN['slime']['commit'][:8]}-cu129")  # the image built at the pinned commit
    assert "python3 -m engines.slime.preflight" in text.split("ray start")[0]  # checked before Ray starts
    assert "# pre-flight: memory per training GPU" in text
    assert "engines.slime.retention" in text and "--keep 2" in text
    assert 'source "$SLIME_DIR/scripts/models/qwen3-30B-A3B.sh"' in text
    assert "ray start --head" in text and "trap 'kill $PRUNER 2>/dev/null || true; ray stop; prune' EXIT" in text
    assert "trap 'touch \"$STOP_REQUESTED\"' URG" in text  # SLURM's time-limit warning
    assert "pkill" not in text and "--force" not in text
    assert f"{REPO}" in text.split("RUNTIME_ENV=")[1].splitlines()[0]  # the harness on PYTHONPATH


def test_golden_grpo_lag1(table1):
    text, entry, flags, custom, directory = job(table1, "grpo", 1, 0)
    assert entry == ["python3", "-m", "engines.slime.driver"]  # every lag mode: slime's train_async.py is not used
    assert "--update-weights-interval" not in flags  # the driver pushes weights itself
    assert flags["--eps-clip"] == ["0.2"] and flags["--eps-clip-high"] == ["0.2"]
    assert "--use-rollout-routing-replay" not in flags
    assert_paper_settings(flags, directory / "train", 0, table1)
    assert_harness_script(text)
    assert '"${MODEL_ARGS[@]}" &\n' in text  # the model's architecture flags, from slime, last
    # The recipe as the run key covers it: every parameter of the loss, defaults spelled out.
    params = {**parameters("grpo"), "eps_low": 0.2, "eps_high": 0.2}
    assert custom == {"stalebench_recipe": {"name": "grpo", "loss": "grpo", "params": params,
                                            "routing_replay": False, "tis": None, "table1": "grpo"},
                      "stalebench_run_dir": str(directory), "stalebench_lag_mode": "interval", "stalebench_lag": 1,
                      "stalebench_seed": 0,
                      "stalebench_run_key": resolve_run_config(table1, "grpo", 1, 0)["run_key"],
                      "stalebench_canary": False}  # a train job runs to its step budget (engines.slime.canary)


def test_golden_sat_gspo_r3_lag8_interval(table1):
    text, entry, flags, custom, directory = job(table1, "sat_gspo_r3", 8, 1)
    assert entry == ["python3", "-m", "engines.slime.driver"]
    assert flags["--use-rollout-routing-replay"] == []
    # SAT-GSPO weighs each response once (sample_mean): slime's per-sample mean, not its per-token loss
    assert_paper_settings(flags, directory / "train", 1, table1, per_token_loss=False)
    assert_harness_script(text)
    assert custom["stalebench_recipe"]["loss"] == "sat_gspo"
    assert custom["stalebench_recipe"]["params"] == {**parameters("sat_gspo"), "eps_low": 0.2, "eps_high": 0.2,
                                                     "alpha": 0.9}
    assert custom["stalebench_recipe"]["routing_replay"] is True
    assert (custom["stalebench_lag_mode"], custom["stalebench_lag"], custom["stalebench_seed"]) == ("interval", 8, 1)


def test_golden_constant_lag_runs_the_harness_driver(table1):
    table1["lag_mode"] = "constant"
    text, entry, flags, custom, directory = job(table1, "grpo_tis", 4, 2)
    assert entry == ["python3", "-m", "engines.slime.driver"]
    assert "--update-weights-interval" not in flags  # the driver pushes weights itself
    assert_paper_settings(flags, directory / "train", 2, table1)
    assert_harness_script(text)
    assert custom["stalebench_recipe"]["tis"] == {"cap": 2.0, "floor": None}
    assert (custom["stalebench_lag_mode"], custom["stalebench_lag"]) == ("constant", 4)


@pytest.mark.parametrize("change, error, message", [
    (lambda c: c["engine_params"].update(ref_load="/nonexistent/torch_dist"), FileNotFoundError,
     "engine_params.ref_load: /nonexistent/torch_dist does not exist"),
    (lambda c: c["engine_params"].update(hf_checkpoint="/nonexistent/hf"), FileNotFoundError, "hf_checkpoint"),
    (lambda c: c["engine_params"].update(container="slimerl/slime:latest"), ValueError, "not pinned: tag 'latest'"),
    (lambda c: c["engine_params"].update(container="slimerl/slime"), ValueError, "not pinned"),
    (lambda c: c["engine_params"].update(container="slimerl/slime@sha256:abc"), ValueError, "64 hex"),
    (lambda c: c["engine_params"].update(global_batch_size=1024), ValueError, "one optimizer step per rollout"),
    (lambda c: c["engine_params"].update(context_parallel=2), ValueError, "context_parallel must be 1"),
    (lambda c: c["engine_params"].update(actor_gpus=8), ValueError, "exceeds gpus_per_node"),
    (lambda c: c["engine_params"].update(tensor_paralel=4), ValueError, "unknown slime engine_params"),
    (lambda c: c["engine_params"].pop("model_type"), ValueError, "missing required key"),
    (lambda c: c["engine_params"].update(vcpo_ess_lr=True), ValueError, "vcpo_ess_lr .* tiny-engine switch"),
    (lambda c: c.update(extra_recipes={"summed": {"loss": "summed_loss"}}, recipes=["summed"]), ValueError,
     "no 'aggregation' parameter"),
])
def test_bad_input_is_refused_before_anything_is_written(table1, change, error, message, monkeypatch):
    # a stabilizer slime cannot express: a loss with no aggregation slime has a normaliser for
    @stabilizers.api.ranges(eps_low="[0, 1)")
    def summed_loss(batch, *, eps_low: float = 0.2):
        return LossOutput(-(batch.logp * batch.mask).sum())
    summed_loss.__needs__ = ()  # what register() records: it needs nothing of the sampler beyond mu
    monkeypatch.setitem(stabilizers.api._REGISTRY, "summed_loss", summed_loss)
    change(table1)
    recipe = table1["recipes"][0]
    directory = GridDir.of(table1).run(recipe, 8, 0).path
    with pytest.raises(error, match=message):  # engine_params errors already when the run config is resolved
        write_job_script(RunConfig.check(resolve_run_config(table1, recipe, 8, 0)), RunDir(directory))
    assert not directory.exists()


def test_pinned_references_are_accepted():
    for image in (PIN["image"], "slimerl/slime:nightly-dev-20260810a-cu129", "registry:5000/slime:v0.3",
                  "slimerl/slime:latest@sha256:" + "a" * 64, "images/slime-624b824a.sif"):
        check_container(image)


def test_the_image_is_one_the_nodes_can_start(table1, tmp_path):
    """A registry tag the nodes reach and a local .sif are both accepted (the .sif run as a file, not
    pulled); the localhost placeholder of envs/slime-container.yaml is refused by name before the job
    script is written, and so is a .sif that is not there or a .sif under docker."""
    def script(**engine_params):
        config = copy.deepcopy(table1)
        config["engine_params"].update(engine_params)
        config["results_dir"] = str(tmp_path / "results" / str(abs(hash(str(engine_params)))))  # the image is in the run key
        run_config = RunConfig.check(resolve_run_config(config, "grpo", 1, 0))
        return write_job_script(run_config, GridDir.of(config).run("grpo", 1, 0)).read_text()

    assert f"docker://{IMAGE}" in script()
    sif = tmp_path / "slime-624b824a.sif"
    sif.write_bytes(b"SIF")
    assert f"{shlex.quote(str(sif))} bash" in script(container=str(sif)) and "docker://" not in script(container=str(sif))
    with pytest.raises(ValueError, match="names a registry on localhost, which is each node itself"):
        script(container=PIN["image"])
    with pytest.raises(FileNotFoundError, match="engine_params.container: .*missing.sif does not exist"):
        script(container=str(tmp_path / "missing.sif"))
    with pytest.raises(ValueError, match="is an Apptainer image: set container_runtime: apptainer"):
        script(container=str(sif), container_runtime="docker")


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


def test_one_image_everywhere():
    """The preset's training image, its evaluation server's image and the pin are the image built at
    the pinned slime commit (envs/slime-container.yaml and docs/cluster.md say how), so the strict commit check passes."""
    preset = load(PRESET)
    assert preset["engine_params"]["container"] == PIN["image"]
    assert f"docker://{PIN['image']}" in preset["eval"]["server"]["command_prefix"]
    assert preset["engine_params"]["slime_commit_check"] == "strict"
    readme = (Path(REPO) / "docs" / "cluster.md").read_text()
    assert f"--build-arg SLIME_COMMIT={PIN['slime']['commit']}" in readme and PIN["image"] in readme


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


def test_every_hook_flag_resolves_as_slime_loads_it(table1):
    """slime imports each --*-path hook with load_function and calls it with fixed arguments: the
    functions the launcher names exist and take those arguments."""
    _, _, flags, _, _ = job(table1, "grpo", 1, 0)
    hooks = {flag: values[0] for flag, values in flags.items() if flag.endswith("-path") and "/" not in values[0]}
    assert set(hooks) == set(slime_standin.HOOK_CALLS)
    for flag, path in hooks.items():
        function = slime_standin.load_function(path)
        inspect.signature(function).bind(*slime_standin.HOOK_CALLS[flag])  # raises if slime's call does not fit


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


def test_field_switches_map_to_slime_flags(table1):
    """R2 -> --use-routing-replay (Megatron's replay of the recompute's routing), R3 ->
    --use-rollout-routing-replay, std_normalization: false -> --disable-grpo-std-normalization,
    fp16 -> --fp16, bounded lag -> the harness's driver."""
    table1["extra_recipes"] = {"grpo_r2": {"loss": "grpo", "params": {"eps_low": 0.2, "eps_high": 0.2},
                                           "routing_replay": "r2"}}
    table1["extra_recipes"]["grpo_std_free"] = {"loss": "grpo", "std_normalization": False}  # Dr.GRPO's advantages
    table1["recipes"] = [*table1["recipes"], "grpo_r2", "grpo_std_free"]
    _, _, r2_flags, custom, _ = job(table1, "grpo_r2", 1, 0)
    assert r2_flags["--use-routing-replay"] == [] and "--use-rollout-routing-replay" not in r2_flags
    assert "--disable-grpo-std-normalization" not in r2_flags
    _, _, std_free_flags, std_free_custom, _ = job(table1, "grpo_std_free", 1, 0)
    assert std_free_flags["--disable-grpo-std-normalization"] == []
    assert std_free_custom["stalebench_recipe"]["std_normalization"] is False
    assert custom["stalebench_recipe"]["routing_replay"] == "r2"
    _, _, r3_flags, _, _ = job(table1, "grpo_r3", 1, 0)
    assert r3_flags["--use-rollout-routing-replay"] == [] and "--use-routing-replay" not in r3_flags
    assert "--fp16" not in r3_flags
    table1["engine_params"] = {**table1["engine_params"], "precision": "fp16"}
    table1["lag_mode"] = "bounded"
    _, entry, fp16_flags, custom, _ = job(table1, "grpo", 4, 0)
    assert fp16_flags["--fp16"] == [] and entry == ["python3", "-m", "engines.slime.driver"]
    assert (custom["stalebench_lag_mode"], custom["stalebench_lag"]) == ("bounded", 4)
    table1["engine_params"]["precision"] = "fp8"
    with pytest.raises(ValueError, match="engine_params.precision"):
        job(table1, "grpo", 4, 0)


def test_what_slime_cannot_run_is_refused_when_the_run_config_is_checked(table1):
    """slime's limits are the engine's check_run: RunConfig.check refuses them, before any folder."""
    table1["lag_mode"] = "queue"
    with pytest.raises(ValueError, match="queue .* tiny engine only"):
        RunConfig.check(resolve_run_config(table1, "grpo", 8, 0))
    table1["lag_mode"] = "interval"
    assert RunConfig.check(resolve_run_config(table1, "grpo", 8, 0)).engine.name == "slime"
