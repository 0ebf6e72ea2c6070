# SPDX-License-Identifier: MIT
"""The suite's own limits: a test that hangs fails, naming itself, and
the tests after it still run (conftest.py, TD_PY_TEST_TIMEOUT_S)."""
import os
import pathlib
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).parent

HUNG = '''
import threading
import time


def test_hangs_in_a_lock_wait():
    threading.Event().wait()        # nobody sets it


def test_hangs_in_a_sleep_loop():
    while True:
        time.sleep(0.1)


def test_after_them_runs():
    assert True
'''


def run_pytest(tmp_path, limit):
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_hung.py").write_text(HUNG)
    env = dict(os.environ, TD_PY_TEST_TIMEOUT_S=str(limit))
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
         str(tmp_path)], env=env, capture_output=True, text=True,
        timeout=120, cwd=tmp_path)


def test_a_hung_test_fails_by_name_and_the_rest_run(tmp_path):
    r = run_pytest(tmp_path, 1)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out          # tests failed, not a crash
    assert "not ok 1 - test_hung.py::test_hangs_in_a_lock_wait" in out, out
    assert "not ok 2 - test_hung.py::test_hangs_in_a_sleep_loop" in out, out
    assert "ok 3 - test_hung.py::test_after_them_runs" in out, out
    # each failure says why (pytest may repeat it in its summary)
    assert out.count("Failed: the test ran past 1 s, the per-test limit") \
        >= 2, out
    assert "2 failed, 1 passed" in out, out


def test_the_limit_is_not_met_by_a_test_within_it(tmp_path):
    # only the quick test of the same file, under a generous limit:
    # the limit fails nothing that ends within it
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_hung.py").write_text(HUNG)
    env = dict(os.environ, TD_PY_TEST_TIMEOUT_S="30")
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
         str(tmp_path / "test_hung.py") + "::test_after_them_runs"],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "1 passed" in out and "ran past" not in out, out
