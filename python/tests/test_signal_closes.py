"""A signal handler's exception inside a wait that no call raises: the
close of a Ring, Subscription, Follow or Watch freed (its last reference
dropped, or a garbage collection) while the daemon is stopped waits for
the close's reply, the handlers run there, and Ctrl-C's KeyboardInterrupt
(any handler's exception) is raised right after, at the next bytecode
boundary, where the handler's own raise would have come; the connection
is abandoned as for any call (docs/python.md, "Errors").

Each case runs in a process of its own (a KeyboardInterrupt that came
late would end pytest's): it stops the daemon, sends itself SIGINT every
50 ms from a thread while the object's end waits, and says what was
raised where. Its handler raises only inside that end (a SIGINT before
it is let be), so nothing here depends on timing; a child that hangs is
ended by the test's timeout."""

import json
import os
import signal
import subprocess
import sys

import pytest
import tensord

CHILD = r"""
import gc, json, os, signal, sys, threading
import numpy as np
import tensord

sock, pid, kind, exc = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]


class Raised(Exception):
    pass


def stopped():
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")


c = tensord.Client(sock)
prod = tensord.Client(sock)
what = kind.split("-")[0]
if what == "ring":
    obj = c.ring_create("dc/r", (4,), "u8", slots=3)
elif what == "sub":
    ring = prod.ring_create("dc/s", (4,), "u8", slots=3)
    obj = c.subscribe("dc/s")
elif what == "follow":
    prod.put("dc/f", np.zeros(4, np.uint8))
    obj = c.follow("dc/f")
elif what == "watch":
    obj = c.watch("dc/w")
elif what == "pair":
    # two rings of two clients, ended in one statement (no bytecode
    # boundary between their closes)
    c2 = tensord.Client(sock)
    obj = (c.ring_create("dc/p1", (4,), "u8", slots=3),
           c2.ring_create("dc/p2", (4,), "u8", slots=3))
elif what == "releases":
    # leases whose releases (sent without waiting) fill the socket's
    # buffer once the daemon is stopped: a send waits for room
    prod.put("dc/a", np.zeros(4, np.uint8))
    obj = [c.get("dc/a") for _ in range(3000)]
if kind.endswith("gc"):
    cycle = [obj]
    cycle.append(cycle)
    del cycle

inside = False
raised = threading.Event()
unraisable = []
sys.unraisablehook = lambda u: unraisable.append(
    [type(u.exc_value).__name__, repr(u.object)])


def handler(signum, frame):
    if not inside:
        return  # not inside the end yet: let be
    if what != "pair":
        raised.set()
    raise KeyboardInterrupt() if exc == "ki" else Raised("from the handler")


def kicker():
    main = threading.main_thread().ident
    while not raised.wait(0.05):
        signal.pthread_kill(main, signal.SIGINT)


signal.signal(signal.SIGINT, handler)
os.kill(pid, signal.SIGSTOP)
threading.Thread(target=kicker, daemon=True).start()
where = "in the end"  # raised by the statement that ends the object
out = {}
try:
    inside = True
    if kind.endswith("gc"):
        del obj
        where = "in the collection"
        gc.collect()
    elif kind.endswith("close"):
        obj.close()
    elif kind.endswith("calls"):
        for a in obj:
            a.release()
    else:
        del obj
    where = "right after"
    inside = False
    for _ in range(100000):
        pass
    where = "never raised"
except BaseException as e:
    inside = False
    raised.set()
    out["raised"] = type(e).__name__
out["where"] = where
out["stopped"] = stopped()
try:
    c.ls()
except tensord.Error as e:
    out["then"] = e.errno
if what == "pair":
    try:
        c2.ls()
    except tensord.Error as e:
        out["then2"] = e.errno
out["unraisable"] = unraisable
os.kill(pid, signal.SIGCONT)
print(json.dumps(out))
"""


def run_child(daemon, kind, exc):
    try:
        p = subprocess.run(
            [sys.executable, "-c", CHILD, daemon.sock,
             str(daemon.proc.pid), kind, exc],
            capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{kind}: the object's end never returned (a signal "
                    "could not end its wait)")
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", ["ring", "sub", "follow", "watch",
                                  "ring-gc", "watch-close"])
def test_ctrl_c_in_a_dealloc_close_raises_right_after(daemon, kind):
    """KeyboardInterrupt in a close that the object's end (or its
    close()) waits for is raised right after it (before, it was kept and
    never raised: the Ctrl-C lost), the daemon still stopped; the connection is abandoned
    (ECONNABORTED), nothing goes to sys.unraisablehook."""
    out = run_child(daemon, kind, "ki")
    assert out.get("raised") == "KeyboardInterrupt", out
    assert out["where"] in ("in the end", "right after",
                            "in the collection"), out
    assert out["stopped"], out
    assert out.get("then") == errno_of("ECONNABORTED"), out
    assert out["unraisable"] == [], out


@pytest.mark.parametrize("kind", ["sub", "follow-gc"])
def test_any_handler_exception_in_a_dealloc_close_raises_right_after(
        daemon, kind):
    """Another exception (a SIGTERM handler's SystemExit, one of the
    program's own) is raised there too, as the handler's raise would
    have been a moment later: never lost, never reported twice."""
    out = run_child(daemon, kind, "raised")
    assert out.get("raised") == "Raised", out
    assert out["where"] in ("in the end", "right after",
                            "in the collection"), out
    assert out["stopped"], out
    assert out.get("then") == errno_of("ECONNABORTED"), out
    assert out["unraisable"] == [], out


@pytest.mark.parametrize("kind", ["releases", "releases-calls"])
def test_ctrl_c_in_a_send_the_full_buffer_holds(daemon, kind):
    """Releases sent without waiting to a stopped daemon fill the
    socket's buffer: the send that waits for room runs the handlers too
    (libtensord's TD_INTR_SEND), and KeyboardInterrupt is raised right
    after the array's end (del of the list) or release() (before, Ctrl-C
    did nothing there: the send waited until the daemon read). None of
    that release was sent (a datagram is queued whole or not at all); the
    connection is abandoned, which ends the leases."""
    out = run_child(daemon, kind, "ki")
    assert out.get("raised") == "KeyboardInterrupt", out
    assert out["where"] in ("in the end", "right after"), out
    assert out["stopped"], out
    assert out.get("then") == errno_of("ECONNABORTED"), out
    assert out["unraisable"] == [], out
    with tensord.Client(daemon.sock) as other:
        while other.stat("dc/a").lease_count:
            with pytest.raises(tensord.Timeout):
                other.get("dc/a", newer_than=1 << 62, timeout=0.01)


def test_two_closes_in_one_statement_raise_once(daemon):
    """Two clients' rings freed in one statement (a tuple), SIGINT coming
    all along: the first close's KeyboardInterrupt waits for the next
    bytecode boundary, which is the next handler's (in the second close's
    wait), so it ends that wait too and is raised once right after; both
    connections are abandoned, nothing goes to sys.unraisablehook."""
    out = run_child(daemon, "pair", "ki")
    assert out.get("raised") == "KeyboardInterrupt", out
    assert out["where"] in ("in the end", "right after"), out
    assert out["stopped"], out
    assert out.get("then") == errno_of("ECONNABORTED"), out
    assert out.get("then2") == errno_of("ECONNABORTED"), out
    assert out["unraisable"] == [], out


def errno_of(name):
    import errno
    return getattr(errno, name)
