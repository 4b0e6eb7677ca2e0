"""Everything the tests share, imported one way (``from tests.support.<module> import ...``):
the Snakemake CLI driver, small tiny-engine runs, a fabricated grid, an MLflow server, a single-node
SLURM cluster, stand-ins for slime (its calling convention, its checkpoint writes, a package for job
scripts) and for an SGLang server; and the mechanics that keep tests honest: free ports for servers
that cannot bind port 0, waits that fail saying why, skips of optional inputs that CI turns into
failures, a grid put back as it was, and the project tree's state. Fixtures live in conftest.py,
data files in tests/fixtures/."""
