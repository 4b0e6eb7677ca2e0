"""The cluster engine: THUDM/slime (SGLang rollout + Megatron-core training) driven by the harness.

Modules (slime and megatron are imported lazily, inside the functions that run in the container):
- ``launch``: run config -> validated job script (train/job.sh) -> run, HF checkpoints published as
  train/checkpoints/step_<N>/, train/status.json. ``launch.run(run_config, run_dir)`` is what
  engines.run calls; ``launch.resolve_params(engine_params)`` checks a config's engine_params
  (no file access) and ``launch.write_job_script`` is the dry run.
- ``loss``: the ``--custom-loss-function-path`` entry point (the recipe's stabilizer, TIS, KL).
- ``driver``: the constant-lag training loop over slime's Ray actors.
- ``lag``: slime weight version -> trainer version, per lag mode.
- ``metrics``: the hooks that write train/rollouts.jsonl and train/metrics.jsonl.
The software these target is pinned in envs/slime-container.yaml.
"""
