"""Signal handlers inside a request the daemon answers late (a daemon
stopped with SIGSTOP): in Python's main thread they run during the wait
(docs/python.md, "Errors"). One that raises nothing (a SIGHUP reload, a
profiler's SIGALRM, asyncio's wake-up) leaves the request waiting and
the connection whole; one that raises ends the call with its exception,
at once. Inside such a handler the waiting call holds the client: a call
on the same client raises RuntimeError (it would wait for itself), and
what the handler lets go of (an array dropped, a collection's finalizers,
a ring closed) is given back once the call is out.

And no call waits for the client's lock with the GIL held: another
thread's call that holds it until a stopped daemon answers does not stall
the interpreter's other threads.

Every wait here is bounded: the daemon is sent SIGCONT after at most
RESUME_S whatever happens (by a process of its own where the GIL might be
held), so a regression fails instead of hanging."""

import errno
import gc
import os
import signal
import subprocess
import threading

import numpy as np
import pytest
import tensord

from conftest import InThread

RESUME_S = 20  # the hang breaker only: no test waits for it to pass


def daemon_stopped(pid):
    """Whether the daemon is stopped now (state T in /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")


class Stopped:
    """The daemon stopped while inside; SIGCONT at `resume` seconds from a
    timer thread (0: only at the end), and at RESUME_S from a process of
    its own (a regression that holds the GIL blocks every thread)."""

    def __init__(self, daemon, resume=0):
        self.pid, self.resume = daemon.proc.pid, resume

    def cont(self):
        os.kill(self.pid, signal.SIGCONT)

    def __enter__(self):
        os.kill(self.pid, signal.SIGSTOP)
        self.breaker = subprocess.Popen(
            ["sh", "-c", f"sleep {RESUME_S}; kill -CONT {self.pid}"])
        self.timer = None
        if self.resume:
            self.timer = threading.Timer(self.resume, self.cont)
            self.timer.start()
        return self

    def __exit__(self, *exc):
        if self.timer:
            self.timer.cancel()
        self.cont()
        self.breaker.kill()
        self.breaker.wait()


class Alarms:
    """handler on SIGALRM, fired 0.15 s in (past libtensord's 0.1 s of
    grace before a signal is asked about) and every `every` s after (0:
    once, for a handler that raises)."""

    def __init__(self, handler, every=0.05):
        self.handler, self.every = handler, every

    def __enter__(self):
        self.old = signal.signal(signal.SIGALRM, self.handler)
        signal.setitimer(signal.ITIMER_REAL, 0.15, self.every)
        return self

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.old)


def still_works(client, name):
    v = client.put(name, np.full(4, 7, np.uint8))
    assert client.get(name).version == v
    assert client.stat(name).version == v


def test_a_handler_that_raises_nothing_leaves_the_request_waiting(
        client, daemon):
    """A counting handler (SIGALRM) fires while get() waits for a stopped
    daemon: get() gives the tensor once the daemon goes on, and the
    client works after (before, the first signal cost the connection:
    tensord.Error EINTR, then ECONNABORTED)."""
    v = client.put("sh/a", np.arange(4, dtype=np.uint8))
    hits = []
    with Stopped(daemon, resume=0.6):
        with Alarms(lambda s, f: hits.append(s)):
            x = client.get("sh/a")
            during = len(hits)
    assert x.version == v and x.tolist() == [0, 1, 2, 3]
    assert during > 0, "no signal came while get() waited"
    still_works(client, "sh/a")
    # a SIGUSR1 handler too (the test's own timer handler is on SIGUSR1)
    usr = []
    old = signal.signal(signal.SIGUSR1, lambda s, f: usr.append(s))
    try:
        with Stopped(daemon, resume=0.6):
            kicker = threading.Timer(0.2, os.kill,
                                     (os.getpid(), signal.SIGUSR1))
            kicker.start()
            try:
                assert client.stat("sh/a").version >= v
            finally:
                kicker.cancel()
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert usr, "SIGUSR1 never came"
    still_works(client, "sh/a")


class Raised(Exception):
    pass


def test_a_handler_that_raises_ends_the_request_with_its_exception(
        client, daemon):
    """Its exception ends the call at once, while the daemon is still
    stopped (the connection is abandoned, as docs/python.md says)."""
    client.put("sh/r", np.zeros(4, np.uint8))

    def handler(signum, frame):
        raise Raised("from the handler")

    with Stopped(daemon) as st:
        with Alarms(handler, every=0):
            with pytest.raises(Raised, match="from the handler"):
                client.stat("sh/r")
        assert daemon_stopped(st.pid), "the call waited for the daemon"
    with pytest.raises(tensord.Error) as ei:
        client.ls()
    assert ei.value.errno == errno.ECONNABORTED


def test_a_call_on_the_same_client_from_the_handler_raises(client, daemon):
    """Inside the wait the call holds the client: the handler's calls on
    it raise RuntimeError at once (they waited for themselves for ever),
    calls on another client work, and the outer call goes on."""
    client.put("sh/c", np.arange(4, dtype=np.uint8))
    other = tensord.Client(daemon.sock)
    ring = client.ring_create("sh/cr", (4,), "u8", slots=2)
    fo = client.follow("sh/c")
    seen = []

    def handler(signum, frame):
        if seen:
            return
        for call in (client.ls, lambda: client.get("sh/c"),
                     lambda: client.put("sh/c", np.zeros(4, np.uint8)),
                     client.info, lambda: client.watch("sh/"),
                     lambda: ring.acquire(0), lambda: fo.poll()):
            try:
                call()
                seen.append(None)
            except RuntimeError as e:
                seen.append(e)

    with Stopped(daemon, resume=0.6):
        with Alarms(handler):
            x = client.get("sh/c")
    assert x.tolist() == [0, 1, 2, 3]
    assert seen, "the handler did not run"
    assert all(isinstance(e, RuntimeError) for e in seen), seen
    assert "signal handler" in str(seen[0])
    still_works(client, "sh/c")
    # another client is free to use from a handler
    got = []
    with Stopped(daemon, resume=0.6):
        with Alarms(lambda s, f: got or got.append(other.info())):
            assert client.stat("sh/c") is not None
    assert got and got[0]["daemon_pid"] == daemon.proc.pid
    ring.close()
    fo.close()
    # not caught: the handler's RuntimeError is the call's, at once
    with Stopped(daemon) as st:
        with Alarms(lambda s, f: client.ls(), every=0):
            with pytest.raises(RuntimeError, match="signal handler"):
                client.stat("sh/c")
        assert daemon_stopped(st.pid)
    assert other.stat("sh/c") is not None
    other.close()


class Cycle:
    pass


def test_what_the_handler_lets_go_of_is_given_back_after(client, daemon):
    """The handler drops the last reference to a lease, a collection it
    runs finalizes another (in a reference cycle), and it closes a ring:
    none of it waits for the client's lock (held by the call), none is
    lost: once the call is out the leases are given back and the ring is
    gone."""
    client.put("sh/d", np.arange(4, dtype=np.uint8))
    client.put("sh/e", np.arange(4, dtype=np.uint8))
    gc.disable()  # only the handler's collection finalizes the cycle
    try:
        held = [client.get("sh/d")]
        cyc = Cycle()
        cyc.me, cyc.lease = cyc, client.get("sh/e")
        del cyc
        ring = client.ring_create("sh/dr", (4,), "u8", slots=2)
        assert client.stat("sh/d").lease_count == 1
        assert client.stat("sh/e").lease_count == 1
        ran = []

        def handler(signum, frame):
            if ran:
                return
            held.clear()
            gc.collect()
            ring.close()
            ran.append(1)

        with Stopped(daemon, resume=0.6):
            with Alarms(handler):
                x = client.get("sh/d")
    finally:
        gc.enable()
    assert ran, "the handler did not run"
    assert x.tolist() == [0, 1, 2, 3]
    # x's lease only: the dropped one went back after the call
    assert client.stat("sh/d").lease_count == 1
    assert client.stat("sh/e").lease_count == 0
    with pytest.raises(tensord.NotFound):
        client.subscribe("sh/dr", timeout=0)
    still_works(client, "sh/d")


def test_a_call_waiting_for_the_lock_lets_other_threads_run(client, daemon):
    """A thread's call holds the client's lock until a stopped daemon
    answers; another thread's info() (which needs that lock) waits with
    the GIL released: a third thread keeps counting meanwhile, while the
    daemon is still stopped (before, the interpreter stalled until the
    daemon went on)."""
    client.put("sh/g", np.zeros(4, np.uint8))
    count = [0]
    done = threading.Event()

    def counter():
        while not done.is_set():
            count[0] += 1

    with Stopped(daemon) as st:
        holder = InThread(lambda: client.stat("sh/g"))
        holder.inside()
        waiter = InThread(client.info)
        waiter.inside()
        counting = InThread(counter)
        counting.inside()
        before = count[0]
        advanced = False
        for _ in range(200):
            if count[0] > before:
                advanced = daemon_stopped(st.pid)
                break
            done.wait(0.01)
        assert advanced, "no other thread ran while the daemon was stopped"
        st.cont()
        holder.finish()
        waiter.finish()
    done.set()
    counting.finish()
    assert holder.error is None and waiter.error is None
    assert waiter.result["daemon_pid"] == daemon.proc.pid


def test_connecting_to_a_stopped_daemon_ends_on_a_signal(client, daemon):
    """A stopped daemon accepts the connection and never says HELLO:
    Client() waits as any call does. A handler that raises ends it with
    its exception while the daemon is still stopped; one that raises
    nothing leaves it waiting, and it connects once the daemon goes on."""
    def handler(signum, frame):
        raise Raised("hello")

    with Stopped(daemon) as st:
        with Alarms(handler, every=0):
            with pytest.raises(Raised, match="hello"):
                tensord.Client(daemon.sock)
        assert daemon_stopped(st.pid), "Client() waited for the daemon"
    hits = []
    with Stopped(daemon, resume=0.6):
        with Alarms(lambda s, f: hits.append(s)):
            other = tensord.Client(daemon.sock)
            during = len(hits)
    assert during > 0, "no signal came while Client() waited"
    v = other.put("sh/h", np.ones(2, np.uint8))
    assert client.get("sh/h").version == v
    other.close()
