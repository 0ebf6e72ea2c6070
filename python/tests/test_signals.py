"""Long waits end on a signal handler's exception (Ctrl-C): get(newer_than=)
without a deadline, get(name, timeout=s) for a name that does not exist
yet, Subscription.next(), Ring.acquire() and Ring.wait_read() without a
deadline, and subscribe() to a ring to come, as Follow.next() and
Watch.next() do (docs/python.md, "Errors"). Each waits in slices with
the GIL released, between which Python's handlers run."""

import errno
import os
import signal
import threading

import numpy as np
import pytest
import tensord

from conftest import InThread


class Interrupted(Exception):
    pass


def interrupted(wait, feed):
    """Call wait() with a SIGALRM handler that raises after 0.2 s; a
    watchdog thread calls feed() every 15 s, so a wait deaf to signals
    ends (and the test fails) rather than hangs. What feed() had done
    when the handler ran: 0 means the handler did not wait for it."""
    fed = []

    def handler(signum, frame):
        raise Interrupted(len(fed))

    def watchdog():
        while not done.wait(15):
            feed()
            fed.append(1)

    done = threading.Event()
    dog = InThread(watchdog)
    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(Interrupted) as ei:
            wait()
        return ei.value.args[0]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        done.set()
        dog.finish()


def test_get_newer_than_without_deadline_ends_on_a_signal(client, daemon):
    with tensord.Client(daemon.sock) as prod:
        v = prod.put("sg/a", np.zeros(8, np.uint8))
        assert interrupted(lambda: client.get("sg/a", newer_than=v),
                           lambda: prod.put("sg/a", np.ones(8, np.uint8))) \
            == 0, "the handler waited for a version"
    # the client goes on: the version there, and timeouts as before
    assert client.get("sg/a").version >= v
    with pytest.raises(tensord.Timeout):
        client.get("sg/a", newer_than=client.get("sg/a").version,
                   timeout=0.05)


def test_get_of_a_name_to_come_ends_on_a_signal(client, daemon):
    with tensord.Client(daemon.sock) as prod:
        assert interrupted(lambda: client.get("sg/b", timeout=60),
                           lambda: prod.put("sg/b", np.ones(4, np.uint8))) \
            == 0, "the handler waited for the name"
    with pytest.raises(tensord.NotFound):
        client.get("sg/never", timeout=0)
    with pytest.raises(tensord.Timeout):
        client.get("sg/never", timeout=0.05)


def test_subscription_next_without_deadline_ends_on_a_signal(client):
    ring = client.ring_create("sg/r", (4,), "u8", slots=3)
    sub = client.subscribe("sg/r")

    def feed():
        ring.acquire(5)[:] = 1
        ring.publish()

    assert interrupted(lambda: sub.next(timeout=None), feed) == 0, \
        "the handler waited for a version"
    with pytest.raises(tensord.Timeout):
        sub.next(0)
    feed()
    assert sub.next(5).tolist() == [1, 1, 1, 1]


def test_ring_acquire_without_deadline_ends_on_a_signal(client):
    # every slot in use (one held by the subscriber, one the latest):
    # acquire() waits on libtensord's futex, which no signal ends
    ring = client.ring_create("sg/ra", (4,), "u8", slots=2)
    sub = client.subscribe("sg/ra", timeout=5)
    ring.acquire(5)[:] = 1
    ring.publish()
    held = sub.next(5)
    ring.acquire(5)[:] = 2
    ring.publish()
    assert interrupted(lambda: ring.acquire(timeout=None),
                       lambda: sub.next(5)) == 0, \
        "the handler waited for a slot"
    # the ring goes on
    del held
    sub.next(5)  # gives the held slot back
    ring.acquire(5)[:] = 3
    v = ring.publish()
    assert sub.next(5).version == v


def test_ring_wait_read_without_deadline_ends_on_a_signal(client):
    ring = client.ring_create("sg/rw", (4,), "u8", slots=3)
    sub = client.subscribe("sg/rw", timeout=5)
    ring.acquire(5)[:] = 1
    v = ring.publish()

    def feed():
        sub.next(5)
        sub.release()

    assert interrupted(lambda: ring.wait_read(v, timeout=None), feed) \
        == 0, "the handler waited for the subscriber"
    feed()
    ring.wait_read(v, timeout=5)


def test_subscribe_to_a_ring_to_come_ends_on_a_signal(client, daemon):
    rings = []
    with tensord.Client(daemon.sock) as prod:
        assert interrupted(
            lambda: client.subscribe("sg/rs", timeout=None),
            lambda: rings.append(prod.ring_create("sg/rs", (4,), "u8"))) \
            == 0, "the handler waited for the ring"
        # NotFound at once for timeout=0, Timeout after a deadline
        with pytest.raises(tensord.NotFound):
            client.subscribe("sg/never", timeout=0)
        with pytest.raises(tensord.Timeout, match="within 50 ms"):
            client.subscribe("sg/never", timeout=0.05)
        for r in rings:
            r.close()


def test_a_request_to_a_stopped_daemon_ends_on_a_signal(client, daemon):
    """A request the daemon does not answer (stopped with SIGSTOP, or
    wedged) ends on a signal handler's exception (Ctrl-C) too: the wait
    for its reply gives up, and the connection with it (the reply would
    come to nobody): every later call raises tensord.Error ECONNABORTED,
    the daemon ends the connection's leases, a new Client works."""
    client.put("sg/st", np.zeros(4, np.uint8))
    x = client.get("sg/st")
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    try:
        assert interrupted(lambda: client.stat("sg/st"),
                           lambda: os.kill(daemon.proc.pid,
                                           signal.SIGCONT)) == 0, \
            "the handler waited for the daemon's reply"
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    for call in (lambda: client.ls(), lambda: client.get("sg/st")):
        with pytest.raises(tensord.Error, match="connection broken") as ei:
            call()
        assert ei.value.errno == errno.ECONNABORTED
    np.testing.assert_array_equal(x, np.zeros(4, np.uint8))  # still mapped
    with tensord.Client(daemon.sock) as other:
        # the abandoned connection's lease ends once the daemon reads
        # its hang-up, after the reply it had to send
        while other.stat("sg/st").lease_count:
            with pytest.raises(tensord.Timeout):
                other.get("sg/st", newer_than=1 << 62, timeout=0.01)
        assert other.get("sg/st").tolist() == [0, 0, 0, 0]
    client.close()
    client.__init__(daemon.sock)  # connecting again works
    assert client.stat("sg/st").lease_count == 0
