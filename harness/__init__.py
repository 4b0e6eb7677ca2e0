"""The contracts every stage shares, each defined once (docs/design.md, "The house"): the engine
(engine.py), the run on disk (run.py), the grid on disk (grid_dir.py), the config (settings.py typed,
config.py checked; jobs.py its Snakemake plumbing), grid expansion and run identity, provenance,
atomic io, the one writer lock, and the stage CLI (cli.py). Imports only ``stabilizers``."""
