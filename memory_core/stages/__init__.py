"""Pipeline stages: each a function of (stores, config, run context) returning a result."""
