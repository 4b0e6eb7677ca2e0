"""engines.slime.launch: golden job scripts (every flag that matters, with its value), bad input
refused before anything is written, the image and the hooks as slime loads them. Running the script
against a fake `ray`: test_slime_job_run.py."""
from __future__ import annotations

import copy
import inspect
import json
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

import stabilizers.api
from engines.slime import launch
from engines.slime.job_script import write_job_script
from engines.slime.params import REPO, check_container
from grid.config import load
from grid.expand import resolve_run_config
from grid.folder import GridDir
from harness.run import RunDir
from harness.run_config import RunConfig
from stabilizers import LossOutput, parameters
from tests.support import slime_standin
from tests.support.fake_ray import IMAGE, PIN, PRESET


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
    assert "--temp-dir /tmp/ray --disable-usage-stats" in text  # Ray's spill on the declared node-local path
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
                      "stalebench_canary": False,  # a train job runs to its step budget (engines.slime.canary)
                      "stalebench_stop_at": None}  # no SLURM job here: no clock stop (harness.engine.stop_time)


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


def test_one_image_everywhere():
    """The preset's training image, its evaluation server's image and the pin are the image built at
    the pinned slime commit (envs/slime-container.yaml and docs/cluster.md say how), so the strict commit check passes."""
    preset = load(PRESET)
    assert preset["engine_params"]["container"] == PIN["image"]
    assert f"docker://{PIN['image']}" in preset["eval"]["server"]["command_prefix"]
    assert preset["engine_params"]["slime_commit_check"] == "strict"
    readme = (Path(REPO) / "docs" / "cluster.md").read_text()
    assert f"--build-arg SLIME_COMMIT={PIN['slime']['commit']}" in readme and PIN["image"] in readme


def test_every_hook_flag_resolves_as_slime_loads_it(table1):
    """slime imports each --*-path hook with load_function and calls it with fixed arguments: the
    functions the launcher names exist and take those arguments."""
    _, _, flags, _, _ = job(table1, "grpo", 1, 0)
    hooks = {flag: values[0] for flag, values in flags.items() if flag.endswith("-path") and "/" not in values[0]}
    assert set(hooks) == set(slime_standin.HOOK_CALLS)
    for flag, path in hooks.items():
        function = slime_standin.load_function(path)
        inspect.signature(function).bind(*slime_standin.HOOK_CALLS[flag])  # raises if slime's call does not fit


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


def test_fingerprints_from_another_interpreter_are_compared_recipe_by_recipe(tmp_path, capsys):
    """--fingerprints (the image's, written to a file) --compare'd on the login node: equal digests pass;
    one that differs is named with both digests and both torch versions, and the command fails."""
    config = PRESET
    launch.main(["--fingerprints", str(config)])
    theirs = json.loads(capsys.readouterr().out)
    assert len(theirs["digests"]) == 14 and "grpo_r3" in theirs["digests"]
    (tmp_path / "image.json").write_text(json.dumps(theirs))
    launch.main(["--fingerprints", str(config), "--compare", str(tmp_path / "image.json")])
    assert "all 14 digests equal" in capsys.readouterr().out
    theirs["digests"]["grpo_r3"], theirs["torch"] = "0" * 64, "2.11.0"
    (tmp_path / "image.json").write_text(json.dumps(theirs))
    with pytest.raises(SystemExit, match=r"the image computes other losses: grpo_r3: [0-9a-f]{64} here \(torch .*\), "
                                         r"0{64} there \(torch 2.11.0\)"):
        launch.main(["--fingerprints", str(config), "--compare", str(tmp_path / "image.json")])
