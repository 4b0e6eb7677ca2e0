"""The tiny engine's RL loop: lagged bf16 rollouts, an fp32 trainer, resumable bit for bit.

One trainer step s (1-based), as in an asynchronous system with one batch in flight:
  1. the rollout engine generates the batch of step s + 1 (with the weights it was last
     broadcast; see rollout.sampling_version),
  2. the trainer recomputes old_logp on the batch of step s (float32, replaying the engine's
     routing when the recipe asks for R3), builds group-normalised advantages (GRPO, Shao et al.
     2024), calls the recipe's stabilizer on ``minibatches`` PolicyBatches and steps Adam after
     each; optional KL to the base model with the k3 estimator (Schulman 2020):
     k3 = exp(ref - logp) - (ref - logp) - 1,
  3. appends one metrics row (keys in shared/DESIGN.md), and every ``eval_every`` steps writes
     a checkpoint and the resume state.

Every random draw comes from a generator seeded by (seed, step), so the state to resume is
just tensors: trainer weights, Adam moments, the weight snapshots the engine may still be
broadcast, and the batch in flight. The engine's own weights are the bf16 cast of the snapshot
of its version, so a resumed run re-broadcasts them before its first rollout (same bits). A run killed at any point ends with the same metrics.jsonl
as an uninterrupted one, but for each row's ``time`` (when the step was produced, unix seconds).
"""
from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import torch

from engines import TimeLimitReached, TrainingDiverged, merge_metrics, time_limit_near
from engines.mismatch import abs_d_stats
from harness.grid import check_run
from harness.io import append_jsonl_atomic, read_jsonl, write_json_atomic, write_text_atomic
from stabilizers import PolicyBatch, Recipe, ess_lr_scale, offpolicy_diagnostics, validate_batch

from . import task
from .checkpoint import load_model, load_state, read_config, recover_replaced_dir, replace_dir_atomic, save_checkpoint
from .params import resolve_engine_params, warmstart_knobs
from .rollout import Rollout, RolloutEngine, sampling_version

RESUME_TENSORS, RESUME_META = "state.safetensors", "state.json"


def step_seed(seed: int, step: int, stream: int) -> int:
    """A distinct, stable seed per (run seed, step, purpose)."""
    return (seed * 1_000_003 + step) * 8 + stream


def check_run_config(run_config: dict) -> tuple[Recipe, dict]:
    """Validate everything before any work: the run config (harness.grid) and the engine params."""
    if "base_model" not in run_config:
        raise ValueError("run config is missing 'base_model'")
    return check_run(run_config), resolve_engine_params(run_config.get("engine_params"))


def check_base_model(run_config: dict, params: dict) -> Path:
    """The grid's warm-start model exists and was made with this run's model and warm-start knobs."""
    base_dir = Path(run_config["base_model"])
    if not (base_dir / "config.json").exists():
        raise FileNotFoundError(f"base model not found at {base_dir}; make it with "
                                f"python -m engines.prepare --engine tiny --engine-params-json ... --out {base_dir}")
    if read_config(base_dir).get("warmstart") != warmstart_knobs(params):
        raise ValueError(f"base model {base_dir} was made with other engine_params "
                         f"({read_config(base_dir).get('warmstart')}); rebuild it with engines.prepare")
    return base_dir


def group_advantages(rewards: torch.Tensor, samples: int) -> torch.Tensor:
    """GRPO advantages: reward minus its prompt group's mean, over the group's std (+1e-6)."""
    groups = rewards.view(-1, samples)
    adv = (groups - groups.mean(1, keepdim=True)) / (groups.std(1, unbiased=False, keepdim=True) + 1e-6)
    return adv.reshape(-1)


def routing_mismatch(a: torch.Tensor, b: torch.Tensor) -> float:
    """Fraction of (position, layer) whose expert sets differ; [B, T, layers, k] each."""
    return float((a.sort(-1).values != b.sort(-1).values).any(-1).float().mean())


class Trainer:
    def __init__(self, run_config: dict, run_dir: str | Path, progress=sys.stderr):
        self.recipe, self.params = check_run_config(run_config)
        self.config = run_config
        self.lag, self.mode, self.seed = run_config["lag"], run_config["lag_mode"], run_config["seed"]
        self.steps, self.eval_every = run_config["steps"], run_config["eval_every"]
        self.train_dir = Path(run_dir) / "train"
        self.metrics_path = self.train_dir / "metrics.jsonl"
        self.resume_dir = self.train_dir / "resume"
        self.progress = progress
        self.seconds = {"generate": 0.0, "train": 0.0}

        base_dir = check_base_model(run_config, self.params)
        self.base = load_model(base_dir).eval()
        for p in self.base.parameters():
            p.requires_grad_(False)
        self.model = load_model(base_dir)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=self.params["lr"],
                                          betas=tuple(self.params["adam_betas"]))
        self.engine = RolloutEngine(self.model.config, self.params["rollout_dtype"], self.params["temperature"])
        self.snapshots: dict[int, dict[str, torch.Tensor]] = {0: self.state_copy()}
        self.step = 0
        self.in_flight: Rollout | None = None

    # ---------------------------------------------------------------- rollout side
    def state_copy(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def generate(self, step: int) -> Rollout:
        """The batch of ``step``, sampled by the engine after any broadcast the schedule calls for."""
        version = sampling_version(step, self.lag, self.mode)
        if self.engine.version != version:
            self.engine.broadcast(self.snapshots[version], version)
        problems = task.problems("train", self.params["prompts_per_step"], seed=step_seed(self.seed, step, 0))
        return self.engine.rollout(step, problems, self.params["samples_per_step"], self.params["reward"],
                                   seed=step_seed(self.seed, step, 1))

    # ---------------------------------------------------------------- trainer side
    def train_on(self, batch: Rollout) -> dict:
        temperature = self.params["temperature"]
        plen = batch.tokens.shape[1] - batch.mask.shape[1]
        inputs, response = batch.tokens[:, :-1], batch.tokens[:, plen:]
        replay = batch.routing if self.recipe.routing_replay else None
        mask = batch.mask
        logmu = batch.logmu_full.gather(-1, response[..., None])[..., 0]

        with torch.no_grad():
            out = self.model(inputs, replay=replay)
            logp_full = (out.logits[:, plen - 1:] / temperature).log_softmax(-1)
            old_logp = logp_full.gather(-1, response[..., None])[..., 0]
            ref_logp = None
            if self.params["kl_coef"] > 0:
                ref_logits = self.base(inputs, replay=replay).logits[:, plen - 1:] / temperature
                ref_logp = ref_logits.log_softmax(-1).gather(-1, response[..., None])[..., 0]
        if not torch.isfinite(old_logp).all():
            raise TrainingDiverged("non-finite log-probabilities")

        advantages = group_advantages(batch.rewards, self.params["samples_per_step"])[:, None].expand_as(old_logp)
        rows = torch.arange(inputs.shape[0]).chunk(self.params["minibatches"])
        losses, grad_norms, kls, stab, lr_scales = [], [], [], {}, []
        max_norm = self.params["max_grad_norm"] or math.inf
        for index, idx in enumerate(rows):
            mb_out = self.model(inputs[idx], replay=None if replay is None else replay[idx])
            logp = (mb_out.logits[:, plen - 1:] / temperature).log_softmax(-1)
            logp = logp.gather(-1, response[idx][..., None])[..., 0]
            if not torch.isfinite(logp.detach()).all():
                raise TrainingDiverged("non-finite log-probabilities")
            policy_batch = PolicyBatch(logp=logp, old_logp=old_logp[idx], rollout_logp=logmu[idx],
                                       advantages=advantages[idx], mask=mask[idx])
            validate_batch(policy_batch)  # the engine's boundary: the loss itself checks nothing
            result = self.recipe.compute_loss(policy_batch, step_seed=step_seed(self.seed, self.step + 1, 2 + index))
            loss = result.loss
            if ref_logp is not None:
                delta = ref_logp[idx] - logp
                k3 = ((delta.exp() - delta - 1) * mask[idx]).sum() / mask[idx].sum().clamp(min=1)
                loss = loss + self.params["kl_coef"] * k3
                kls.append(float(k3.detach()))
            if not torch.isfinite(loss):
                raise TrainingDiverged("non-finite loss")
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norms.append(float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)))
            if self.params["vcpo_ess_lr"]:  # VCPO: this step's lr scaled by its minibatch's ESS
                ess = offpolicy_diagnostics(old_logp[idx], logmu[idx], mask[idx])["offpolicy/ess"]
                lr_scales.append(float(ess_lr_scale(ess)))
                for group in self.optimizer.param_groups:
                    group["lr"] = self.params["lr"] * lr_scales[-1]
            self.optimizer.step()
            losses.append(float(loss.detach()))
            for key, value in result.metrics.items():
                stab.setdefault(key, []).append(float(value))
        if not all(torch.isfinite(p).all() for p in self.model.parameters()):
            raise TrainingDiverged("non-finite weights")

        d = old_logp - logmu
        tv = 0.5 * (logp_full.exp() - batch.logmu_full.exp()).abs().sum(-1)
        row = {
            "reward": float(batch.rewards.mean()),
            "reward/exact": float(batch.exact.mean()),
            "entropy": float(-(logp_full.exp() * logp_full).sum(-1)[mask.bool()].mean()),
            "grad_norm": sum(grad_norms) / len(grad_norms),
            "loss": sum(losses) / len(losses),
            **abs_d_stats(d.abs()[mask.bool()]),
            "d/mean": float(d[mask.bool()].mean()),
            "d/lag_mean_abs": float((old_logp - batch.logp_sampler)[mask.bool()].abs().mean()),
            "d/impl_mean_abs": float((batch.logp_sampler - logmu)[mask.bool()].abs().mean()),
            "tv/mean": float(tv[mask.bool()].mean()),
            "tv/p90": float(torch.quantile(tv[mask.bool()].double(), 0.9)),
            # E_mu[|pi/mu - 1|] / 2 = TV(mu, pi): the estimate a cluster can make from sampled tokens only
            "tv/sampled_estimate": float(0.5 * (d.exp() - 1).abs()[mask.bool()].mean()),
            "routing/mismatch_rate": routing_mismatch(out.routing, batch.routing),
            "routing/own_mismatch_rate": routing_mismatch(out.own_routing, batch.routing),
        }
        if kls:
            row["kl/k3"] = sum(kls) / len(kls)
        if lr_scales:
            row["vcpo/lr_scale"] = sum(lr_scales) / len(lr_scales)
        row.update({k: float(v) for k, v in offpolicy_diagnostics(old_logp, logmu, mask).items()})
        return merge_metrics(row, {k: sum(v) / len(v) for k, v in stab.items()})

    # ---------------------------------------------------------------- persistence
    def save(self, pending_rows: list[dict], checkpoint: bool = True) -> None:
        """Metrics rows, then the checkpoint, then the resume state (each atomic; a kill between
        them leaves an older resume state, from which the same files are rewritten identically).
        checkpoint=False (a stop before the time limit): no checkpoint, so evaluation is unchanged."""
        append_jsonl_atomic(self.metrics_path, pending_rows, increasing="step")
        if checkpoint:
            save_checkpoint(self.model, self.train_dir / "checkpoints" / f"step_{self.step}",
                            extra={"step": self.step, "run_key": self.config.get("run_key")})
        tensors = {f"model.{k}": v for k, v in self.model.state_dict().items()}
        for index, state in self.optimizer.state_dict()["state"].items():
            for name, value in state.items():
                tensors[f"optim.{index}.{name}"] = value
        for version, state in self.snapshots.items():
            tensors.update({f"snap.{version}.{k}": v for k, v in state.items()})
        tensors.update({f"batch.{k}": v for k, v in self.in_flight.tensors().items()})
        meta = {"step": self.step, "snapshots": sorted(self.snapshots), "engine_version": self.engine.version,
                "batch": {"step": self.in_flight.step, "version": self.in_flight.version},
                "run_key": self.config.get("run_key")}

        def fill(tmp: Path) -> None:
            from safetensors.torch import save_file
            save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp / RESUME_TENSORS))
            (tmp / RESUME_META).write_text(json.dumps(meta, indent=2) + "\n")

        replace_dir_atomic(self.resume_dir, fill)

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

        def part(prefix: str) -> dict[str, torch.Tensor]:
            return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}

        try:
            self.model.load_state_dict(part("model."))
            optim = self.optimizer.state_dict()
            for index in range(len(optim["param_groups"][0]["params"])):
                optim["state"][index] = part(f"optim.{index}.")
            self.optimizer.load_state_dict(optim)
            self.snapshots = {v: part(f"snap.{v}.") for v in versions}
            batch = part("batch.")
            self.in_flight = Rollout(step=meta["batch"]["step"], version=meta["batch"]["version"],
                                     **{k: batch[k] for k in Rollout.TENSORS})
        except (KeyError, RuntimeError, ValueError, TypeError) as error:
            raise ValueError(f"corrupt resume state in {self.resume_dir}: {error!r}") from None
        self.step = step
        rows = [r for r in read_jsonl(self.metrics_path) if r["step"] <= step]
        write_text_atomic(self.metrics_path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))

    def write_status(self, status: str, message: str) -> None:
        write_json_atomic(self.train_dir / "status.json", {
            "status": status, "step": self.step, "message": message,
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()}})

    # ---------------------------------------------------------------- the loop
    def run(self) -> str:
        status_path = self.train_dir / "status.json"
        if status_path.exists():
            previous = json.loads(status_path.read_text())
            if previous.get("status") in ("completed", "diverged"):
                return previous["status"]  # finished runs are not redone
        torch.set_num_threads(1)
        recover_replaced_dir(self.resume_dir)  # a kill inside save()'s swap leaves the previous state aside
        if self.resume_dir.exists():
            self.restore()
        else:
            if (self.train_dir / "checkpoints").exists() and any((self.train_dir / "checkpoints").iterdir()):
                raise FileNotFoundError(f"{self.train_dir / 'checkpoints'} holds checkpoints but the resume "
                                        f"state {self.resume_dir} is missing; delete the run directory to restart")
            write_text_atomic(self.metrics_path, "")  # metrics of a run killed before its first checkpoint
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
            start = time.perf_counter()
            next_batch = self.generate(step + 1) if step < self.steps else batch
            self.seconds["generate"] += time.perf_counter() - start
            start = time.perf_counter()
            head = {"step": step, "policy_version": batch.version, "realized_lag": step - 1 - batch.version,
                    "time": time.time()}  # when the step was produced (unix s): MLflow's wall-time axis
            try:
                row = self.train_on(batch)
            except TrainingDiverged as reason:
                self.step = step
                append_jsonl_atomic(self.metrics_path, pending + [{**head, "loss": float("nan")}], increasing="step")
                self.write_status("diverged", f"diverged at step {step}: {reason}")
                return "diverged"
            self.seconds["train"] += time.perf_counter() - start
            self.step, self.in_flight = step, next_batch
            pending.append({**head, **row})
            # keep only the snapshots a later batch may still be sampled by
            self.snapshots[step] = self.state_copy()
            oldest = sampling_version(step + 2, self.lag, self.mode)
            self.snapshots = {v: s for v, s in self.snapshots.items() if v >= oldest}
            if step % self.eval_every == 0 or step == self.steps:
                self.save(pending)
                pending = []
            if time_limit_near() and step < self.steps:  # SLURM's warning (engines.TIME_LIMIT_SIGNAL)
                if pending:
                    self.save(pending, checkpoint=False)
                raise TimeLimitReached(f"stopped after step {step} of {self.steps} before the job's time limit; "
                                       "resume state saved, run again to continue")
            if step % self.params["progress_every"] == 0 or step == self.steps:
                print(f"[tiny] step {step}/{self.steps} reward {row['reward']:.3f} exact {row['reward/exact']:.3f} "
                      f"|d| {row['d/mean_abs']:.4f} lag {head['realized_lag']} "
                      f"({time.perf_counter() - wall:.1f}s)", file=self.progress, flush=True)
        self.write_status("completed", f"completed {self.steps} steps")
        return "completed"


def run(run_config: dict, run_dir: str | Path) -> str:
    """Train (or resume) one run; returns its final status."""
    return Trainer(run_config, run_dir).run()
