"""Stop-and-resume runs of engines.slime.driver.lag_loop over slime's own data source
(slime/rollout/data_source.py RolloutDataSource and slime/utils/data.py Dataset at the pin, from
../shared/upstream): the prompts each trained rollout was generated from, for an uninterrupted run
and for runs stopped at the time-limit warning, or killed, and resumed as slime resumes them.

``prompt_sequences(spec)`` runs ``python -m tests.support.slime_resume`` with the upstream slime tree
first on sys.path (the in-process tests hold a stand-in under the name ``slime``).

A resume is slime's: the new job's RolloutManager builds a fresh data source and loads the state
saved at start_rollout_id - 1 (slime/ray/placement_group.py: ``rollout_manager.load.remote(
args.start_rollout_id - 1)``), start_rollout_id being the last Megatron save + 1
(slime/backends/megatron_utils/actor.py). The prompt rows are read by slime's Dataset without a
tokenizer (no chat template, no length filter: --rollout-max-prompt-len unset), so three modules the
data source imports are replaced by modules whose functions raise or return nothing:
``slime.utils.processing_utils`` (transformers: load_tokenizer / load_processor, here returning
None), ``ray`` (slime/utils/data.py uses it only to fetch training data) and ``httpx``
(slime/utils/http_utils.py's client); transformers, ray and httpx are not installed here.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from argparse import Namespace
from pathlib import Path

from tests.support.slime_upstream import REPO, upstream_dir


def prompt_sequences(specs: list[dict]) -> list[dict]:
    """Each spec: prompts (path), batch_size, steps, mode, lag, seed, save_interval, stop_after (a trained count
    after which the warning comes), killed (bool: the job dies before its stop save, resumed from the last
    periodic save), dir. For each: {"uninterrupted": [...], "resumed": [...], "stopped_at": r, "resumed_from": s}."""
    root = upstream_dir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "slime"), str(REPO)])}
    result = subprocess.run([sys.executable, "-m", "tests.support.slime_resume", json.dumps(specs)], cwd=REPO,
                            env=env, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"slime's data source failed:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.splitlines()[-1])


def _install_unavailable_modules() -> None:
    def unavailable(*_args, **_kwargs):
        raise RuntimeError("not installed here; the data source's code paths under test never call it")

    processing = types.ModuleType("slime.utils.processing_utils")
    processing.load_tokenizer = processing.load_processor = lambda *_args, **_kwargs: None
    httpx = types.ModuleType("httpx")
    httpx.AsyncClient = type("AsyncClient", (), {"__init__": unavailable})
    ray = types.ModuleType("ray")
    ray.get = unavailable
    sys.modules.update({"slime.utils.processing_utils": processing, "httpx": httpx, "ray": ray})


def _data_source(spec: dict, save_dir: Path):
    from slime.rollout.data_source import RolloutDataSource

    args = Namespace(rollout_global_dataset=True, prompt_data=spec["prompts"], hf_checkpoint=None, dump_details=None,
                     rollout_max_prompt_len=None, input_key="prompt", multimodal_keys=None, label_key="label",
                     metadata_key="metadata", tool_key=None, apply_chat_template=False,
                     apply_chat_template_kwargs=None, rollout_seed=spec["seed"], rollout_shuffle=True,
                     n_samples_per_prompt=1, save=str(save_dir), load=str(save_dir))
    return RolloutDataSource(args)


def _job(spec: dict, save_dir: Path, start: int, stop_after: int | None):
    """One job from ``start``: slime's data source loaded at start - 1, the driver over the fake actors."""
    from engines.slime.driver import lag_loop
    from tests.support.slime_cluster import FakeCluster, periodic

    data_source = _data_source(spec, save_dir)
    if start > 0:
        data_source.load(start - 1)
    cluster = FakeCluster(data_source, spec["batch_size"])
    cluster.trainer_version = start
    args = Namespace(start_rollout_id=start, num_rollout=spec["steps"], save_interval=spec["save_interval"],
                     rollout_global_dataset=True)
    stopped = lag_loop(args, cluster, cluster, mode=spec["mode"], lag=spec["lag"], seed=spec["seed"],
                       num_rollout_per_epoch=None, get=cluster.get, periodic=periodic,
                       stop_requested=lambda: stop_after is not None and len(cluster.trained) >= stop_after)
    return cluster, stopped


def _stop_and_resume(spec: dict) -> dict:
    base = Path(spec["dir"])
    whole, _ = _job(spec, base / "uninterrupted", 0, None)
    first, stopped = _job(spec, base / "stopped", 0, spec["stop_after"])
    # a job killed before its stop save resumes from its last periodic Megatron save
    megatron_save = first.saved[-1] if not spec["killed"] else max(s for s in first.saved if s != stopped)
    second, _ = _job(spec, base / "stopped", megatron_save + 1, None)
    trained = [r for r, *_ in first.trained if r <= megatron_save] + [r for r, *_ in second.trained]
    prompts = {**{r: p for r, p in first.prompts.items() if r <= megatron_save}, **second.prompts}
    return {"uninterrupted": [whole.prompts[r] for r, *_ in whole.trained], "resumed": [prompts[r] for r in trained],
            "stopped_at": stopped, "resumed_from": megatron_save + 1}


def main() -> None:
    _install_unavailable_modules()
    print(json.dumps([_stop_and_resume(spec) for spec in json.loads(sys.argv[1])]))


if __name__ == "__main__":
    main()
