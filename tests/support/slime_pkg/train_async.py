"""slime's interval-lag entry point (the job script runs it); the stand-in only marks that it exists."""
