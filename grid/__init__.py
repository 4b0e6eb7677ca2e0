"""What a config declares and how it is checked (docs/design.md, "The house"): the schema and semantic
checks (config.py), the typed ``Config`` and its sections (settings.py), the claim kinds and the seed
schedule (claims.py), the equal tuning budget (tuning.py), the grid's expansion into run configs
(expand.py), what the config means to Snakemake (jobs.py), the grid folder (folder.py) and the one
loader a stage uses for ``--grid DIR`` (loader.py). Imports ``harness`` and ``stabilizers``; ``harness``
imports nothing of it."""
