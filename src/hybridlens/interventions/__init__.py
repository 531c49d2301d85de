"""Hooks on model modules (writes) and surgery on the transformers cache (states)."""
