"""Fault injection for the workflow tests: SIGKILL at a point the test names, deterministically.

Put this directory on PYTHONPATH and set HYBRIDLENS_FAULT="<point>:<path part>:<n>:<whom>":
  point   replace: before the n-th os.replace whose destination contains <path part> (a checkpoint's files
          are moved into place one by one); dataset: before the n-th HDF5 dataset created in a file whose
          path contains it (a store being written)
          patch: every write-site patch writes its values plus <path part> (a number): a broken patch
  whom    self: SIGKILL the process that reaches the point (one job); group: its process group (snakemake and
          all jobs); raise: raise a RuntimeError there (a bug in a script); enospc: raise the OSError of a
          full disk there, as HDF5 reports it; pause: wait there until the file HYBRIDLENS_RESUME names exists
          (a job that is still running)
"""

import os
import signal
import time

_spec = os.environ.get("HYBRIDLENS_FAULT")
if _spec:
    _point, _part, _n, _whom = _spec.split(":")
    _count = [0]

    def _hit(path):
        if _part in os.fspath(path):
            _count[0] += 1
            if _count[0] == int(_n):
                if _whom == "raise":
                    raise RuntimeError(f"injected fault at {os.fspath(path)}")
                if _whom == "enospc":  # HDF5 puts the errno in its message, not in the exception's errno
                    raise OSError(f"[Errno 28] Driver write request failed (file write failed: {os.fspath(path)})")
                if _whom == "pause":
                    while not os.path.exists(os.environ["HYBRIDLENS_RESUME"]):
                        time.sleep(0.1)
                    return
                os.killpg(os.getpgid(0), signal.SIGKILL) if _whom == "group" else os.kill(os.getpid(), signal.SIGKILL)

    if _point == "replace":
        _replace = os.replace

        def _faulty_replace(src, dst, *args, **kwargs):
            _hit(dst)
            return _replace(src, dst, *args, **kwargs)

        os.replace = _faulty_replace
    elif _point == "dataset":
        import h5py

        _create = h5py.Group.create_dataset

        def _faulty_create(self, name, *args, **kwargs):
            _hit(self.file.filename)
            return _create(self, name, *args, **kwargs)

        h5py.Group.create_dataset = _faulty_create
    elif _point == "patch":
        from hybridlens.interventions import patch

        _scatter = patch._scatter
        patch._scatter = lambda t, idx, values: _scatter(t, idx, values + float(_part))
