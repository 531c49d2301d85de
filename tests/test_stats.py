import numpy as np
import pytest

from hybridlens.stats import bootstrap, wilson


@pytest.mark.parametrize("k, n", [(0, 10), (10, 10), (128, 128), (5, 7), (0, 1)])
def test_wilson_contains_the_rate_and_stays_in_unit_interval(k, n):
    lo, hi = wilson(k, n)
    assert 0 <= lo <= k / n <= hi <= 1


def test_wilson_reference_value():
    # 8/10: the textbook Wilson 95 % interval is (0.490, 0.943).
    lo, hi = wilson(8, 10)
    assert (round(lo, 3), round(hi, 3)) == (0.49, 0.943)


def test_bootstrap_interval_covers_the_mean_and_shrinks_with_n():
    rng = np.random.default_rng(0)
    small, big = rng.normal(size=20), rng.normal(size=2000)
    lo_s, hi_s = bootstrap(small)
    lo_b, hi_b = bootstrap(big)
    assert lo_s <= small.mean() <= hi_s and lo_b <= big.mean() <= hi_b
    assert hi_b - lo_b < (hi_s - lo_s) / 5
