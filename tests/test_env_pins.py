"""environment.yml and pyproject.toml pin the same versions."""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _pins(requirements):
    return dict(re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", r).groups() for r in requirements if "==" in r)


def test_environment_pins_equal_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    py = _pins(project["dependencies"]) | _pins(project["optional-dependencies"]["gpu"])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    conda = _pins([p for p in pip if not p.startswith("-")])
    assert conda == py


def test_torch_is_pinned_to_the_cpu_build_on_disk():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "torch==2.13.0" in project["dependencies"]
