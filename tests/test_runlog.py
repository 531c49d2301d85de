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


def test_a_job_stopped_by_sigterm_says_so_in_its_log_and_in_one_line(tmp_path):
    """A real process inside script_log, sent SIGTERM as a scheduler sends it: not an empty log."""
    import signal
    import subprocess
    import sys

    job = tmp_path / "job.py"
    job.write_text(
        "import sys, time, types\n"
        "from hybridlens.runlog import script_log\n"
        "smk = types.SimpleNamespace(log=[sys.argv[1]], rule='split_prefill', wildcards={'model': 'q'}, output=[])\n"
        "with script_log(smk) as log:\n"
        "    log.info('working')\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(60)\n"
    )
    log = tmp_path / "job.log"
    proc = subprocess.Popen([sys.executable, job, log], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM
    (line,) = err.strip().splitlines()
    assert line.startswith("hybridlens: split_prefill (model=q) was stopped by SIGTERM (a scheduler's time or ")
    assert f"rerun it (where it stopped: {log})" in line
    text = log.read_text()
    assert "working" in text and "Stopped: stopped by SIGTERM" in text and "time.sleep(60)" in text


def test_a_finished_job_seals_its_results_tables_and_nothing_in_a_shipped_directory(tmp_path, monkeypatch):
    import types

    from hybridlens.runlog import script_log

    monkeypatch.chdir(tmp_path)
    for name in ("results/x/rows.tsv", "results/x/store.h5", "zoo/toy/manifest.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("a\tb\n1\t2\n")
    outputs = ["results/x/rows.tsv", "results/x/store.h5", "zoo/toy/manifest.json"]
    smk = types.SimpleNamespace(log=["job.log"], rule="rows", wildcards={"model": "q"}, output=outputs)
    with script_log(smk):
        pass
    sealed = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob(".*.provenance"))
    assert sealed == ["results/x/.rows.tsv.provenance"]  # HDF5 carries its own checksum; zoo/ its manifest
