"""slime's RolloutManager actor and RayTrainGroup as engines.slime.driver.lag_loop sees them, with Ray's
ordering: an actor runs its calls one at a time in submission order (RolloutManager is a plain
``@ray.remote`` class, slime/ray/rollout.py: ``generate`` and ``save`` queue behind each other), and a
generation samples with whatever weights the engine holds when it RUNS (here: lazily, when it or a
later call is waited on). With a ``data_source`` (slime's RolloutDataSource, tests/support/slime_resume.py)
``generate(r)`` takes ``batch_size`` prompts from it, as slime's rollout function does, and ``save(r)``
is slime's ``RolloutManager.save``: ``data_source.save(r)``.

``log`` records every call as it runs or is waited on: ("generate", r), ("data_source_save", r), ("dispose", -1),
("wait_generation", r), ("megatron_save", r), ("hf_save", r), ("train", r), ("push", version).

``TimedCluster`` runs the same calls on a clock, to time a time-limit stop against the warning's lead.
"""
from __future__ import annotations

import math
from argparse import Namespace

from engines.slime.driver import POLL_SECONDS


class FakeRef:
    def __init__(self, run, kind: str, rollout_id: int):
        self.run, self.kind, self.rollout_id, self.done, self.value = run, kind, rollout_id, False, None


class FakeCluster:
    def __init__(self, data_source=None, batch_size: int = 1):
        self.trainer_version = 0     # optimizer steps taken
        self.engine_version = None   # trainer version held by the SGLang engines
        self.pushes = 0              # slime's weight_version counter
        self.queue: list[FakeRef] = []
        self.trained: list[tuple[int, int, int]] = []  # (rollout id, sampling trainer version, its push)
        self.prompts: dict[int, list] = {}              # rollout id -> the prompts it was generated from
        self.push_after: list[int] = []                 # rollouts trained before each push
        self.saved: list[int] = []                      # Megatron saves
        self.log: list[tuple[str, int]] = []
        self.data_source, self.batch_size = data_source, batch_size
        self.generate = Namespace(remote=self._generate)
        self.save = Namespace(remote=self._save)
        self.dispose = Namespace(remote=self._dispose)
        self._actor_handlers = [FakeTrainActor(self)]

    # --- RolloutManager.generate.remote(rollout_id), .save.remote(rollout_id) ---
    def _generate(self, rollout_id):
        def run():
            self.log.append(("generate", rollout_id))
            if self.data_source is not None:
                self.prompts[rollout_id] = [group[0].prompt for group in self.data_source.get_samples(self.batch_size)]
            return {"rollout_id": rollout_id, "version": self.engine_version, "weight_version": self.pushes}
        return self._queued(FakeRef(run, "generation", rollout_id))

    def _save(self, rollout_id):
        def run():
            self.log.append(("data_source_save", rollout_id))
            if self.data_source is not None:
                self.data_source.save(rollout_id)
        return self._queued(FakeRef(run, "data_source_save", rollout_id))

    def _dispose(self):  # RolloutManager.dispose: queued behind the generations in flight
        return self._queued(FakeRef(lambda: self.log.append(("dispose", -1)), "dispose", -1))

    def _queued(self, ref: FakeRef) -> FakeRef:
        self.queue.append(ref)
        return ref

    def get(self, ref):
        if isinstance(ref, list):
            return [self.get(r) for r in ref]
        if ref.kind == "generation" and not ref.done:
            self.log.append(("wait_generation", ref.rollout_id))
        while not ref.done:  # the actor runs its queue in order
            head = self.queue.pop(0) if ref in self.queue else ref
            head.value, head.done = head.run(), True
        return ref.value

    # --- RayTrainGroup ---
    def async_train(self, rollout_id, data):
        assert data["rollout_id"] == rollout_id
        self.log.append(("train", rollout_id))
        self.trained.append((rollout_id, data["version"], data["weight_version"]))
        self.trainer_version += 1
        return [FakeRef(lambda: None, "train", rollout_id)]

    def update_weights(self):
        assert not any(ref.kind == "generation" for ref in self.queue), "weights pushed while a generation is in flight"
        self.engine_version, self.pushes = self.trainer_version, self.pushes + 1
        self.push_after.append(len(self.trained))
        self.log.append(("push", self.engine_version))

    def save_model(self, rollout_id, force_sync=False):
        for actor in self._actor_handlers:
            actor.save_model(rollout_id, force_sync)

    def saving(self, rollout_id: int, hf: bool) -> None:
        self.log += [("megatron_save", rollout_id), *([("hf_save", rollout_id)] if hf else [])]
        self.saved.append(rollout_id)


class FakeTrainActor:
    """One of slime's trainer actors (MegatronTrainRayActor): save_model writes the HF copy too when
    args.save_hf is set (slime/backends/megatron_utils/actor.py); ``__ray_call__`` runs a function
    on the actor, as Ray's does."""

    def __init__(self, cluster: FakeCluster):
        self.cluster, self.args = cluster, Namespace(save_hf="hf/iter_{rollout_id}")
        self.__ray_call__ = Namespace(remote=lambda fn, *a: FakeRef(lambda: fn(self, *a), "call", -1))

    def save_model(self, rollout_id, force_sync=False):
        self.cluster.saving(rollout_id, hf=self.args.save_hf is not None)


class TimedCluster(FakeCluster):
    """FakeCluster on a clock (minutes): the rollout manager runs its calls one at a time (a generation
    takes ``generate``, a data-source save no time), a training call ``train``, a push ``push``, a
    Megatron save ``megatron`` and its HF copy ``hf``; ``ready`` waits up to the driver's POLL_SECONDS
    as ray.wait does. The warning comes at minute ``warning``; ``save_ends`` holds when each save ended."""

    def __init__(self, *, generate: float, train: float, push: float, megatron: float, hf: float,
                 warning: float = math.inf):
        super().__init__()
        self.minutes = {"generate": generate, "train": train, "push": push, "megatron": megatron, "hf": hf}
        self.warning, self.clock, self.manager_free, self.save_ends = warning, 0.0, 0.0, []

    def _queued(self, ref):
        start = max(self.clock, self.manager_free)
        ref.ready_at = self.manager_free = start + (self.minutes["generate"] if ref.kind == "generation" else 0.0)
        return super()._queued(ref)

    def get(self, ref):
        if not isinstance(ref, list):
            self.clock = max(self.clock, getattr(ref, "ready_at", self.clock))
        return super().get(ref)

    def ready(self, ref) -> bool:
        if ref.ready_at <= self.clock + POLL_SECONDS / 60:
            self.clock = max(self.clock, ref.ready_at)
            return True
        self.clock += POLL_SECONDS / 60
        return False

    def stop_requested(self) -> bool:
        return self.clock >= self.warning

    def async_train(self, rollout_id, data):
        refs = super().async_train(rollout_id, data)
        for ref in refs:
            ref.ready_at = self.clock + self.minutes["train"]
        return refs

    def update_weights(self):
        super().update_weights()
        self.clock += self.minutes["push"]

    def saving(self, rollout_id: int, hf: bool) -> None:
        super().saving(rollout_id, hf)
        self.clock += self.minutes["megatron"] + (self.minutes["hf"] if hf else 0.0)
        self.save_ends.append(self.clock)


def periodic(rollout_id, interval, num_rollout_per_epoch=None, num_rollout=None):
    """slime's should_run_periodic_action (the last rollout always; every interval-th)."""
    if interval is None:
        return False
    if num_rollout is not None and rollout_id == num_rollout - 1:
        return True
    return (rollout_id + 1) % interval == 0
