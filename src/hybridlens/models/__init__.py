"""Adapter (the only code that knows families), toy zoo."""
