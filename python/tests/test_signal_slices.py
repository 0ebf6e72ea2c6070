"""A signal handler's exception ends every wait in slices (get(newer_than=),
get(name, timeout=) for a name to come, subscribe() for a ring to come,
Follow.next(), Subscription.next(), Watch.next()) even when the daemon is
stopped (SIGSTOP) or wedged: the request a slice sent (a GET or
RING_SUBSCRIBE that the daemon parks for the slice's 0.1 s) waits for its
reply, and libtensord asks the binding's interrupt fn only once the reply
is later than the daemon may hold it (its park time, then 0.1 s); before,
a slice's request was never given up, and the wait hung for as long as
the daemon stayed stopped. A daemon that answers in time keeps the
connection: the handler's exception is raised between slices
(docs/python.md, "Errors").

Each case runs in a process of its own (an exception that came late
would end pytest's): a SIGALRM timer (every 50 ms) whose handler raises
while the wait runs, and the child says what was raised and what the
connection can do after. Nothing here depends on timing; a child that
hangs is ended by the test's timeout."""

import json
import os
import signal
import subprocess
import sys

import pytest

CHILD = r"""
import errno, json, os, signal, sys
import numpy as np
import tensord

sock, pid, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
healthy = kind.startswith("healthy-")
what = kind.removeprefix("healthy-")


class Raised(Exception):
    pass


def stopped():
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")


c = tensord.Client(sock)
prod = tensord.Client(sock)
v = prod.put("sl/x", np.zeros(4, np.uint8))
hold = []
if what == "get-again":
    # a name got before: its next get(newer_than=) is served by a follow
    # of it, made at that call (a FOLLOW request)
    hold.append(c.get("sl/x"))
    wait = lambda: c.get("sl/x", newer_than=v)
elif what == "get-newer":
    wait = lambda: c.get("sl/x", newer_than=v)
elif what == "get-newer-timeout":
    wait = lambda: c.get("sl/x", newer_than=v, timeout=3600)
elif what == "appear":
    wait = lambda: c.get("sl/new", timeout=3600)
elif what == "subscribe":
    wait = lambda: c.subscribe("sl/r")
elif what == "subscribe-timeout":
    wait = lambda: c.subscribe("sl/r", timeout=3600)
elif what == "follow":
    f = c.follow("sl/x")
    f.next(timeout=60).release()
    wait = f.next
elif what == "sub-next":
    ring = prod.ring_create("sl/q", (4,), "u8", slots=3)
    sub = c.subscribe("sl/q")
    wait = sub.next
elif what == "watch":
    w = c.watch("sl/w")
    wait = w.next

inside = False


def handler(signum, frame):
    if inside:
        raise Raised()


signal.signal(signal.SIGALRM, handler)
if not healthy:
    os.kill(pid, signal.SIGSTOP)
out = {}
signal.setitimer(signal.ITIMER_REAL, 0.05, 0.05)
try:
    inside = True
    wait()
    inside = False
    out["raised"] = None
except BaseException as e:
    inside = False
    out["raised"] = type(e).__name__
signal.setitimer(signal.ITIMER_REAL, 0)
out["stopped"] = stopped()
os.kill(pid, signal.SIGCONT)
try:
    c.ls()
    out["then"] = "usable"
except tensord.Error as e:
    out["then"] = errno.errorcode.get(e.errno, e.errno)
if out["then"] == "usable":
    # what the wait waited for comes later: the same call gets it now
    if what.startswith("get") or what == "follow":
        v2 = prod.put("sl/x", np.ones(4, np.uint8))
        got = (f.next(timeout=60) if what == "follow"
               else c.get("sl/x", newer_than=v, timeout=60))
        out["later"] = got.version == v2
    elif what == "appear":
        v2 = prod.put("sl/new", np.ones(4, np.uint8))
        out["later"] = c.get("sl/new", timeout=60).version == v2
    elif what.startswith("subscribe"):
        r = prod.ring_create("sl/r", (4,), "u8", slots=3)
        out["later"] = c.subscribe("sl/r", timeout=60).name == "sl/r"
print(json.dumps(out))
"""


def run_child(daemon, kind):
    try:
        p = subprocess.run(
            [sys.executable, "-c", CHILD, daemon.sock,
             str(daemon.proc.pid), kind],
            capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{kind}: the wait never ended on the handler's "
                    "exception")
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", ["get-newer", "get-newer-timeout",
                                  "get-again", "appear", "subscribe",
                                  "subscribe-timeout"])
def test_a_sliced_wait_on_a_stopped_daemon_ends_on_a_signal(daemon, kind):
    """The request of a slice that a stopped daemon never answers: the
    handler's exception ends it (before, the wait hung), the daemon
    still stopped, and the connection is abandoned as for any unanswered
    request (ECONNABORTED)."""
    out = run_child(daemon, kind)
    assert out["raised"] == "Raised", out
    assert out["stopped"], out
    assert out["then"] == "ECONNABORTED", out


@pytest.mark.parametrize("kind", ["follow", "sub-next", "watch"])
def test_a_local_wait_on_a_stopped_daemon_ends_on_a_signal(daemon, kind):
    """Waits that ask the daemon nothing in their slices (a follow's or a
    ring's shared memory, the watch's socket) end between slices and
    keep the connection."""
    out = run_child(daemon, kind)
    assert out["raised"] == "Raised", out
    assert out["stopped"], out
    assert out["then"] == "usable", out
    assert out.get("later", True), out


@pytest.mark.parametrize("kind", ["healthy-get-newer",
                                  "healthy-get-newer-timeout",
                                  "healthy-appear", "healthy-subscribe",
                                  "healthy-follow"])
def test_a_signal_while_the_daemon_holds_a_slice_keeps_the_connection(
        daemon, kind):
    """A running daemon holds each slice's GET (RING_SUBSCRIBE) until a
    version (ring) comes or the slice's 0.1 s pass, and answers: a
    signal then is not a late reply, so the handler's exception is raised
    between slices and the connection stays whole; the version (ring)
    published later is got by the same client."""
    out = run_child(daemon, kind)
    assert out["raised"] == "Raised", out
    assert out["then"] == "usable", out
    assert out["later"] is True, out
