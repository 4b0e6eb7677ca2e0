"""What every stage shares: the config model (defaults + checks), grid expansion, run identity,
atomic file io and the small CLI helpers. Imports only ``stabilizers`` (shared/DESIGN.md)."""
