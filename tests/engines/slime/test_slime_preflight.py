"""engines.slime.preflight: what a slime job must pass before its first GPU-hour (reward vs prompt
format, memory per GPU, context, extra_args), the dry run printing it, and complete-HF-save checks
(harness.hf_save) on the publishing and the scoring side."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import yaml

from engines.slime import footprint, preflight, retention
from engines.slime import loss as slime_loss
from engines.slime.flags import slime_flags
from engines.slime.job_script import write_job_script
from engines.slime.params import RESUME_BREAKING_FLAGS, model_context, model_shape, parameter_counts, resolve_params
from eval.score import ScoreError, score_run
from grid.config import load
from grid.expand import resolve_run_config
from grid.folder import GridDir
from harness.io import read_jsonl
from harness.run import RunDir
from harness.run_config import RunConfig
from tests.support.paths import FIXTURES, ROOT
from tests.support.slime_checkpoints import write_hf_save, write_megatron_save
from tests.support.workflow_cli import snakemake

PRESET = ROOT / "workflow" / "presets" / "table1.yaml"
GIB = 1024 ** 3


@pytest.fixture
def preset(tmp_path):
    config = load(PRESET)
    config["results_dir"] = str(tmp_path / "results")
    return config


def params_of(config, **changes):
    return resolve_params({**config["engine_params"], **changes})


# --- reward ---------------------------------------------------------------------------------------

def test_the_presets_reward_scores_the_shipped_sample_responses(preset):
    samples = [row for row in read_jsonl(preflight.REWARD_SAMPLES) if row["format"] == "dapo"]
    reward = preflight.rule_reward("dapo")
    assert [reward(row["response"], row["label"])["score"] for row in samples] == [
        1.0 if row["correct"] else -1.0 for row in samples]
    assert "dapo scores prompt_format dapo" in preflight.check_reward(params_of(preset), reward)


AGREEMENT = preflight.HERE / "reward_agreement.jsonl"


def test_the_reward_model_agrees_with_slimes_own_scorers_on_the_agreement_table():
    """engines/slime/reward_agreement.jsonl: scores of slime's rm_hub at the pinned commit (dapo,
    deepscaler, math) on sample responses written the ways a policy writes its answer."""
    rows = read_jsonl(AGREEMENT)
    assert len(rows) >= 20
    responses = " ".join(row["response"] for row in rows)
    for writing in ("\\boxed{", "$", "1,000", "x = 34", "</think>", "###Response", "Answer:"):
        assert writing in responses, writing
    assert {row["dapo"] for row in rows} == {1.0, -1.0} and {row["deepscaler"] for row in rows} == {0, 1}
    disagreements = []
    for row in rows:
        for rm_type in ("dapo", "deepscaler", "math"):
            score = preflight.rule_reward(rm_type)(row["response"], row["label"])
            score = score["score"] if isinstance(score, dict) else score
            if score != row[rm_type]:
                disagreements.append((rm_type, row["label"], row["response"][-40:], row[rm_type], score))
    assert disagreements == []


def test_deepscaler_with_a_base_model_is_refused_naming_reward_and_format(preset, tmp_path):
    # slime's deepscaler needs </think> or ###Response: on DAPO-style answers every score is 0
    with pytest.raises(ValueError, match=r"rm_type = 'deepscaler' cannot score prompt_format 'dapo'.*"
                                         r"correct answers score \[0.0, 0.0\] and wrong ones \[0.0, 0.0, 0.0\].*</think>"):
        preflight.check_reward(params_of(preset, rm_type="deepscaler", reward_key=None),
                               preflight.rule_reward("deepscaler"))
    # and the whole dry run refuses before writing anything
    preset["engine_params"].update(rm_type="deepscaler", reward_key=None)
    directory = GridDir.of(preset).run("grpo", 1, 0).path
    with pytest.raises(ValueError, match="'deepscaler' cannot score prompt_format 'dapo'"):
        write_job_script(RunConfig.check(resolve_run_config(preset, "grpo", 1, 0)), RunDir(directory), check_files=False)
    assert not directory.exists()


@pytest.mark.parametrize("rm_type, fmt", [("deepscaler", "think"), ("math", "boxed")])
def test_other_formats_pass_with_a_reward_that_reads_them(preset, rm_type, fmt):
    params = params_of(preset, rm_type=rm_type, prompt_format=fmt, reward_key=None, apply_chat_template=True)
    assert f"{rm_type} scores prompt_format {fmt}" in preflight.check_reward(params, preflight.rule_reward(rm_type))


def test_a_dict_reward_without_reward_key_is_refused(preset):
    with pytest.raises(ValueError, match=r"returns \['acc', 'pred', 'score'\]: set engine_params.reward_key"):
        preflight.check_reward(params_of(preset, reward_key=None), preflight.rule_reward("dapo"))


def test_prompt_data_must_match_the_format(preset, tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text((FIXTURES / "dapo_prompts.jsonl").read_text() + json.dumps({"prompt": "1+1?", "label": "2"}) + "\n")
    with pytest.raises(ValueError, match="line 4: the prompt does not ask for 'Answer:'"):
        preflight.check_prompts(params_of(preset, prompt_data=str(data)))
    data.write_text(json.dumps({"prompt": "Answer: ...", "label": "\\frac{1}{2}"}) + "\n")
    with pytest.raises(ValueError, match="line 1: label '.*' is not an integer"):
        preflight.check_prompts(params_of(preset, prompt_data=str(data)))


# --- memory ---------------------------------------------------------------------------------------

def test_memory_estimate_of_the_preset_and_of_slimes_own_example(preset):
    """Qwen3-30B-A3B (slime's scripts/models/qwen3-30B-A3B.sh): h = 2048, 48 layers, 32 heads x 128,
    4 query groups, 128 experts of ffn 768, vocab 151936, untied embeddings.
      attention/layer = 2048*4096 (q) + 2*2048*512 (k, v) + 4096*2048 (o) + 2*128 (qk norms) = 18,874,624
      + 2 norms 4,096 + router 2048*128 = 262,144                                 -> 19,140,864 / layer
      non-expert = 48 * 19,140,864 + 2 * 151936*2048 + 2048 (final norm)          = 1,541,093,376
      experts    = 48 * 128 * 3 * 2048 * 768                                       = 28,991,029,248
      total 30,532,122,624 (Qwen3-30B-A3B's 30.5B).
    Preset: 4 GPUs, TP4, EP4, ETP1, PP1, optimizer offloaded, 32768 tokens per micro-batch, full recompute:
      per GPU 1,541,093,376/4 + 28,991,029,248/4 = 385,273,344 + 7,247,757,312 = 7,633,030,656 params
      weights 2 B = 14.22 GiB, gradients 4 B = 28.44 GiB, Adam 0 (CPU)
      activations: layer inputs 48*32768*2048*2/4 = 1,610,612,736 B + one recomputed layer
      32768*2048*34/4 = 570,425,344 B + fp32 logits and grad 2*4*32768*151936/4 = 9,957,277,696 B = 11.30 GiB
      total 53.96 GiB of 139. Without offload: data parallel 4/(TP4) = 1 and 4/(EP4) = 1, so Adam is
      12 B * 7,633,030,656 = 85.31 GiB -> 139.26 GiB: refused (the issue's ~137 GB = 128 GiB of states).
    slime's run-qwen3-30B-A3B.sh: 8 GPUs, TP4, EP8, ETP1, PP1, --optimizer-cpu-offload, 20480 tokens:
      per GPU 385,273,344 + 28,991,029,248/8 = 385,273,344 + 3,623,878,656 = 4,009,152,000 params
      weights 7.47 GiB, gradients 14.94 GiB; activations 1,006,632,960 + 356,515,840 + 6,223,298,560 B
      = 7.07 GiB -> 29.47 GiB. Without offload: Adam 12 B * (385,273,344/2 + 3,623,878,656/1) = 42.65 GiB."""
    shape = model_shape("qwen3-30B-A3B")
    assert parameter_counts(shape) == (1_541_093_376, 28_991_029_248)
    memory = preflight.estimate_memory(params_of(preset), shape)
    assert memory["parameters_per_gpu"] == 7_633_030_656
    assert memory["parameters"] == pytest.approx(2 * 7_633_030_656 / GIB) == pytest.approx(14.218, abs=1e-3)
    assert memory["gradients"] == pytest.approx(28.436, abs=1e-3) and memory["optimizer"] == 0
    assert memory["activations"] == pytest.approx((1_610_612_736 + 570_425_344 + 9_957_277_696) / GIB)
    assert memory["total"] == pytest.approx(53.96, abs=0.01)
    no_offload = preflight.estimate_memory(params_of(preset, optimizer_cpu_offload=False), shape)
    assert no_offload["optimizer"] == pytest.approx(12 * 7_633_030_656 / GIB) and no_offload["total"] == pytest.approx(
        139.26, abs=0.01)
    with pytest.raises(ValueError, match=r"= 139.3 GiB of gpu_memory_gib 139: does not fit; set engine_params."
                                         r"optimizer_cpu_offload"):
        preflight.check_memory(params_of(preset, optimizer_cpu_offload=False), shape)

    slime_example = {**params_of(preset), "actor_gpus": 8, "expert_parallel": 8, "max_tokens_per_gpu": 20480}
    memory = preflight.estimate_memory(slime_example, shape)
    assert memory["parameters_per_gpu"] == 4_009_152_000
    assert (memory["parameters"], memory["gradients"]) == pytest.approx((7.468, 14.935), abs=1e-3)
    assert memory["activations"] == pytest.approx((1_006_632_960 + 356_515_840 + 6_223_298_560) / GIB)
    assert memory["total"] == pytest.approx(29.47, abs=0.01)
    memory = preflight.estimate_memory({**slime_example, "optimizer_cpu_offload": False}, shape)
    assert memory["optimizer"] == pytest.approx(12 * (385_273_344 / 2 + 3_623_878_656) / GIB)


def test_context_leaves_room_for_a_prompt(preset, tmp_path):
    shape = model_shape("qwen3-30B-A3B")
    assert preflight.check_context(params_of(preset), shape) == (
        "context: 32768 tokens = prompts up to 2048 + responses up to 30720")
    with pytest.raises(ValueError, match="rollout_max_response_len = 32768 leaves no room for a prompt"):
        preflight.check_context(params_of(preset, rollout_max_response_len=32768), shape)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 40960}))
    assert model_context(params_of(preset, hf_checkpoint=str(model)), shape) == 40960  # the model's own


# --- extra_args -----------------------------------------------------------------------------------

@pytest.mark.parametrize("extra, message", [
    (["--context-parallel-size", "2"], "sets --context-parallel-size, which the launcher owns"),
    (["--lr=1e-5"], "sets --lr, which the launcher owns"),
    (["--use-tis"], "sets --use-tis, which the launcher owns"),
    (["--custom-rm-path", "my.rm"], "sets --custom-rm-path, which the launcher owns"),
    (["--recompute-granularty", "full"], "--recompute-granularty is not a flag of slime, Megatron-LM or SGLang"),
])
def test_extra_args_owned_or_unknown_are_refused(preset, extra, message):
    preset["engine_params"]["extra_args"] = extra
    directory = GridDir.of(preset).run("grpo", 1, 0).path
    with pytest.raises(ValueError, match=message):
        write_job_script(RunConfig.check(resolve_run_config(preset, "grpo", 1, 0)), RunDir(directory), check_files=False)
    assert not directory.exists()


@pytest.mark.slow  # Snakemake
def test_a_flag_that_changes_the_loss_inputs_is_refused_by_the_dry_run(preset, tmp_path):
    """`snakemake -n` (the config check) refuses it before any job is planned, naming the flag."""
    preset["engine_params"]["extra_args"] = ["--use-rollout-logprobs"]
    configfile = tmp_path / "preset.yaml"
    configfile.write_text(yaml.safe_dump(preset))
    result = snakemake("-n", "--configfile", str(configfile), "-C", f"results_dir={tmp_path / 'results'}", timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "config key 'engine_params': engine_params.extra_args sets --use-rollout-logprobs" in output, output
    assert "Building DAG of jobs" not in output and not (tmp_path / "results").exists()


@pytest.mark.parametrize("flag", [flag for flag, *_ in slime_loss.UNHANDLED_SLIME_OPTIONS])
def test_every_flag_that_changes_the_loss_inputs_is_refused_in_extra_args(preset, flag):
    with pytest.raises(ValueError, match=f"engine_params.extra_args sets {flag}: "):
        params_of(preset, extra_args=[f"{flag}=x" if flag.endswith("-path") else flag])
    flags, prefixes = preflight.known_flags()
    assert flag in flags  # a real flag of slime at the pin, not a typo of one


@pytest.mark.parametrize("flag", sorted(slime_loss.DATA_AND_OPTIMISATION_FLAGS))
def test_every_flag_that_changes_the_data_or_the_optimiser_is_refused_by_name(preset, flag):
    with pytest.raises(ValueError, match=f"engine_params.extra_args sets {flag}: "):
        params_of(preset, extra_args=[f"{flag}=x" if flag.endswith("-path") else flag])
    flags, prefixes = preflight.known_flags()
    assert flag in flags  # a real flag of slime or Megatron at the pin


@pytest.mark.parametrize("flag", sorted(RESUME_BREAKING_FLAGS))
def test_every_flag_that_breaks_a_resume_is_refused_with_its_reason(preset, flag):
    """Both spellings (``--flag value`` and ``--flag=value``), when the config is checked: before any job."""
    for extra in ([flag, "3"], [f"{flag}=3"]):
        with pytest.raises(ValueError, match=f"engine_params.extra_args sets {flag}: .*must resume with an "
                                             "uninterrupted run's state"):
            params_of(preset, extra_args=extra)
    flags, prefixes = preflight.known_flags()
    assert flag in flags  # a real flag of slime or Megatron at the pin


@pytest.mark.parametrize("extra", [["--num-layers", "4"], ["--moe-aux-loss-coeff=0.01"], ["--rotary-base", "5e5"]])
def test_a_flag_the_model_script_sets_is_refused_in_extra_args(preset, extra):
    """slime's model script's MODEL_ARGS come after extra_args on the command line, so these would be
    silently overridden (the flags: engines/slime/models.yaml, checked against the script by check_pin)."""
    preset["engine_params"]["extra_args"] = extra
    directory = GridDir.of(preset).run("grpo", 1, 0).path
    with pytest.raises(ValueError, match=f"sets {extra[0].split('=')[0]}, which slime's model script sets too"):
        write_job_script(RunConfig.check(resolve_run_config(preset, "grpo", 1, 0)), RunDir(directory), check_files=False)
    assert not directory.exists()


def test_a_flag_a_recipe_switches_is_refused_in_extra_args(preset):
    with pytest.raises(ValueError, match="sets --disable-grpo-std-normalization: the recipe switches it "
                                         r"\(std_normalization: false\)"):
        params_of(preset, extra_args=["--disable-grpo-std-normalization"])


def test_known_extra_args_pass_and_every_launcher_flag_is_known(preset):
    preset["engine_params"]["extra_args"] = ["--moe-enable-deepep", "--sglang-enable-metrics", "--log-interval=5"]
    flags, prefixes = preflight.known_flags()
    for recipe, lag_mode in (("grpo", "interval"), ("gspo_tis_r3", "constant")):
        preset["lag_mode"] = lag_mode
        run_config = RunConfig.check(resolve_run_config(preset, recipe, 8, 0))
        params = run_config.engine_params
        emitted = {flag[0] for flag in slime_flags(run_config, RunDir("/r"), extra=False)}
        unknown = sorted(flag for flag in emitted if flag not in flags and not flag.startswith(prefixes))
        assert not unknown  # the known-flag list is not stale for the launcher
        assert "extra_args: 3 argument(s)" in preflight.check_extra_args(params["extra_args"], emitted)


# --- the dry run ----------------------------------------------------------------------------------

@pytest.mark.slow  # the launcher in a process
def test_dry_run_of_the_preset_prints_the_memory_estimate_and_passes(preset, tmp_path):
    run_config = resolve_run_config(preset, "sat_gspo_r3", 8, 0)
    out = subprocess.run([sys.executable, "-m", "engines.slime.launch", "--dry-run", "--no-path-check",
                          "--run-dir", str(tmp_path / "run"), "--config-json", json.dumps(run_config)],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "# pre-flight: memory per training GPU (estimate, 7.63B of 30.53B parameters): 14.2 GiB bf16 weights " \
           "+ 28.4 GiB fp32 gradients + 0.0 GiB Adam states (offloaded to CPU) + 11.3 GiB activations of 32768 " \
           "tokens = 54.0 GiB of gpu_memory_gib 139" in out
    assert "# pre-flight: reward: dapo scores prompt_format dapo" in out
    assert "--rollout-max-context-len 32768" in out and "--num-gpus-per-node 8" in out


# --- complete HF saves, Megatron retention --------------------------------------------------------

def test_an_interrupted_hf_save_is_never_scored(tmp_path):
    run = tmp_path / "run"
    (run / "config.json").parent.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"engine": "slime"}))
    write_hf_save(run / "train" / "checkpoints" / "step_16", shards_written=3)
    write_hf_save(run / "train" / "checkpoints" / "step_32", shards_written=2)  # config.json + 2 of 3 shards
    settings = {"backend": "server", "server": {"url": "http://127.0.0.1:9"},
                "data": {"aime24": str(FIXTURES / "aime_mini.jsonl")}}
    with pytest.raises(ScoreError, match="incomplete checkpoint: .*step_32: neither model.safetensors.index.json"):
        score_run(run, ["aime24_avg8"], settings)
    assert not (run / "eval" / "aime24_avg8.jsonl").exists() or not read_jsonl(run / "eval" / "aime24_avg8.jsonl")


def test_retention_keeps_the_newest_complete_megatron_saves(tmp_path):
    save = tmp_path / "megatron"
    assert retention.prune(save, 2) == []  # nothing saved yet
    for rollout_id in (15, 31, 47, 63):
        write_megatron_save(save, rollout_id)
    (save / "iter_0000079").mkdir()  # being written: the tracker still says 63
    removed = retention.prune(save, 2)
    assert [p.name for p in removed] == ["iter_0000015", "iter_0000031"]
    assert sorted(p.name for p in save.iterdir()) == ["iter_0000047", "iter_0000063", "iter_0000079",
                                                      "latest_checkpointed_iteration.txt"]
    with pytest.raises(ValueError, match="keep must be an integer >= 1"):
        retention.prune(save, 0)


def test_refresh_reads_flags_from_sources(tmp_path):
    """add_argument and slime's reset_arg literals, Megatron's dataclass-made flags (bases, bool -> --no-/
    --disable-, private fields skipped), and SGLang's server args re-exposed as --sglang-*."""
    from engines.slime.refresh_known_flags import known_flags

    (tmp_path / "slime" / "slime").mkdir(parents=True)
    (tmp_path / "slime" / "slime" / "arguments.py").write_text(
        'def add(parser):\n    parser.add_argument("--rollout-x", "-r", type=int)\n'
        '    reset_arg(parser, "--custom-config-path", type=str)\n    help = "--not-a-call"\n')
    training = tmp_path / "megatron" / "megatron" / "training"
    training.mkdir(parents=True)
    (training / "arguments.py").write_text(
        'def add(parser):\n    parser.add_argument("--lr", type=float)\n'
        '    ArgumentGroupFactory(TrainingConfig, exclude=[]).build_group(parser)\n')
    (training / "config.py").write_text(
        "class Base:\n    micro_batch_size: int = 1\n"
        "class TrainingConfig(Base):\n    use_thing: bool = True\n    _private: int = 0\n"
        '    other: int = field(metadata={"argparse_meta": {"arg_names": ["--other-name"]}})\n')
    server_args = tmp_path / "server_args.py"
    server_args.write_text('def add_cli_args(parser):\n    parser.add_argument("--mem-fraction-static", type=float)\n')
    flags, patterns = known_flags(tmp_path / "slime", tmp_path / "megatron", server_args)
    assert flags == {"--rollout-x", "--custom-config-path", "--lr", "--micro-batch-size", "--use-thing",
                     "--no-use-thing", "--disable-use-thing", "--other", "--other-name",
                     "--sglang-mem-fraction-static"}
    assert patterns == {"--router-"}
    assert known_flags(tmp_path / "slime", tmp_path / "megatron", None)[1] == {"--router-", "--sglang-"}


# --- disk and host memory ---------------------------------------------------------------------------

def _r3_job(preset, tmp_path, monkeypatch):
    """A Table-1 R3 job at lag 8, its file system with 10 PB free (df)."""
    monkeypatch.setattr(footprint.shutil, "disk_usage", lambda path: SimpleNamespace(free=10**16))
    run_config = RunConfig.check(resolve_run_config(preset, "grpo_r3", 8, 0))
    emitted = {flag[0] for flag in slime_flags(run_config, RunDir(tmp_path / "run"), extra=False)}
    return run_config, RunDir(tmp_path / "run"), emitted


def test_the_footprint_adds_up_by_hand(preset):
    """Per run: 34 HF saves (2 B a parameter) kept + 2 Megatron saves (14 B) kept and a third being
    written; host memory: CPU Adam 16 B, the actor's and the reference's bf16 backups, and R3's int32
    [tokens, 48 layers, top-8] held 2 x 4 trainer ranks + 1 manager + (8 + 1) rollouts at lag 8."""
    params, parameters = params_of(preset), 30_532_122_624
    disk = footprint.disk(params, 544, 16)
    assert (disk["hf_save"], disk["megatron_save"]) == (2 * parameters, 14 * parameters)
    assert disk["peak"] == 34 * 2 * parameters + 3 * 14 * parameters  # 3.36 TB, the "peak 3.4 TB"
    assert disk["written"] == 34 * 16 * parameters
    memory = footprint.host_memory(params, replay="r3", lag=8, response_tokens=5_000)
    assert memory["optimizer"] == 16 * parameters and memory["backups"] == 2 * 2 * parameters
    assert memory["r3"] == 4096 * 5_000 * 48 * 8 * 4 * (2 * 4 + 1 + 9)
    assert footprint.host_memory(params, replay=None, lag=8, response_tokens=5_000)["r3"] == 0


def test_the_preflight_refuses_a_job_whose_mem_mb_cannot_hold_it_with_the_numbers(preset, tmp_path, monkeypatch):
    run_config, run, emitted = _r3_job(preset, tmp_path, monkeypatch)
    with pytest.raises(ValueError, match=r"resources.train.mem_mb = 900,000 MB cannot hold the host memory per "
                                         r"training job \(estimate\): 1,177 GB at 5,000-token responses: CPU Adam "
                                         r"489 GB \+ weight backups 122 GB \+ R3 routed experts 566 GB \(18 copies\)"):
        preflight.preflight(run_config, run, emitted, check_files=False, on_node=True, mem_mb=900_000)
    lines = preflight.preflight(run_config, run, emitted, check_files=False, on_node=True, mem_mb=1_900_000)
    assert any("within mem_mb 1,900,000 MB" in line for line in lines)


def test_the_preflight_refuses_a_run_its_lustre_quota_cannot_hold_with_the_numbers(preset, tmp_path, monkeypatch):
    """`lfs quota -q -u` (a fake on PATH, Lustre's columns: kbytes used, quota, limit, grace, files,
    ...): 1 TB left under the quota, less than df's free space, against the run's 3.36 TB peak."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "lfs").write_text("#!/bin/sh\necho '/lustre 1000000000 0 1976562500 - 120 0 0 -'\n")
    (bin_dir / "lfs").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    run_config, run, emitted = _r3_job(preset, tmp_path, monkeypatch)
    with pytest.raises(ValueError, match=r"peak 3.36 TB .* 3.36 TB still to come for 1 run\(s\) under way on this "
                                         r"file system against 1.00 TB free \(lfs quota .*\): the file system of .* "
                                         r"cannot hold the runs"):
        preflight.preflight(run_config, run, emitted, check_files=False, on_node=True, mem_mb=1_900_000)
    write_megatron_save(run.engine_file("resume_checkpoints"), 15)  # what the run holds counts as written
    (bin_dir / "lfs").write_text("#!/bin/sh\necho '/lustre 0 0 0 - 0 0 0 -'\n")  # no limit: df's 10 PB
    assert "TB free (df " in preflight.preflight(run_config, run, emitted, check_files=False, on_node=True,
                                                 mem_mb=1_900_000)[-3]


def test_the_preflight_refuses_a_job_whose_ray_spill_its_node_local_temp_dir_cannot_hold(preset, tmp_path, monkeypatch):
    """R3 at lag 8 at the 30,720-token response cap: 4,096 samples x 30,720 tokens x 48 layers x top-8 x
    4 B per rollout, 9 rollouts in Ray's object store, of which 200 GB in memory (Ray's cap; 30% of
    mem_mb is more) and the rest spilled under engine_params.ray_temp_dir, whose free space (df) is checked."""
    run_config, run, emitted = _r3_job(preset, tmp_path, monkeypatch)
    spill = 4096 * 30_720 * 48 * 8 * 4 * 9 - 200e9
    room = {"/tmp/ray": spill - 1}
    monkeypatch.setattr(footprint, "free_bytes", lambda path: (room.get(str(path), 10**16), f"df {path}"))
    with pytest.raises(ValueError, match=r"1,739 GB at 30,720-token responses in a 200 GB store: 1,539 GB spilled to "
                                         r"/tmp/ray; 1.54 TB free there \(df /tmp/ray\): Ray would fill the node's disk"):
        preflight.preflight(run_config, run, emitted, check_files=False, on_node=True, mem_mb=1_900_000)
    room["/tmp/ray"] = spill
    assert "1,539 GB spilled to /tmp/ray; 1.54 TB free there" in preflight.preflight(
        run_config, run, emitted, check_files=False, on_node=True, mem_mb=1_900_000)[-2]
    small = footprint.object_store(params_of(preset), replay="r3", lag=8, response_tokens=5_000, mem_mb=256_000)
    assert small["store"] == 0.3 * 256_000e6  # Ray's 30% of the memory it sees, under the 200 GB cap


def test_the_disk_preflight_counts_the_grids_runs_under_way_not_only_its_own(preset, tmp_path, monkeypatch):
    """Jobs that start together each see the same free space: a run's pre-flight sums the peaks still to
    come of its grid's runs that have started and not finished (a completed one holds its saves already),
    so 10 TB hold this run and one other under way (2 x 3.36 TB) but not a third."""
    monkeypatch.setattr(footprint.shutil, "disk_usage", lambda path: SimpleNamespace(free=10 * 10**12))
    run_config = RunConfig.check(resolve_run_config(preset, "grpo_r3", 8, 0))
    grid = tmp_path / "grid"
    run, *others = (RunDir(grid / "runs" / "grpo_r3" / "lag8" / f"seed{seed}") for seed in range(4))
    for other in others:
        other.train_dir.mkdir(parents=True)
    others[0].write_status(status="completed", step=544, message="completed")
    emitted = {flag[0] for flag in slime_flags(run_config, run, extra=False)}
    with pytest.raises(ValueError, match=r"10.08 TB still to come for 3 run\(s\) under way on this file system "
                                         r"against 10.00 TB free"):
        preflight.preflight(run_config, run, emitted, check_files=False, on_node=True, mem_mb=1_900_000)
    others[1].write_status(status="diverged", step=5, message="non-finite loss")
    assert "6.72 TB still to come for 2 run(s) under way" in preflight.preflight(
        run_config, run, emitted, check_files=False, on_node=True, mem_mb=1_900_000)[-3]
