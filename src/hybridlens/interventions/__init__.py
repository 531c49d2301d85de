"""Hooks on model modules (writes), surgery on the transformers cache (states), one engine for edited forwards."""
