"""The contracts every stage shares, each defined once (docs/design.md, "The house"): the engine
(engine.py), the run on disk (run.py) and its typed config (run_config.py), run identity, the lag
schedule, provenance, atomic io, the one writer lock, HF saves, container images and the stage CLI
(cli.py). Imports only ``stabilizers``: what a grid's config declares lives in ``grid/``."""
