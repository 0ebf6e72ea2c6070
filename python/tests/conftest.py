# SPDX-License-Identifier: MIT
"""Fixtures for the binding's tests: a daemon per test from the build
tree, helpers that read /proc/self, and TAP lines so that the suite's
summary (scripts/summary.py) counts each pytest case, skips apart."""
import faulthandler
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

BUILD = os.environ.get("TD_BUILD_ROOT", "")
# set by python/meson.build in a -Db_sanitize=address build
UNDER_ASAN = "TD_DAEMON_ASAN_OPTIONS" in os.environ
SOURCE = os.environ.get("TD_SOURCE_ROOT",
                        os.path.join(os.path.dirname(__file__), "..", ".."))


def need_torch():
    """torch (Debian's python3-torch), or skip the test saying why."""
    try:
        import torch
    except ImportError:
        pytest.skip("python3-torch is not installed (scripts/deps.sh "
                    "installs it): the DLPack-to-torch checks did not run")
    return torch


def tensord_bin():
    path = os.environ.get("TD_TENSORD") or os.path.join(
        BUILD, "daemon", "tensord")
    if not os.path.exists(path):
        pytest.fail("TD_TENSORD is not set (run through meson test)")
    return path


class Daemon:
    def __init__(self, tmp, args, env=None):
        self.sock = str(tmp / "td.sock")
        self.args = args
        self.extra_env = env or {}
        self.proc = None
        self.start()

    def start(self):
        env = dict(os.environ)
        if "TD_DAEMON_ASAN_OPTIONS" in env:
            # an ASan daemon needs no preload, and checks its leaks
            env.pop("LD_PRELOAD", None)
            env["ASAN_OPTIONS"] = env["TD_DAEMON_ASAN_OPTIONS"]
        env.update(self.extra_env)
        self.proc = subprocess.Popen(
            [tensord_bin(), "--socket", self.sock, "--log-level", "warn"]
            + self.args, stdin=subprocess.DEVNULL, env=env)
        for _ in range(1000):
            if self.proc.poll() is not None:
                pytest.fail(f"tensord exited with {self.proc.returncode}")
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                s.connect(self.sock)
                s.close()
                return
            except OSError:
                time.sleep(0.01)
        pytest.fail("tensord did not come up")

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                rc = self.proc.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                # killed: left running it would hold pytest's output,
                # which meson waits for
                self.kill()
                pytest.fail(f"tensord did not exit within {WAIT_S} s of "
                            "SIGTERM (killed)")
            assert rc == 0, f"tensord exited with {rc}"


@pytest.fixture
def daemon_args():
    return []


@pytest.fixture
def daemon(tmp_path, daemon_args):
    d = Daemon(tmp_path, daemon_args)
    yield d
    d.stop()


@pytest.fixture
def client(daemon):
    import tensord
    with tensord.Client(daemon.sock) as c:
        yield c


def fake_dmabuf_env(env):
    """env with tests/fake-dmabuf.c preloaded after what it preloads
    already (the sanitizer runtimes under ASan): memfds named
    td-fake-dmabuf* are dma-bufs to the process (this machine has no
    dma-buf exporter). Fails when the build has no shim."""
    shim = os.path.join(BUILD, "tests", "td-fake-dmabuf.so")
    if not os.path.exists(shim):
        pytest.fail(f"{shim} is not built (meson compile builds it)")
    env = dict(env)
    env["LD_PRELOAD"] = ":".join(
        p for p in (env.get("LD_PRELOAD", ""), shim) if p)
    env["TD_FAKE_DMABUF"] = "td-fake-dmabuf"
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "detect_leaks=0")
                           + ":verify_asan_link_order=0")
    return env


def child_env(daemon=None):
    env = dict(os.environ)
    here = os.environ.get("PYTHONPATH", "")
    env["PYTHONPATH"] = here
    if daemon:
        env["TENSORD_SOCKET"] = daemon.sock
    return env


# How long a test waits for what takes well under a second when all is
# well (a child's exit, the daemon's) before it fails saying what it
# waited for instead of hanging the suite (tests/testutil.h, TU_WAIT_S).
WAIT_S = 60


def wait_child(pid, what, timeout=WAIT_S):
    """os.waitpid(pid, 0), bounded: a child still running after timeout
    seconds is killed and the test fails naming it. Its wait status."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"{what}: still running after {timeout} s "
                        "(killed)")
        time.sleep(0.01)


def run_py(code, daemon, *args, timeout=120):
    """Run Python code in a fresh process (Debian's interpreter)."""
    r = subprocess.run([sys.executable, "-c", code, *args],
                       env=child_env(daemon), capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


class InThread(threading.Thread):
    """Run fn() in a thread started at once; finish() joins it and gives
    back what it returned or raised (as .result / .error)."""

    def __init__(self, fn):
        super().__init__(daemon=True)
        self.fn, self.result, self.error = fn, None, None
        self.calling = threading.Event()
        self.start()

    def run(self):
        try:
            self.calling.set()
            self.result = self.fn()
        except Exception as e:  # noqa: BLE001 (handed to the test)
            self.error = e

    def inside(self, settle=0.2):
        """Once the thread is in fn()'s blocking call: it has started
        (however late a loaded machine starts it), and holding the GIL it
        goes from the event straight into the call, where it lets the
        GIL go; settle is for what the call does before it blocks."""
        assert self.calling.wait(60), "the thread did not start"
        time.sleep(settle)

    def finish(self, timeout=60):
        self.join(timeout)
        assert not self.is_alive(), "the thread is still waiting"
        return self


def child_refuses(give_back, *calls):
    """In a child of fork(): give_back() must not fail, and each call
    must raise tensord.Error ECHILD (the parent's objects are not the
    child's to use). Asserts so in the parent."""
    import errno
    import tensord
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            give_back()
            for call in calls:
                try:
                    call()
                    code = 1
                except tensord.Error as e:
                    if e.errno != errno.ECHILD:
                        code = 2
        finally:
            os._exit(code)
    status = wait_child(pid, "the child of fork()")
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, \
        f"the child used the parent's object (status {status:#x})"


def mapping_of(addr):
    """The /proc/self/maps line holding addr: dict or None."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= addr < hi:
                return {"lo": lo, "hi": hi, "perms": parts[1],
                        "offset": int(parts[2], 16), "inode": int(parts[4]),
                        "path": parts[5].strip() if len(parts) > 5 else ""}
    return None


def fd_count():
    return len(os.listdir("/proc/self/fd"))


def map_count():
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def memfd_map_count():
    # mappings of memfds (tensor planes, ring slots, follow bells): what a
    # handoff could leak. The total also moves with the allocators' own
    # arenas (pymalloc unmaps an empty one; ASan maps as it likes).
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if "/memfd:" in line)


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


# ---- a test that hangs fails, naming itself ----
#
# The criterion suites' per-test limit (tests/testutil.h,
# TU_TEST_TIMEOUT_S) here: past it, the test's main thread gets SIGUSR1,
# whose handler fails the test; every wait of the binding runs Python's
# handlers between its 0.1 s slices, and so do time.sleep() and lock
# waits. A test stuck where no handler runs (a C call that never
# returns) is ended HARD_GRACE_S later by faulthandler: every thread's
# traceback, then the process exits, so meson's log names it instead of
# the whole suite running into meson's timeout.
TEST_TIMEOUT_S = float(os.environ.get("TD_PY_TEST_TIMEOUT_S", "240"))
HARD_GRACE_S = 60


def _ran_too_long(signum, frame):
    pytest.fail(f"the test ran past {TEST_TIMEOUT_S:g} s, the per-test "
                "limit (python/tests/conftest.py, TD_PY_TEST_TIMEOUT_S)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    main = threading.main_thread().ident
    old = signal.signal(signal.SIGUSR1, _ran_too_long)
    timer = threading.Timer(TEST_TIMEOUT_S, signal.pthread_kill,
                            (main, signal.SIGUSR1))
    timer.daemon = True
    timer.start()
    faulthandler.dump_traceback_later(TEST_TIMEOUT_S + HARD_GRACE_S,
                                      exit=True)
    try:
        yield
    finally:
        timer.cancel()
        faulthandler.cancel_dump_traceback_later()
        signal.signal(signal.SIGUSR1, old)


# ---- TAP: one line per test case, for scripts/summary.py ----

_tap = {"n": 0, "outcome": {}}


def pytest_runtest_logreport(report):
    o = _tap["outcome"]
    prev = o.get(report.nodeid)
    if report.failed:
        o[report.nodeid] = ("not ok", "")
    elif report.skipped and prev is None:
        reason = report.longrepr[2] if isinstance(report.longrepr,
                                                  tuple) else ""
        o[report.nodeid] = ("ok", f" # SKIP {reason}")
    elif report.when == "call" and prev is None:
        o[report.nodeid] = ("ok", "")
    if report.when == "teardown":
        status, directive = o.get(report.nodeid, ("not ok", ""))
        _tap["n"] += 1
        tr = _terminal()
        if tr:
            tr.write("\n")
            tr.write_line(f"{status} {_tap['n']} - {report.nodeid}"
                          f"{directive}")


_config = {}


def pytest_configure(config):
    _config["c"] = config


def _terminal():
    c = _config.get("c")
    return c.pluginmanager.getplugin("terminalreporter") if c else None


def pytest_sessionfinish(session, exitstatus):
    tr = _terminal()
    if tr:
        tr.write("\n")
        tr.write_line(f"1..{_tap['n']}")
