"""Built-in validations: two computations that must agree, measured during a run and judged after it.

An experiment measures each check while it runs (the largest difference between two computations and the
magnitude of what was compared) and writes the measurements beside its tables; a separate rule judges them
against tolerances given in units in the last place (ulps) of the model's dtype. A failed check thus loses
no table, and a new tolerance judges again without recomputing anything.

A tolerance is `ulps` × the dtype's spacing at the largest compared magnitude. 0 ulps means bit-identical:
two runs of the same computation on the same inputs give the same bits on any CPU. Two paths that compute
the same mathematics in another order (a cached continuation against a full forward, sdpa against eager,
a chunked scan against a step recurrence) round differently, by an amount that depends on the CPU's vector
units and thread count; by default they must agree in half the dtype's significant digits (path_ulps:
1/sqrt(eps), 2896 ulps in float32, 11 in bfloat16). Rounding leaves the other half intact, and a wrong
path (a position off by one, a state not carried) disagrees in all of them.

Check         one check's measurement: what it compares, the dtype, largest |a - b| and largest |b|
spacing       the dtype's unit in the last place at a magnitude
path_ulps     the default tolerance of two paths in ulps: half the dtype's digits
assert_paths_close   a test's assertion that two paths agree within path_ulps
judge         a Check against a tolerance in ulps -> verdict row; describe says it in one line
read_checks / write_checks   validation.json
"""

import json
import math
from dataclasses import asdict, dataclass

import torch


def spacing(dtype: torch.dtype | str, magnitude: float) -> float:
    """The distance from a number of this magnitude to the next representable one in `dtype` (its ulp)."""
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    info = torch.finfo(dtype)
    if not magnitude > 0:
        return info.tiny
    return info.eps * 2.0 ** math.floor(math.log2(max(magnitude, info.tiny)))


def path_ulps(dtype: torch.dtype | str) -> float:
    """How many ulps two paths of one computation may differ by: 1/sqrt(eps), half the dtype's digits."""
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    return torch.finfo(dtype).eps ** -0.5


def assert_paths_close(actual: torch.Tensor, expected: torch.Tensor, msg: str = "", dtype=None):
    """Assert two paths of one computation agree within path_ulps of the dtype they ran in (default:
    `expected`'s) at `expected`'s largest magnitude: what a test of two paths allows, as the pipeline does."""
    dtype = str(dtype or expected.dtype).removeprefix("torch.")
    check = Check("paths", "actual", "expected", dtype).update(actual, expected)
    allowed = path_ulps(dtype)
    if not check.ulps <= allowed:
        raise AssertionError(
            f"{msg + ': ' if msg else ''}paths differ by {check.max_abs_diff:.3e} = {check.ulps:.3g} ulps of "
            f"{check.dtype} at magnitude {check.magnitude:.3g}; allowed {allowed:.3g}"
        )


@dataclass
class Check:
    """The measurement of one check: `a` and `b` name the two computations, `b` being the reference."""

    name: str
    a: str
    b: str
    dtype: str  # the dtype the compared computations ran in, e.g. "float32"
    max_abs_diff: float = 0.0
    magnitude: float = 0.0  # largest |reference| compared
    n: int = 0  # numbers compared

    def update(self, a: torch.Tensor, b: torch.Tensor) -> "Check":
        """Fold one more pair of tensors (a batch) into the running maxima."""
        if a.shape != b.shape:
            raise ValueError(f"check {self.name}: shapes {tuple(a.shape)} and {tuple(b.shape)} differ")
        a, b = a.detach().double(), b.detach().double()
        if a.numel():
            self.max_abs_diff = max(self.max_abs_diff, (a - b).abs().max().item())
            self.magnitude = max(self.magnitude, b.abs().max().item())
        self.n += a.numel()
        return self

    @property
    def ulps(self) -> float:
        """The largest difference in units of the dtype's spacing at the compared magnitude."""
        return self.max_abs_diff / spacing(self.dtype, self.magnitude)


def judge(check: Check, ulps: float | None) -> dict:
    """The verdict row of one check against a tolerance of `ulps` units in the last place (None: path_ulps)."""
    ulps = path_ulps(check.dtype) if ulps is None else ulps
    tolerance = ulps * spacing(check.dtype, check.magnitude)
    passed = math.isfinite(check.max_abs_diff) and check.max_abs_diff <= tolerance
    return asdict(check) | {"ulps": check.ulps, "allowed_ulps": ulps, "tolerance": tolerance, "passed": passed}


def describe(verdict: dict) -> str:
    """One line for a judged check: its two paths, the difference against the tolerance and the config key
    that sets it (judge's row with the key added)."""
    allowed = "bit-identical" if verdict["allowed_ulps"] == 0 else f"at most {verdict['allowed_ulps']:.4g} ulps"
    return (
        f"check {verdict['name']} {'passed' if verdict['passed'] else 'failed'}: {verdict['a']!r} and "
        f"{verdict['b']!r} differ by {verdict['max_abs_diff']:.2e} = {verdict['ulps']:.3g} ulps of "
        f"{verdict['dtype']} at magnitude {verdict['magnitude']:.3g} over {verdict['n']} numbers; "
        f"allowed: {allowed} ({verdict['key']})"
    )


def write_checks(path, checks: list[Check]):
    with open(path, "w") as f:
        json.dump([asdict(c) for c in checks], f, indent=1)


def read_checks(path) -> list[Check]:
    with open(path) as f:
        return [Check(**c) for c in json.load(f)]
