"""Figures from tables and stores only; never touches a model."""

import matplotlib

matplotlib.use("Agg")
