"""The tiny engine's RL loop: lagged bf16 rollouts, an fp32 trainer, resumable bit for bit.

One trainer step s (1-based), as in an asynchronous system with one batch in flight:
  1. the rollout engine generates the batch of step s + 1 with the weights of the version that
     harness.lag.sampling_version names (where that is version s, lag 0 or a bounded draw of 0, it is
     generated after step 2, as in a synchronous loop),
  2. the trainer checks the batch's realized lag against its mode's bound (harness.lag.check_realized_lag),
     recomputes old_logp on the batch of step s (float32, replaying the engine's routing under R3, or the
     trainer's own recompute routing in the update under R2), builds group-normalised advantages (GRPO,
     Shao et al. 2024; Dr.GRPO's without the std division under std_normalization: false), calls the recipe's
     stabilizer on ``minibatches`` PolicyBatches and steps Adam after each; optional KL to the base model
     with the k3 estimator (Schulman 2020): k3 = exp(ref - logp) - (ref - logp) - 1,
  3. appends one metrics row (keys in docs/design.md), and every ``eval_every`` steps writes
     the resume state and then the checkpoint (Trainer.save: why in this order).

Every random draw comes from a generator seeded by (seed, step), so the state to resume is just tensors:
trainer weights, Adam moments, the weight snapshots the engine may still be broadcast, and the batch in
flight; the engine's weights are the bf16 cast of its version's snapshot, re-broadcast on resume (same bits).
A run killed at any point ends with an uninterrupted run's training metrics but for each row's ``time``.
"""
from __future__ import annotations

import json
import sys
import time

import torch

from harness.engine import TimeLimitReached, TrainingDiverged, time_limit_near
from harness.lag import check_realized_lag, newest_sampling_version, oldest_needed_version, sampling_version
from harness.queue_lag import queue_model
from harness.run import RunDir
from harness.run_config import RunConfig
from stabilizers import PolicyBatch, ess_lr_scale, loss_needs, offpolicy_diagnostics, validate_batch

from . import task
from .adam import Adam  # torch.optim.Adam's updates without its torch._dynamo import (adam.py)
from .batch import Recomputed, all_finite, as_floats, clip_grad_norm, group_advantages, step_metrics, step_seed
from .checkpoint import (
    RESUME_META,
    RESUME_TENSORS,
    load_model,
    load_state,
    load_state_tensors,
    recover_replaced_dirs,
    save_checkpoint,
    state_tensors,
    write_resume_state,
)
from .model import use_grouped_experts
from .params import arithmetic_version
from .prefix import forward_rows
from .queue_rollout import generate_queued, group_record
from .rollout import Rollout, RolloutEngine
from .samples import keep_samples, sample_rows


class Trainer:
    def __init__(self, run_config: RunConfig, run: RunDir, progress=sys.stderr, canary_stop: int | None = None):
        """``run_config``: checked by RunConfig.check, which ran the engine's check_run (the base model);
        ``canary_stop``: the step after which the canary's job stops (engines.tiny.canary)."""
        self.recipe, self.params = run_config.recipe, run_config.engine_params
        self.needs = loss_needs(self.recipe.loss)  # what the loss reads of the sampler's distribution
        self.run_key = run_config.run_key
        self.lag, self.mode, self.seed = run_config.lag, run_config.lag_mode, run_config.seed
        self.steps, self.eval_every = run_config.steps, run_config.eval_every
        self.queue = queue_model(run_config.raw["lag_queue"], self.params["prompts_per_step"], self.lag) \
            if self.mode == "queue" else None
        self.run_dir = run
        self.resume_dir = run.train_dir / "resume"
        self.progress = progress
        self.seconds = {"generate": 0.0, "train": 0.0}

        base_dir, self.arithmetic = run_config.base_model, arithmetic_version(self.params)  # params.py
        self.base = load_model(base_dir).eval()
        for p in self.base.parameters():
            p.requires_grad_(False)
        self.model = load_model(base_dir)
        if self.arithmetic >= 3:  # the MoE's grouped matmuls (model.use_grouped_experts)
            use_grouped_experts(self.base), use_grouped_experts(self.model)
        self.parameters = list(self.model.parameters())
        self.optimizer = Adam(self.model.parameters(), lr=self.params["lr"], betas=tuple(self.params["adam_betas"]))
        self.engine = RolloutEngine(self.model.config, self.params["rollout_dtype"], self.params["temperature"],
                                    self.arithmetic)
        self.snapshots: dict[int, dict[str, torch.Tensor]] = {0: self.state_copy()}
        self.step, self.canary_stop = 0, canary_stop
        self.in_flight: Rollout | None = None

    # ---------------------------------------------------------------- rollout side
    def state_copy(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def generate(self, step: int) -> Rollout:
        """The batch of ``step``, sampled by the engine after any broadcast the schedule calls for."""
        if self.queue is not None and self.lag > 0:  # a version per group (engines/tiny/queue_rollout.py)
            return generate_queued(self, step)
        version = sampling_version(step, self.lag, self.mode, self.seed)
        if self.engine.version != version:
            self.engine.broadcast(self.snapshots[version], version)
        problems = task.problems("train", self.params["prompts_per_step"], seed=step_seed(self.seed, step, 0))
        return self.engine.rollout(step, problems, self.params["samples_per_step"], self.params["reward"],
                                   seed=step_seed(self.seed, step, 1), sampler_pass=self.sampler_pass(step))

    def sampler_pass(self, step: int) -> bool:
        """Whether the batch of ``step`` gets the float32 pass of d/lag_mean_abs, d/impl_mean_abs (arithmetic >= 2:
        checkpoint steps)."""
        return self.arithmetic == 1 or step % self.eval_every == 0 or step == self.steps

    # ---------------------------------------------------------------- trainer side
    def train_on(self, batch: Rollout) -> dict:
        """One trainer step on ``batch``: recompute, update, diagnostics; returns the metrics row."""
        recomputed = self.recompute(batch)
        update = self.update(batch, recomputed)
        if batch.step % self.eval_every == 0 or batch.step == self.steps:  # an evaluation step: a few completions
            keep_samples(self.run_dir, sample_rows(batch, recomputed.old_logp, recomputed.logmu,
                                                   self.params["samples_per_step"]))
        return step_metrics(batch, recomputed, update)

    def minibatches(self, rows: int) -> list[slice]:
        """The update's minibatches of a batch of ``rows`` rows: views, not copies (minibatches divides
        the rows, params.py)."""
        size = rows // self.params["minibatches"]
        return [slice(start, start + size) for start in range(0, rows, size)]

    def forward(self, model, inputs: torch.Tensor, rows: slice, replay: torch.Tensor | None, plen: int):
        """``model``'s forward on the batch's ``rows`` (prefix.forward_rows: from arithmetic 3, prompts once per group)."""
        return forward_rows(model, inputs, rows, replay, plen, self.params["samples_per_step"] if self.arithmetic >= 3 else 1)

    def recompute(self, batch: Rollout) -> Recomputed:
        """The trainer's view of the batch before any update: old_logp with the current weights
        (replaying the engine's routing under R3; under R2 the update replays the routing this
        recompute chose), and the base model's for the KL term (with the update's routing). The
        first minibatch's forward keeps its graph: the update's first forward would be the same
        one (these weights, these rows, this routing), so the update takes it instead of
        repeating it. Per minibatch, the rows' values are those of one forward over the whole batch on the
        kernels tested (tests/engines/tiny/test_tiny_fewer_ops.py, benchmarks/same_bits.py)."""
        temperature = self.params["temperature"]
        plen = batch.tokens.shape[1] - batch.mask.shape[1]
        inputs, response = batch.tokens[:, :-1], batch.tokens[:, plen:]
        replay_mode = self.recipe.replay
        first, *rest = self.minibatches(inputs.shape[0])
        engine_routing = batch.routing if replay_mode == "r3" else None
        head = self.forward(self.model, inputs, first, engine_routing, plen)
        with torch.no_grad():
            outs = [head] + [self.forward(self.model, inputs, idx, engine_routing, plen) for idx in rest]
            logits = torch.cat([o.logits.detach() for o in outs])
            routing, own_routing = torch.cat([o.routing for o in outs]), torch.cat([o.own_routing for o in outs])
            replay = {"r3": batch.routing, "r2": routing, None: None}[replay_mode]
            logp_full = (logits[:, plen - 1:] / temperature).log_softmax(-1)
            old_logp = logp_full.gather(-1, response[..., None])[..., 0]
            ref_logp = None
            if self.params["kl_coef"] > 0:
                ref = self.forward(self.base, inputs, slice(0, inputs.shape[0]), replay, plen)
                ref_logits = ref.logits[:, plen - 1:] / temperature
                ref_logp = ref_logits.log_softmax(-1).gather(-1, response[..., None])[..., 0]
        if not torch.isfinite(old_logp).all():
            raise TrainingDiverged("non-finite log-probabilities")
        return Recomputed(plen=plen, inputs=inputs, response=response, replay=replay,
                          logmu=batch.logmu_full.gather(-1, response[..., None])[..., 0],
                          logp_full=logp_full, old_logp=old_logp, ref_logp=ref_logp, routing=routing,
                          own_routing=own_routing, first_logits=head.logits)

    def update(self, batch: Rollout, recomputed: Recomputed) -> dict[str, list[float]]:
        """The recipe's stabilizer on ``minibatches`` PolicyBatches, an Adam step after each (with
        the k3 KL to the base model, VCPO's ESS-scaled lr); returns each minibatch's numbers."""
        temperature, plen, mask = self.params["temperature"], recomputed.plen, batch.mask
        inputs, response, replay = recomputed.inputs, recomputed.response, recomputed.replay
        old_logp, ref_logp, logmu = recomputed.old_logp, recomputed.ref_logp, recomputed.logmu
        advantages = group_advantages(batch.rewards, self.params["samples_per_step"],
                                      std_normalization=self.recipe.std_normalization)[:, None].expand_as(old_logp).contiguous()
        rows = self.minibatches(inputs.shape[0])
        # 0-d tensors until the end: read in one transfer (as_floats), not one sync per value
        numbers: dict[str, list] = {"loss": [], "grad_norm": [], "kl/k3": [], "vcpo/lr_scale": []}
        stab: dict[str, list] = {}
        for index, idx in enumerate(rows):
            logits = recomputed.first_logits if index == 0 else \
                self.forward(self.model, inputs, idx, replay, plen).logits
            logp_full = (logits[:, plen - 1:] / temperature).log_softmax(-1)
            logp = logp_full.gather(-1, response[idx][..., None])[..., 0]
            if not torch.isfinite(logp.detach()).all():
                raise TrainingDiverged("non-finite log-probabilities")
            policy_batch = PolicyBatch(logp=logp, old_logp=old_logp[idx], rollout_logp=logmu[idx],
                                       advantages=advantages[idx], mask=mask[idx],
                                       sampler=batch.sampler(self.needs, idx, logp_full))
            validate_batch(policy_batch)  # the engine's boundary: the loss itself checks nothing
            result = self.recipe.compute_loss(policy_batch, step_seed=step_seed(self.seed, self.step + 1, 2 + index))
            loss = result.loss
            if ref_logp is not None:
                delta = ref_logp[idx] - logp
                k3 = ((delta.exp() - delta - 1) * mask[idx]).sum() / mask[idx].sum().clamp(min=1)
                loss = loss + self.params["kl_coef"] * k3
                numbers["kl/k3"].append(k3.detach())
            if not torch.isfinite(loss):
                raise TrainingDiverged("non-finite loss")
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            numbers["grad_norm"].append(clip_grad_norm(self.parameters, self.params["max_grad_norm"]))
            if self.params["vcpo_ess_lr"]:  # VCPO: this step's lr scaled by its minibatch's ESS
                ess = offpolicy_diagnostics(old_logp[idx], logmu[idx], mask[idx])["offpolicy/ess"]
                numbers["vcpo/lr_scale"].append(ess_lr_scale(ess))
                for group in self.optimizer.param_groups:  # the one value needed at once
                    group["lr"] = self.params["lr"] * float(numbers["vcpo/lr_scale"][-1])
            self.optimizer.step()
            numbers["loss"].append(loss.detach())
            for key, value in result.metrics.items():
                stab.setdefault(key, []).append(value)
        if not all_finite(self.parameters):
            raise TrainingDiverged("non-finite weights")
        return {"numbers": as_floats(numbers), "stabilizer": as_floats(stab)}

    # ---------------------------------------------------------------- persistence
    def save(self, pending_rows: list[dict], checkpoint: bool = True) -> None:
        """Metrics rows, then the resume state, then the checkpoint (each atomic). The resume state is
        the commit point of a save: it records whether its step has a checkpoint, and a restore whose
        checkpoint a kill cut off publishes it from the restored weights (the same bits). So a kill at
        any instant leaves either the older resume state (the later metrics rows are cut and redone
        identically) or the new one with or without its checkpoint: every state resumes.
        checkpoint=False (a stop before the time limit): no checkpoint, so evaluation is unchanged."""
        self.run_dir.append_metrics(pending_rows)
        tensors = state_tensors(self.model, self.optimizer, self.snapshots, self.in_flight.tensors())
        meta = {"step": self.step, "snapshots": sorted(self.snapshots), "rollout_policy_version": self.engine.version,
                "batch": {"step": self.in_flight.step, "version": self.in_flight.version,
                          "group_versions": self.in_flight.group_versions},
                "run_key": self.run_key, "checkpoint": checkpoint}
        write_resume_state(self.resume_dir, tensors, meta)
        if checkpoint:
            self.publish_checkpoint()

    def publish_checkpoint(self) -> None:
        save_checkpoint(self.model, self.run_dir.checkpoint_path(self.step),
                        extra={"step": self.step, "run_key": self.run_key})

    def restore(self) -> None:
        """Load the resume state (errors name the broken file) and cut metrics back to its step."""
        meta_path = self.resume_dir / RESUME_META
        if not meta_path.is_file():
            raise FileNotFoundError(f"resume state incomplete: {meta_path} is missing")
        try:
            meta = json.loads(meta_path.read_text())
            step, versions = int(meta["step"]), [int(v) for v in meta["snapshots"]]
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
            raise ValueError(f"corrupt resume state {meta_path}: {error}") from None
        tensors = load_state(self.resume_dir / RESUME_TENSORS)
        try:
            self.snapshots, batch = load_state_tensors(tensors, self.model, self.optimizer, versions)
            group_versions = meta["batch"].get("group_versions")
            self.in_flight = Rollout(step=meta["batch"]["step"], version=meta["batch"]["version"],
                                     group_versions=None if group_versions is None else tuple(group_versions),
                                     **{k: batch[k] for k in Rollout.TENSORS})
        except (KeyError, RuntimeError, ValueError, TypeError) as error:
            raise ValueError(f"corrupt resume state in {self.resume_dir}: {error!r}") from None
        self.step = step
        self.run_dir.keep_metrics_through(step)
        logged = [row["step"] for row in self.run_dir.read_metrics()]
        if logged != list(range(1, step + 1)):
            raise ValueError(f"{self.run_dir.metrics_path} holds steps {logged[:3]}...{logged[-3:]}, not 1..{step} "
                             f"as the resume state {meta_path} says: the file was damaged or replaced; train the "
                             f"run again in a new folder")
        if meta.get("checkpoint") and step not in self.run_dir.checkpoints():  # killed before the checkpoint
            self.publish_checkpoint()
            print(f"[tiny] published the checkpoint of step {step} from its resume state "
                  f"(the last run was stopped between them)", file=self.progress, flush=True)

    def write_status(self, status: str, message: str) -> None:
        self.run_dir.write_status(status, self.step, message,
                                  seconds={k: round(v, 3) for k, v in self.seconds.items()})

    # ---------------------------------------------------------------- the loop
    def run(self) -> str:
        previous = self.run_dir.read_status()
        if previous and previous.get("status") in ("completed", "diverged"):
            return previous["status"]  # finished runs are not redone
        torch.set_num_threads(1)
        # a kill inside a swap (replace_dir_atomic) leaves the previous copy aside
        recover_replaced_dirs(self.run_dir.train_dir)  # the resume state
        recover_replaced_dirs(self.run_dir.checkpoints_dir)
        if self.resume_dir.exists():
            self.restore()
        else:
            if self.run_dir.checkpoints():  # a resume state deleted by hand, or a run of an older trainer
                print(f"[tiny] {self.resume_dir} is missing beside {self.run_dir.checkpoints_dir}: training again "
                      f"from step 0 (the run is deterministic: its checkpoints are rewritten with the same bits)",
                      file=self.progress, flush=True)
            self.run_dir.keep_metrics_through(0)  # metrics of a run killed before its first resume state
            start = time.perf_counter()
            self.in_flight = self.generate(1)
            self.seconds["generate"] += time.perf_counter() - start
        try:
            return self.loop()
        except TimeLimitReached:
            raise  # not a failure: the resume state is saved and the retry continues
        except Exception as error:
            self.write_status("failed", f"{type(error).__name__}: {error}")
            raise

    def loop(self) -> str:
        pending: list[dict] = []
        wall = time.perf_counter()
        while self.step < self.steps:
            step = self.step + 1
            batch = self.in_flight
            head = {"step": step, "policy_version": batch.version, "realized_lag": step - 1 - batch.version,
                    "time": time.time()}  # when the step was produced (unix s): MLflow's wall-time axis
            check_realized_lag(step, head["realized_lag"], self.lag, self.mode)
            if batch.group_versions is not None:
                head.update(group_record(step, batch, self))
            # the next batch now, while this step trains, unless it needs this step's weights
            overlapped = step < self.steps and newest_sampling_version(step + 1, self.lag, self.mode, self.seed,
                                                                       self.queue) < step
            start = time.perf_counter()
            next_batch = self.generate(step + 1) if overlapped else batch
            self.seconds["generate"] += time.perf_counter() - start
            start = time.perf_counter()
            try:
                row = self.train_on(batch)
            except TrainingDiverged as reason:
                self.step = step
                self.run_dir.append_metrics(pending + [{**head, "loss": float("nan")}])
                self.write_status("diverged", f"diverged at step {step}: {reason}")
                return "diverged"
            self.seconds["train"] += time.perf_counter() - start
            self.step = step
            pending.append({**head, **row})
            self.snapshots[step] = self.state_copy()
            if not overlapped and step < self.steps:  # the synchronous order: generate with the new weights
                start = time.perf_counter()
                next_batch = self.generate(step + 1)
                self.seconds["generate"] += time.perf_counter() - start
            self.in_flight = next_batch
            # keep only the snapshots a later batch may still be sampled by: every mode's sampling
            # every mode's version is non-decreasing in the step; a queue batch's groups reach back `lag`
            oldest = oldest_needed_version(step + 2, self.lag, self.mode, self.seed)
            self.snapshots = {v: s for v, s in self.snapshots.items() if v >= oldest}
            canary = step == self.canary_stop  # saved with its checkpoint, as an evaluation step, for it to score
            if step % self.eval_every == 0 or step == self.steps or canary:
                self.save(pending)
                pending = []
            # the clock or SLURM's warning (harness.engine), or the canary's stop, which takes the same path
            if (near := time_limit_near() or (canary and "the canary")) and step < self.steps:
                if pending:
                    self.save(pending, checkpoint=False)
                raise TimeLimitReached(f"stopped after step {step} of {self.steps} before the job's time limit; "
                                       f"resume state saved, run again to continue (stopped by {near})")
            if step % self.params["progress_every"] == 0 or step == self.steps:
                print(f"[tiny] step {step}/{self.steps} reward {row['reward']:.3f} exact {row['reward/exact']:.3f} "
                      f"|d| {row['d/mean_abs']:.4f} lag {head['realized_lag']} "
                      f"({time.perf_counter() - wall:.1f}s)", file=self.progress, flush=True)
        self.write_status("completed", f"completed {self.steps} steps")
        return "completed"
