"""Everything the tests share, imported one way (``from tests.support.<module> import ...``):
the Snakemake CLI driver and the ``scratch`` fixture's folder, a fabricated grid, an MLflow server,
a single-node SLURM cluster, stand-ins for slime (its calling convention, its checkpoint writes, a
package for job scripts) and for an SGLang server. Data files live in tests/fixtures/."""
