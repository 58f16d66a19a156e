"""memctl command groups beyond the core: each module has ``register(app)``."""
