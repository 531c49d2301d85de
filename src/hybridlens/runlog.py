"""Logging for workflow scripts.

script_log   send stderr and logging to a rule's log file; any exception writes its traceback there and
             one line to the console: the rule, its wildcards, what went wrong and the fix or the log path
"""

import contextlib
import errno
import logging
import sys
import traceback

from hybridlens.errors import UserError


def _job(smk) -> str:
    wildcards = ", ".join(f"{k}={v}" for k, v in dict(smk.wildcards.items()).items())
    return f"{smk.rule} ({wildcards})" if wildcards else smk.rule


FULL = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded"}


def _full_disk(err: BaseException):
    """(what, where) if `err` or an exception it was raised from says the disk or the quota is full. HDF5
    wraps the cause in its own message ("[Errno 28] Driver write request failed ..."), so the text counts too."""
    seen = err
    while seen is not None:
        code = getattr(seen, "errno", None)
        text = str(seen)
        for number, what in FULL.items():
            if code == number or f"[Errno {number}]" in text or what in text.lower():
                return what, getattr(seen, "filename", None)
        seen = seen.__cause__ or seen.__context__
    return None


def failure_line(err: BaseException, job: str, log_path) -> str:
    """A UserError's message already says what to fix; a full disk says so and where; anything else is a bug
    or an environment problem, whose first line is shown with the log that holds the traceback."""
    if isinstance(err, UserError):
        return f"hybridlens: {job}: {err}"
    full = _full_disk(err)
    if full:
        what, where = full
        at = f" writing {where}" if where else ""
        return (
            f"hybridlens: {job} failed: the disk is full ({what}{at}); free space where results/ lives (or raise "
            f"the quota) and rerun: nothing already written is lost (traceback in {log_path})"
        )
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"hybridlens: {job} failed: {type(err).__name__}: {first} (traceback in {log_path})"


@contextlib.contextmanager
def script_log(smk):
    """Run a script's body with its log open. Import the heavy modules inside the block, so that even an
    import error lands in the log instead of leaving it empty."""
    path = smk.log[0]
    console = sys.stderr
    with open(path, "w") as log:
        sys.stderr = log
        logging.basicConfig(stream=log, level=logging.INFO, format="%(asctime)s %(message)s", force=True)
        try:
            yield logging.getLogger("hybridlens")
        except Exception as err:
            traceback.print_exc(file=log)
            log.flush()
            print(failure_line(err, _job(smk), path), file=console)
            sys.exit(1)
        finally:
            sys.stderr = console
