"""One local run of the test config, shared by the workflow tests."""

import pytest
from wf import snakemake, workdir


@pytest.fixture(scope="session")
def run1(tmp_path_factory):
    cwd = workdir(tmp_path_factory.mktemp("run1"))
    res = snakemake(cwd, "--workflow-profile", "profiles/local")
    assert res.returncode == 0, res.stderr[-3000:]
    return cwd
