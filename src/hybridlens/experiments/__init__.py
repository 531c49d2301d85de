"""One module per experiment: pure functions from models and prompts to tables."""
