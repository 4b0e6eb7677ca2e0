"""A canary job on the slime stand-in: what the fake `ray job submit` (tests/support/fake_ray.py) runs for
a custom config with stalebench_canary. The harness's own driver (engines.slime.driver: lag_loop, then
finish) over a fake slime whose calls write what slime and the hooks write: each generation logs its
rollout with the SGLang weight version of the last push (engines.slime.metrics.log_rollout), the first
training call runs the loss hook's fingerprint check (engines.slime.loss.recipe_of), each training call
appends its metrics row, and each save writes a Megatron save and, with slime's HF copy on, an HF save.
A job starts after the latest whole Megatron save, as slime does.

``FAKE_RAY_CANARY_FAULT`` plants one fault where the canary must catch it: ``push`` (no push after the
first post-training one reaches SGLang), ``lag`` (the rollouts log a newer weight version than sampled
them), ``save`` (the HF save of the walk's last step is cut short), ``stop`` (the walk ends without its
stopped mark), ``resume`` (the resumed job ignores the save and starts from rollout 0)."""
from __future__ import annotations

import json
import os
from argparse import Namespace
from pathlib import Path

from engines.slime.driver import finish, lag_loop
from engines.slime.loss import recipe_of
from engines.slime.metrics import log_rollout, run_of
from tests.support.slime_checkpoints import write_hf_save, write_megatron_save
from tests.support.slime_cluster import FakeCluster, periodic


class FileCluster(FakeCluster):
    """FakeCluster whose calls write a slime job's files (the module docstring)."""

    def __init__(self, args: Namespace, fault: str | None, start: int):
        super().__init__()
        self.args, self.fault, self.first_push_after_training = args, fault, None
        self.trainer_version = start

    def _generate(self, rollout_id):
        ref = super()._generate(rollout_id)
        sample = ref.run

        def run():
            value = sample()
            shown = value["weight_version"] + (1 if self.fault == "lag" else 0)
            log_rollout(rollout_id, self.args, [Namespace(weight_versions=[str(shown)])], {}, 0.0)
            return value
        ref.run = run
        return ref

    def update_weights(self):
        if self.fault == "push" and self.pushes >= 2:
            return  # the weights never reach SGLang
        super().update_weights()

    def async_train(self, rollout_id, data):
        if not self.trained:
            recipe_of(self.args)  # the loss hook: the trainer's fingerprint, checked against the node's
        refs = super().async_train(rollout_id, data)
        run_of(self.args).append_metrics([{"step": rollout_id + 1, "loss": -0.1, "grad_norm": 1.0}])
        return refs

    def saving(self, rollout_id: int, hf: bool) -> None:
        super().saving(rollout_id, hf)
        write_megatron_save(self.args.save, rollout_id)
        if hf:
            cut = self.fault == "save" and not self.args.start_rollout_id
            write_hf_save(self.args.save_hf.format(rollout_id=rollout_id), shards_written=1 if cut else 3)


def start_after_latest_save(save_dir: str) -> int:
    latest = Path(save_dir) / "latest_checkpointed_iteration.txt"
    return int(latest.read_text()) + 1 if latest.is_file() else 0


def run(flag, custom: dict) -> int:
    """The canary job of the job script's flags (``flag(name)``: a flag's value) and custom config."""
    fault = os.environ.get("FAKE_RAY_CANARY_FAULT")
    start = start_after_latest_save(flag("--save"))
    if fault == "resume":
        start = 0
    args = Namespace(**custom, save=flag("--save"), save_hf=flag("--save-hf"), start_rollout_id=start,
                     num_rollout=int(flag("--num-rollout")), save_interval=int(flag("--save-interval")),
                     rollout_global_dataset=False)
    cluster = FileCluster(args, fault, start)
    cluster._actor_handlers[0].args.save_hf = args.save_hf
    stopped = lag_loop(args, cluster, cluster, mode=custom["stalebench_lag_mode"], lag=custom["stalebench_lag"],
                       seed=custom["stalebench_seed"], num_rollout_per_epoch=None, get=cluster.get, periodic=periodic,
                       canary=True)
    if fault == "stop":
        return 0
    finish(stopped, run_of(args), cluster, cluster.get, fp16=False)
    print(json.dumps({"canary_job": {"start": start, "stopped": stopped}}))
    return 0
