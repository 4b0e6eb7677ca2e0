"""slime's RolloutManager actor and RayTrainGroup as engines.slime.driver.lag_loop sees them, with Ray's
ordering: an actor runs its calls one at a time in submission order (RolloutManager is a plain
``@ray.remote`` class, slime/ray/rollout.py: ``generate`` and ``save`` queue behind each other), and a
generation samples with whatever weights the engine holds when it RUNS (here: lazily, when it or a
later call is waited on). With a ``data_source`` (slime's RolloutDataSource, tests/support/slime_resume.py)
``generate(r)`` takes ``batch_size`` prompts from it, as slime's rollout function does, and ``save(r)``
is slime's ``RolloutManager.save``: ``data_source.save(r)``.

``log`` records every call as it runs or is waited on: ("generate", r), ("data_source_save", r),
("wait_generation", r), ("megatron_save", r), ("train", r), ("push", version).
"""
from __future__ import annotations

from argparse import Namespace


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
        self.log.append(("megatron_save", rollout_id))
        self.saved.append(rollout_id)


def periodic(rollout_id, interval, num_rollout_per_epoch=None, num_rollout=None):
    """slime's should_run_periodic_action (the last rollout always; every interval-th)."""
    if interval is None:
        return False
    if num_rollout is not None and rollout_id == num_rollout - 1:
        return True
    return (rollout_id + 1) % interval == 0
