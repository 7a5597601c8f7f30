"""One module per command beyond the core; each exposes ``register(app)``."""
