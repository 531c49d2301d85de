"""Logging for workflow scripts.

script_log   send stderr and logging to a rule's log file; any exception writes its traceback there and
             one line to the console: the rule, its wildcards, what went wrong and the fix or the log path;
             a job that finishes seals its tables (tables.seal)
"""

import contextlib
import errno
import logging
import signal
import sys
import traceback

from hybridlens.errors import UserError


def _job(smk) -> str:
    wildcards = ", ".join(f"{k}={v}" for k, v in dict(smk.wildcards.items()).items())
    return f"{smk.rule} ({wildcards})" if wildcards else smk.rule


class Stopped(Exception):
    """The job was sent SIGTERM: a scheduler's time or memory limit, a cancel, or snakemake stopping its jobs."""


def _stop(signum, frame):
    raise Stopped(f"stopped by {signal.Signals(signum).name}")


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
    if isinstance(err, Stopped):
        return (
            f"hybridlens: {job} was {err} (a scheduler's time or memory limit, a cancel, or the run stopping); "
            f"its unfinished outputs are discarded and finished jobs kept: rerun it (where it stopped: {log_path})"
        )
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


def _seal_outputs(smk):
    """A finished job's tables are sealed with what it wrote (tables.seal); the next run checks them."""
    from pathlib import Path

    from hybridlens.tables import SEALED, seal

    for out in smk.output:
        path = Path(out)  # only the run's results: a shipped directory's manifest covers every file in it
        if path.parts[:1] == ("results",) and path.suffix in SEALED and path.is_file():
            seal(path, smk.rule, dict(smk.wildcards.items()))


@contextlib.contextmanager
def script_log(smk):
    """Run a script's body with its log open. Import the heavy modules inside the block, so that even an
    import error lands in the log instead of leaving it empty."""
    path = smk.log[0]
    console = sys.stderr
    with open(path, "w") as log:
        sys.stderr = log
        logging.basicConfig(stream=log, level=logging.INFO, format="%(asctime)s %(message)s", force=True)
        previous = signal.signal(signal.SIGTERM, _stop)  # a stopped job says so, in its log and in one line
        try:
            yield logging.getLogger("hybridlens")
            _seal_outputs(smk)
        except Exception as err:
            traceback.print_exc(file=log)
            log.flush()
            print(failure_line(err, _job(smk), path), file=console)
            sys.exit(128 + signal.SIGTERM if isinstance(err, Stopped) else 1)
        finally:
            signal.signal(signal.SIGTERM, previous)
            sys.stderr = console
