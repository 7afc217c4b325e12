"""scripts/pytest_resume.py: a suite cut off in one call goes on where it stopped in the next.

Runs pytest in a subprocess on a small throw-away suite: the first run records each test that passed or
failed (not the skipped one), the second deselects exactly those, and without STRATA_RESUME_FILE nothing is
recorded or deselected.
"""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SUITE = """
import pytest

def test_passes():
    pass

def test_fails():
    assert False

def test_skips():
    pytest.skip("for want of something a later call brings")

@pytest.fixture
def broken():
    raise RuntimeError("set-up fails")

def test_setup_error(broken):
    pass
"""


def run(tmp_path, resume_file):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "scripts"))
    env.pop("STRATA_RESUME_FILE", None)
    if resume_file is not None:
        env["STRATA_RESUME_FILE"] = str(resume_file)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "pytest_resume", "-p", "no:cacheprovider",
                           "-p", "no:randomly", str(tmp_path / "test_suite.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_finished_tests_are_recorded_then_deselected(tmp_path):
    (tmp_path / "test_suite.py").write_text(SUITE)
    done = tmp_path / "done.txt"
    first = run(tmp_path, done)
    assert "1 failed, 1 passed, 1 skipped, 1 error" in first.stdout, first.stdout
    recorded = sorted(done.read_text().split())
    assert recorded == ["test_suite.py::test_fails", "test_suite.py::test_passes", "test_suite.py::test_setup_error"]
    second = run(tmp_path, done)
    assert "1 skipped, 3 deselected" in second.stdout, second.stdout
    assert sorted(done.read_text().split()) == recorded  # a skip is never recorded


def test_without_the_variable_nothing_is_recorded_or_deselected(tmp_path):
    (tmp_path / "test_suite.py").write_text(SUITE)
    result = run(tmp_path, None)
    assert "1 failed, 1 passed, 1 skipped, 1 error" in result.stdout, result.stdout
    assert "deselected" not in result.stdout
    assert list(tmp_path.glob("*.txt")) == []
