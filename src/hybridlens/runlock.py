"""Which run holds a working directory: a lock that its holder's death releases.

Snakemake's own locks (.snakemake/locks/) stay behind when a run is killed, so they cannot tell a live run
from a dead one. The main process of a run that executes jobs holds an flock on .snakemake/hybridlens-run
(the kernel releases it when the process ends, however it ends) and writes its pid, start time and command
line there, so a second run can name the live one, and the advice to remove snakemake's locks is given only
when no run is alive.

name_live_run  print the live run of a directory, or refuse to unlock under it
hold     take the lock for the rest of this process's life, or raise UserError naming the live holder
holder   the live holder's {pid, started, command}, or None
python -m hybridlens.runlock [DIR]   prints the live holder and exits 0; exits 1 if no run holds DIR
"""

import fcntl
import json
import os
import sys
import time
from pathlib import Path

from hybridlens.errors import UserError

LOCK = Path(".snakemake") / "hybridlens-run"
_held = {}  # directory -> the open file whose flock this process holds


def _path(directory) -> Path:
    return Path(directory).resolve() / LOCK


def holder(directory=".") -> dict | None:
    """The live run holding `directory` ({pid, started, command}; {} while it writes them), else None."""
    path = _path(directory)
    if not path.is_file():
        return None
    with open(path) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = f.read()
            return json.loads(text) if text.strip() else {}
        fcntl.flock(f, fcntl.LOCK_UN)
        return None


def describe(run: dict) -> str:
    if not run:
        return "a run that is starting"
    return f"pid {run['pid']}, started {run['started']}: {run['command']}"


def name_live_run(directory=".", unlocking: bool = False) -> bool:
    """Name a run that is live in `directory` (once, before snakemake's own lock check, whose locks look the same
    whether their run is alive or was killed); refuse to unlock under it. True when one was named."""
    live = holder(directory)
    if live is None:
        return False
    if unlocking:
        raise UserError(
            f"another run is live in this directory ({describe(live)}): its locks are not a killed run's; wait "
            "for it to finish, or stop it, instead of unlocking"
        )
    print(
        f"hybridlens: another run is live in this directory ({describe(live)}); wait for it to finish or stop "
        "it: a second run here is refused (a dry run, -n, is safe)",
        file=sys.stderr,
    )
    return True


def hold(directory="."):
    """Hold `directory` for this process's life (again: nothing to do); UserError if a live run holds it."""
    path = _path(directory)
    if path in _held:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    # Kept open for the process's life (the lock is the open file); "a+", as truncating before the lock is
    # ours would erase the live holder's record.
    f = open(path, "a+")  # noqa: SIM115
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        text = f.read()
        f.close()
        run = json.loads(text) if text.strip() else {}
        raise UserError(
            f"another run is live in {path.parent.parent} ({describe(run)}); a second run there would redo or "
            f"delete its outputs: wait for it to finish, or stop it{' (kill ' + str(run['pid']) + ')' if run else ''} "
            "and run again"
        ) from None
    f.seek(0)
    f.truncate()
    command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
    json.dump({"pid": os.getpid(), "started": time.strftime("%Y-%m-%d %H:%M:%S"), "command": command}, f)
    f.flush()
    _held[path] = f


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    run = holder(args[0] if args else ".")
    if run is None:
        return 1
    print(describe(run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
