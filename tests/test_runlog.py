"""The one line a failed job prints: the fix for a user's mistake, the cause and remedy of a full disk, the
first line and the log for anything else."""

import errno

from hybridlens.errors import UserError
from hybridlens.runlog import failure_line


def _raised(outer, inner):
    try:
        try:
            raise inner
        except BaseException as cause:
            raise outer from cause
    except BaseException as err:
        return err


def test_a_full_disk_is_named_with_where_and_the_remedy():
    err = OSError(errno.ENOSPC, "No space left on device", "results/activations/q/chat4.h5.tmp-1")
    line = failure_line(err, "extract_activations (model=q)", "logs/x.log")
    assert line.startswith("hybridlens: extract_activations (model=q) failed: the disk is full (no space left on ")
    assert "writing results/activations/q/chat4.h5.tmp-1" in line and "free space" in line and "logs/x.log" in line


def test_hdf5s_wrapped_errno_and_a_chained_cause_are_read_too():
    hdf5 = OSError("[Errno 28] Driver write request failed (file write failed: time = Mon Dec  7, filename = x)")
    assert "the disk is full (no space left on device)" in failure_line(hdf5, "job", "log")
    chained = _raised(RuntimeError("could not save the table"), OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert "the disk is full (disk quota exceeded)" in failure_line(chained, "job", "log")


def test_other_errors_keep_their_first_line_and_a_users_mistake_its_message():
    assert failure_line(ValueError("bad value\nmore detail"), "job", "log") == (
        "hybridlens: job failed: ValueError: bad value (traceback in log)"
    )
    assert failure_line(UserError("config x: use y"), "job", "log") == "hybridlens: job: config x: use y"
