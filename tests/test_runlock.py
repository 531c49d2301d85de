"""The run lock: held by a live process, released by its death however it dies, named to a second run."""

import os
import signal
import subprocess
import sys
import time

import pytest

from hybridlens.errors import UserError
from hybridlens.runlock import LOCK, hold, holder, main

HOLD = "import sys, time; from hybridlens.runlock import hold; hold(sys.argv[1]); print('held', flush=True)"
HOLD += "; time.sleep(600)"


def _live_holder(directory):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(directory)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    return proc


def test_a_live_holder_is_named_and_a_killed_one_is_not(tmp_path, capsys):
    assert holder(tmp_path) is None and main([str(tmp_path)]) == 1
    proc = _live_holder(tmp_path)
    try:
        live = holder(tmp_path)
        assert live["pid"] == proc.pid and "runlock" not in live["command"]
        with pytest.raises(
            UserError, match=rf"another run is live in {tmp_path} \(pid {proc.pid}, started .*kill {proc.pid}"
        ):
            hold(tmp_path)
        assert main([str(tmp_path)]) == 0 and f"pid {proc.pid}" in capsys.readouterr().out
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # no chance to clean up: the kernel releases the lock
        proc.wait()
    assert (tmp_path / LOCK).is_file() and holder(tmp_path) is None
    hold(tmp_path)  # the dead holder's record is replaced by this process's
    hold(tmp_path)  # holding again is nothing to do
    assert holder(tmp_path)["pid"] == os.getpid()


def test_the_record_of_a_holder_is_not_erased_by_a_refused_one(tmp_path):
    proc = _live_holder(tmp_path)
    try:
        before = (tmp_path / LOCK).read_text()
        refused = subprocess.run([sys.executable, "-c", HOLD, str(tmp_path)], capture_output=True, text=True)
        assert refused.returncode != 0 and "another run is live" in refused.stderr
        time.sleep(0.1)
        assert (tmp_path / LOCK).read_text() == before
    finally:
        proc.kill()
        proc.wait()
