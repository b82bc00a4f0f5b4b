"""The installed `parley` console script, run the way a user runs it: from another directory,
so nothing but the installed packages is importable (the benchmarks it wraps included)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PARLEY = Path(sys.executable).with_name("parley")


def _run(*args, cwd):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(PARLEY), *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


@pytest.mark.skipif(not PARLEY.exists(), reason="the project is not installed in this interpreter's environment")
def test_bench_turn_runs_from_any_directory_and_reports_bad_input_in_one_line(tmp_path):
    proc = _run("bench", "turn", "--data", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "ModuleNotFoundError" not in proc.stderr
    assert proc.stderr.strip() == f"parley bench: error: no NAME.json + NAME.wav clips in {tmp_path}"


@pytest.mark.skipif(not PARLEY.exists(), reason="the project is not installed in this interpreter's environment")
def test_forwarded_bench_prints_the_benchmarks_own_options_and_others_refuse_unknown_ones(tmp_path):
    proc = _run("bench", "speculative", "-h", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--fixed-k" in proc.stdout and "--repeats" in proc.stdout  # benchmarks/speculative.py's parser
    assert proc.stdout.startswith("usage: parley bench speculative ")  # named as the user typed it
    proc = _run("models", "--repeats", "2", cwd=tmp_path)
    assert proc.returncode == 2 and "unrecognized arguments: --repeats 2" in proc.stderr
