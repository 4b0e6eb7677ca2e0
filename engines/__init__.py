"""Training engines, one package each (engines/tiny, engines/slime): each registers a
``harness.engine.Engine`` by name when imported; harness.engine finds them here."""
