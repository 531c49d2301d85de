"""Intervals for rates.

wilson      Wilson score interval of a binomial rate
bootstrap   percentile bootstrap interval of a statistic over items
"""

import math

import numpy as np


def wilson(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson interval (lo, hi) of successes / n."""
    if n == 0:
        return (float("nan"), float("nan"))
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # The clamps keep p inside its interval despite rounding at p = 0 or 1.
    return (max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half)))


def bootstrap(values, stat=np.mean, n_boot: int = 2000, seed: int = 0, alpha: float = 0.05):
    """(lo, hi) percentile interval of stat(values) over `n_boot` resamples."""
    values = np.asarray(values)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(n_boot, len(values)))
    stats = np.array([stat(values[i]) for i in idx])
    return (float(np.quantile(stats, alpha / 2)), float(np.quantile(stats, 1 - alpha / 2)))
