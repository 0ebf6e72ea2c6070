# SPDX-License-Identifier: MIT
"""A closed Watch's events never come out afterwards, whoever takes
events meanwhile (another thread's poll() or Watch.next())."""
import gc
import threading
import time

import numpy as np
import pytest
import tensord


def closed(w):
    """Whether w's close() has begun (a probe that may take one event)."""
    try:
        w.next(0)
    except tensord.Timeout:
        pass
    except ValueError:
        return True
    return False


def test_a_watch_closed_during_another_threads_poll_gives_nothing_after(
        daemon):
    """close() takes the watch's events out at once, and those delivered
    later are dropped. Before, they stayed queued for the UNWATCH round
    trip, in which close() lets the GIL go: a poll() another thread made
    then, once next() already said the watch was closed, still gave
    them. Each round one thread closes a watch with events waiting while
    the other polls until it sees the close."""
    rounds = 300
    with tensord.Client(daemon.sock) as c, \
            tensord.Client(daemon.sock) as other:
        go, done = threading.Event(), threading.Event()
        cur, bad, after = {}, [], [0]

        def poller():
            while True:
                go.wait()
                go.clear()
                w = cur.get("w")
                if w is None:
                    return
                while True:
                    was_closed = closed(w)
                    got = c.poll()
                    if was_closed:
                        after[0] += 1
                        bad.extend(e for e in got if e.watch_id == w.id)
                        break
                done.set()

        t = threading.Thread(target=poller)
        t.start()
        try:
            for i in range(rounds):
                w = c.watch(f"x{i}/")
                for _ in range(4):
                    other.put(f"x{i}/a", np.zeros(1))
                c.stat(f"x{i}/a")  # its events are read off the socket
                cur["w"] = w
                go.set()
                w.close()
                done.wait()
                done.clear()
        finally:
            cur["w"] = None
            go.set()
            t.join()
        assert after[0] == rounds
        assert bad == []


def test_a_watch_closed_while_another_thread_waits_in_it(daemon):
    """Its next() ends with ValueError, and gives none of its events
    after the close."""
    with tensord.Client(daemon.sock) as c:
        for i in range(3):
            w = c.watch(f"y{i}/")
            res = []

            def wait():
                try:
                    res.append(w.next(10))
                except ValueError as e:
                    res.append(e)

            t = threading.Thread(target=wait)
            t.start()
            time.sleep(0.05)  # (likely) in its wait: closed either way
            w.close()
            t.join()
            assert len(res) == 1 and isinstance(res[0], ValueError)


def test_a_watch_closed_by_a_collection_during_delivery(daemon):
    """Making an Event may run a garbage collection, whose callbacks or
    finalizers may close the very watch the event is for: the event is
    then dropped, not queued after the close."""
    with tensord.Client(daemon.sock) as c:
        bad = []
        for i in range(20):
            w = c.watch(f"g{i}/")
            with tensord.Client(daemon.sock) as other:
                for _ in range(20):
                    other.put(f"g{i}/a", np.zeros(1))
            c.stat(f"g{i}/a")  # its events wait in libtensord
            state = {"closed": False}

            def close_it(phase, info):
                if phase == "start" and not state["closed"]:
                    state["closed"] = True
                    w.close()

            threshold = gc.get_threshold()
            gc.callbacks.append(close_it)
            gc.set_threshold(1)
            try:
                got = c.poll()  # delivers them, collecting meanwhile
            finally:
                gc.callbacks.remove(close_it)
                gc.set_threshold(*threshold)
            assert state["closed"]
            bad.extend(e for e in got if e.watch_id == w.id)
        assert bad == []
