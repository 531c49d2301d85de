"""Model registry, adapter (the only code that knows families), toy zoo."""
