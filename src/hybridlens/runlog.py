"""Logging for workflow scripts.

script_log   send stderr and logging to a rule's log file; a bad-input error also reaches the console
             as one line, so the user sees what to fix without opening the log
"""

import contextlib
import logging
import sys
import traceback

# Errors that mean "your input is wrong", as opposed to a bug: shown as one line.
from hybridlens.experiments.zoo import GateFailed
from hybridlens.models.families import UnsupportedModel
from hybridlens.store import StoreError

USER_ERRORS = (GateFailed, UnsupportedModel, StoreError, ValueError, LookupError)


@contextlib.contextmanager
def script_log(path):
    console = sys.stderr
    with open(path, "w") as log:
        sys.stderr = log
        logging.basicConfig(stream=log, level=logging.INFO, format="%(asctime)s %(message)s", force=True)
        try:
            yield logging.getLogger("hybridlens")
        except USER_ERRORS as err:
            traceback.print_exc(file=log)
            print(f"hybridlens: {err}", file=console)
            sys.exit(1)
        finally:
            sys.stderr = console
