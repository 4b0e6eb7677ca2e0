"""The cluster path against a fake OpenAI-compatible SGLang server on 127.0.0.1."""
from __future__ import annotations

import json
import sys
import threading
from collections import defaultdict
from pathlib import Path

import pytest

import eval.server
from eval.score import ScoreError, main, score_run
from eval.server import ServerError, launch_command, sample_seed
from grid.config import load
from harness.io import read_jsonl
from tests.support.fake_sglang import GOLD, PORT_TAKEN, FakeSGLang
from tests.support.paths import FIXTURES, ROOT, SUPPORT
from tests.support.ports import free_ports, refused_url
from tests.support.slime_checkpoints import write_hf_save

FIXTURE = FIXTURES / "aime_mini.jsonl"
FAKE = SUPPORT / "fake_sglang.py"


@pytest.fixture
def fake_server():
    server = FakeSGLang()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def make_run(root: Path) -> Path:
    for step in (1, 2):  # complete HF saves as slime writes them (the fake server ignores weights)
        write_hf_save(root / "train" / "checkpoints" / f"step_{step}", shards_written=2, total_shards=2)
    return root


def settings(url: str, **server) -> dict:
    return {"k": 8, "seed": 5, "temperature": 0.6, "top_p": 0.95, "max_gen_toks": 64, "backend": "server",
            "server": {"url": url, "model": "policy", "max_retries": 2, **server},
            "data": {"aime24": str(FIXTURE)}}


@pytest.mark.parametrize("concurrency", [1, 3])
def test_k_distinct_seeds_per_problem_and_right_scores(tmp_path, fake_server, concurrency):
    run = make_run(tmp_path / "run")
    rows = score_run(run, ["aime24_avg8"], settings(fake_server.url, concurrency=concurrency))
    by_step = defaultdict(lambda: defaultdict(list))
    for checkpoint, problem, payload in fake_server.log:
        by_step[checkpoint][problem].append(payload)
        assert (payload["temperature"], payload["top_p"], payload["max_tokens"], payload["model"]) == \
            (0.6, 0.95, 64, "policy")
    assert set(by_step) == {"step_1", "step_2"}
    problems = list(GOLD)
    for step, row in zip(("step_1", "step_2"), rows, strict=True):
        seeds = {p: [q["seed"] for q in by_step[step][p]] for p in problems}
        assert all(len(s) == 8 and len(set(s)) == 8 for s in seeds.values())  # k requests, k seeds
        assert {frozenset(s) for s in seeds.values()} == {
            frozenset(sample_seed(5, d, r) for r in range(8)) for d in range(len(problems))}
        expected = [0] * 3 if step == "step_1" else [sum(s % 2 == 0 for s in seeds[p]) for p in problems]
        assert row["per_problem"] == expected
        assert row["score"] == pytest.approx(sum(expected) / 24, abs=1e-12)
        assert row["pass_at_k"] == pytest.approx(sum(c > 0 for c in expected) / 3, abs=1e-12)
    assert sum(rows[1]["per_problem"]) > 0  # seeds are spread: some even, some odd
    assert read_jsonl(run / "eval" / "aime24_avg8.jsonl") == rows
    # Seeds are a function of the config seed: the same settings send the same seeds again.
    first = [p["seed"] for _, _, p in fake_server.log]
    fake_server.log.clear()
    score_run(make_run(tmp_path / "again"), ["aime24_avg8"], settings(fake_server.url, concurrency=concurrency))
    assert sorted(p["seed"] for _, _, p in fake_server.log) == sorted(first)


@pytest.mark.parametrize("concurrency", [8, 24])
def test_concurrency_requests_are_in_flight_at_once_with_a_seed_each(tmp_path, fake_server, concurrency):
    """Against a server that takes 0.2 s per request: with a seed per sample (every request its own
    generation settings) at least 0.9 x concurrency requests are in flight at once, and the 3 x 8
    requests of a checkpoint take about 24 / concurrency latencies, not 24."""
    fake_server.latency = 0.2
    run = make_run(tmp_path / "run")
    score_run(run, ["aime24_avg8"], settings(fake_server.url, concurrency=concurrency, swap_weights=False))
    assert fake_server.max_in_flight >= 0.9 * concurrency
    seeds = [payload["seed"] for _, _, payload in fake_server.log]
    assert len(seeds) == 2 * 24 and len(set(seeds)) == 24  # per-sample seeds kept (the same 24 per checkpoint)


def test_one_weight_swap_per_checkpoint_scores_every_task(tmp_path, fake_server):
    alone = score_run(make_run(tmp_path / "alone"), ["aime24_avg8"], settings(fake_server.url))
    fake_server.swaps.clear()
    fake_server.log.clear()
    both = {**settings(fake_server.url), "problems": {"tiny_val": 2}}
    rows = score_run(make_run(tmp_path / "run"), ["aime24_avg8", "tiny_val"], both)
    assert fake_server.swaps == ["step_1", "step_2"]  # not one per task
    assert [(r["step"], r["task"]) for r in rows] == [(1, "aime24_avg8"), (1, "tiny_val"), (2, "aime24_avg8"),
                                                      (2, "tiny_val")]
    # Each checkpoint's samples of both tasks (3 + 2 problems x k = 8) were drawn while it was loaded.
    assert [checkpoint for checkpoint, _, _ in fake_server.log] == ["step_1"] * 40 + ["step_2"] * 40
    assert [r for r in rows if r["task"] == "aime24_avg8"] == alone  # as if scored alone


def test_a_failing_weight_swap_names_the_checkpoint_and_writes_no_line(tmp_path, fake_server):
    run = make_run(tmp_path / "run")
    fake_server.refused.add("step_1")
    with pytest.raises(ServerError, match=r"refused to load .*step_1: HTTP 400 .*Failed to load weights"):
        score_run(run, ["aime24_avg8"], settings(fake_server.url))
    assert fake_server.log == [] and not (run / "eval").exists()


def test_launch_command_from_config():
    server = {"url": "http://10.0.0.7:30000/v1", "model": "policy", "tp": 2, "mem_fraction": 0.8,
              "random_seed": 1, "extra_args": ["--context-length", 32768]}
    assert launch_command(server, "/ckpt/step_100") == [
        "python3", "-m", "sglang.launch_server", "--model-path", "/ckpt/step_100",
        "--served-model-name", "policy", "--host", "10.0.0.7", "--port", "30000", "--tp-size", "2",
        "--mem-fraction-static", "0.8", "--random-seed", "1", "--enable-deterministic-inference",
        "--context-length", "32768"]
    assert "--enable-deterministic-inference" not in launch_command({**server, "deterministic": False}, "/ckpt")
    with pytest.raises(ValueError, match="eval.server.url"):
        launch_command({"url": "10.0.0.7:30000"}, "/ckpt")
    with pytest.raises(ValueError, match="eval.server.deterministic must be true or false"):
        launch_command({**server, "deterministic": "yes"}, "/ckpt")
    in_container = launch_command({**server, "command_prefix": ["apptainer", "exec", "--nv", "img.sif"]}, "/ckpt")
    assert in_container[:5] == ["apptainer", "exec", "--nv", "img.sif", "python3"]


@pytest.mark.parametrize("deterministic", [True, False])
def test_a_rescore_repeats_its_scores_only_with_deterministic_inference(tmp_path, deterministic):
    server = FakeSGLang(deterministic=deterministic)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        config = settings(server.url, deterministic=deterministic)
        first = score_run(make_run(tmp_path / "first"), ["aime24_avg8"], config)
        again = score_run(make_run(tmp_path / "again"), ["aime24_avg8"], config)  # the same server, later
    finally:
        server.shutdown()
        server.server_close()
    assert ([r["per_problem"] for r in first] == [r["per_problem"] for r in again]) is deterministic
    assert [r["eval_key"] for r in first] == [r["eval_key"] for r in again]


def test_the_eval_key_holds_whether_the_server_is_deterministic(tmp_path, fake_server):
    def key(name, **server):
        return score_run(make_run(tmp_path / name), ["aime24_avg8"], settings(fake_server.url, **server))[0]["eval_key"]
    assert key("default") == key("on", deterministic=True) != key("off", deterministic=False)
    with pytest.raises(ScoreError, match="eval.server.deterministic must be true or false"):
        key("bad", deterministic="yes")


@pytest.fixture
def closed_url():
    """A URL where nothing listens, nor can start to while the test runs."""
    with refused_url() as url:
        yield url


@pytest.mark.parametrize("swap_weights", [True, False])
def test_unreachable_server_retries_then_names_the_url(tmp_path, swap_weights, closed_url):
    url = closed_url
    run = make_run(tmp_path / "run")
    with pytest.raises(ServerError, match=f"unreachable (or failing )?at {url}/.* after 2 attempts"):
        score_run(run, ["aime24_avg8"], settings(url, swap_weights=swap_weights))
    assert not (run / "eval").exists()


def test_cli_reports_unreachable_server_in_one_line(tmp_path, capsys, closed_url):
    url = closed_url
    run = make_run(tmp_path / "run")
    code = main(["--run-dir", str(run), "--tasks", "aime24_avg8",
                 "--settings-json", json.dumps(settings(url, max_retries=1))])
    assert code == 2 and f"unreachable at {url}" in capsys.readouterr().err
    assert not (run / "eval").exists()


def test_launched_server_scores_every_checkpoint(tmp_path, monkeypatch):
    """eval.server.launch: the scorer starts the server from the generated command, waits for
    /health, swaps in each checkpoint, and stops the server. Only the program is replaced by the
    fake; the generated SGLang flags are passed to it unchanged."""
    generated = launch_command

    def fake_program(server, checkpoint):
        return [sys.executable, str(FAKE)] + generated(server, checkpoint)[3:]

    monkeypatch.setattr(eval.server, "launch_command", fake_program)
    for attempt in range(1, 4):  # a new port where another process took the picked one before the server
        url = f"http://127.0.0.1:{free_ports(1)[0]}"
        try:
            rows = score_run(make_run(tmp_path / f"run{attempt}"), ["aime24_avg8"],
                             settings(url, launch=True, ready_timeout=60))
            break
        except ServerError as error:
            if attempt == 3 or f"exited with code {PORT_TAKEN} " not in str(error):
                raise
    # the fake follows the seeds only when launched with --enable-deterministic-inference, as SGLang
    even = [sum(sample_seed(5, d, r) % 2 == 0 for r in range(8)) for d in range(len(GOLD))]
    assert [r["per_problem"] for r in rows] == [[0, 0, 0], even]
    with pytest.raises(ServerError, match="unreachable"):  # the server was stopped
        eval.server.load_checkpoint({"url": url}, "x", attempts=1, timeout=2)


def test_launched_server_that_dies_is_reported(tmp_path, monkeypatch, closed_url):
    monkeypatch.setattr(eval.server, "launch_command", lambda server, ckpt: [sys.executable, "-c", "exit(3)"])
    run = make_run(tmp_path / "run")
    with pytest.raises(ServerError, match="exited with code 3 before it was ready"):
        score_run(run, ["aime24_avg8"], settings(closed_url, launch=True))
    assert not (run / "eval").exists()


def test_a_server_image_no_node_can_start_is_refused_before_the_server_starts(tmp_path, monkeypatch, closed_url):
    """eval.server.command_prefix is checked as engine_params.container is (harness.images): the Table-1
    preset's placeholder registry (localhost: each node itself) and a .sif that is not there are refused
    by name before anything starts; a registry the nodes reach and a .sif that exists pass."""
    started = []
    monkeypatch.setattr(eval.server, "launch_command", lambda server, ckpt: started.append(ckpt) or ["false"])
    preset = load(ROOT / "workflow" / "presets" / "table1.yaml")["eval"]["server"]["command_prefix"]
    run = make_run(tmp_path / "run")
    for prefix, error, message in (
            (preset, ValueError, "eval.server.command_prefix 'docker://localhost:5000/.*' names a registry on "
                                 "localhost, which is each node itself"),
            (["apptainer", "exec", str(tmp_path / "gone.sif")], FileNotFoundError,
             "eval.server.command_prefix: .*gone.sif does not exist")):
        with pytest.raises(error, match=message):
            score_run(run, ["aime24_avg8"], settings(closed_url, launch=True, command_prefix=prefix))
    assert started == [] and not (run / "eval").exists()
    (tmp_path / "slime.sif").write_bytes(b"SIF")
    for prefix in (["apptainer", "exec", "docker://registry.example.org/stalebench/slime:624b824a-cu129"],
                   ["apptainer", "exec", str(tmp_path / "slime.sif")]):
        with pytest.raises(ServerError, match="exited with code 1 before it was ready"):  # it got to start
            score_run(run, ["aime24_avg8"], settings(closed_url, launch=True, command_prefix=prefix))
    assert len(started) == 2
