# SPDX-License-Identifier: MIT
"""Client(event_limit=N): the binding's bounded queue of watch events and
the 'overflowed' Events that count what it (or libtensord) dropped."""
import gc
import os
import threading
import time

import numpy as np
import pytest
import tensord


def put_n(sock, name, n):
    with tensord.Client(sock) as other:
        return [other.put(name, np.zeros(1)) for _ in range(n)]


def arrived(client, name):
    """Every event sent so far is read off the socket (into libtensord's
    queue): the daemon sent them before this call's reply."""
    client.stat(name)


def lost(events, watch_id=None):
    return sum(e.version for e in events if e.type == "overflowed"
               and (watch_id is None or e.watch_id == watch_id))


def drain(w):
    got = []
    while True:
        try:
            got.append(w.next(0))
        except tensord.Timeout:
            return got


def test_no_bound_by_default_and_nothing_dropped(daemon, client):
    assert client.event_limit == 0
    w = client.watch("d/")
    v = put_n(daemon.sock, "d/a", 200)
    arrived(client, "d/a")
    got = []
    for _ in range(100):
        if len(got) >= 200:
            break
        got += client.poll()
    assert [(e.type, e.version, e.watch_id) for e in got] == [
        ("published", x, w.id) for x in v]


def test_poll_gets_the_bound_then_the_count_of_the_rest(daemon):
    with tensord.Client(daemon.sock, event_limit=3) as c:
        assert c.event_limit == 3
        w = c.watch("p/")
        v = put_n(daemon.sock, "p/a", 10)
        arrived(c, "p/a")
        got = c.poll()
        assert [(e.type, e.name, e.version, e.watch_id) for e in got] == [
            ("published", "p/a", v[0], w.id),
            ("published", "p/a", v[1], w.id),
            ("published", "p/a", v[2], w.id),
            ("overflowed", "", 7, w.id)]
        assert c.poll() == []
        # drained: room again, and nothing more reported lost
        v = put_n(daemon.sock, "p/a", 2)
        arrived(c, "p/a")
        assert [(e.type, e.version) for e in c.poll()] == [
            ("published", v[0]), ("published", v[1])]


def test_each_watch_sees_what_it_lost(daemon):
    with tensord.Client(daemon.sock, event_limit=2) as c:
        a = c.watch("a/")
        b = c.watch("b/")
        va = put_n(daemon.sock, "a/1", 3)
        vb = put_n(daemon.sock, "b/1", 3)
        arrived(c, "b/1")
        got_a = drain(a)
        assert [(e.type, e.version, e.watch_id) for e in got_a] == [
            ("published", va[0], a.id), ("published", va[1], a.id),
            ("overflowed", 1, a.id)]
        # the bound is each watch's: a's two took none of b's room
        assert [(e.type, e.version, e.watch_id) for e in drain(b)] == [
            ("published", vb[0], b.id), ("published", vb[1], b.id),
            ("overflowed", 1, b.id)]
        assert c.poll() == []
        v = put_n(daemon.sock, "b/1", 1)
        arrived(c, "b/1")
        assert [(e.type, e.version) for e in drain(b)] == [
            ("published", v[0])]


def test_poll_sees_every_watchs_loss(daemon):
    with tensord.Client(daemon.sock, event_limit=2) as c:
        a = c.watch("a/")
        b = c.watch("b/")
        put_n(daemon.sock, "a/1", 3)
        put_n(daemon.sock, "b/1", 3)
        arrived(c, "b/1")
        got = c.poll()
        # in arrival order, each watch's overflow Event where its first
        # drop came
        assert [(e.type, e.watch_id) for e in got] == [
            ("published", a.id), ("published", a.id), ("overflowed", a.id),
            ("published", b.id), ("published", b.id), ("overflowed", b.id)]
        assert lost(got, a.id) == 1 and lost(got, b.id) == 1


def test_a_watch_nobody_reads_drops_only_its_own_events(daemon):
    """The bound is each watch's: a watch nobody reads keeps at most
    event_limit of its events and drops the rest, counted for it; the
    other watches keep receiving theirs (before, the bound was the
    client's and the unread watch's events took all of it)."""
    with tensord.Client(daemon.sock, event_limit=4) as c:
        busy = c.watch("busy/")
        mine = c.watch("mine/")
        put_n(daemon.sock, "busy/x", 10)
        arrived(c, "busy/x")
        with pytest.raises(tensord.Timeout):
            mine.next(0)  # takes busy's 10 into the queue: 4 kept
        for _ in range(3):
            v = put_n(daemon.sock, "mine/y", 4)
            arrived(c, "mine/y")
            assert [(e.type, e.version, e.watch_id) for e in drain(mine)
                    ] == [("published", x, mine.id) for x in v]
        assert [(e.type, e.version) for e in drain(busy)] == [
            ("published", x) for x in range(1, 5)] + [("overflowed", 6)]


def test_poll_keeps_receiving_while_a_watch_is_not_read(daemon):
    """poll() takes every watch's events in arrival order; a watch whose
    share is full drops only its own."""
    with tensord.Client(daemon.sock, event_limit=2) as c:
        busy = c.watch("busy/")
        q = c.watch("q/")
        with tensord.Client(daemon.sock) as other:
            for _ in range(5):
                other.put("busy/x", np.zeros(1))
            arrived(c, "busy/x")
            with pytest.raises(tensord.Timeout):
                q.next(0)  # busy's share full, the rest counted
            order = []
            for i in range(4):
                name = "q/y" if i % 2 else "busy/x"
                order.append((name, other.put(name, np.zeros(1))))
            arrived(c, "q/y")
        got = c.poll()
        assert [(e.type, e.name, e.watch_id) for e in got] == [
            ("published", "busy/x", busy.id)] * 2 + [
            ("overflowed", "", busy.id)] + [
            ("published", "q/y", q.id)] * 2
        assert [e.version for e in got if e.watch_id == q.id] == [
            v for n, v in order if n == "q/y"]
        assert lost(got, busy.id) == 5


def test_the_queue_holds_at_most_the_limit_of_each_open_watch(daemon):
    """(open watches) x event_limit Events, and one overflow Event per
    watch: a closed watch's events come no more."""
    with tensord.Client(daemon.sock, event_limit=3) as c:
        ws = [c.watch(f"m{i}/") for i in range(4)]
        gone = c.watch("m3/")
        gone.close()
        for i in range(4):
            put_n(daemon.sock, f"m{i}/x", 10)  # 40 < 4 x 3 + 64
        arrived(c, "m3/x")
        got = c.poll()
        assert len(got) == 4 * (3 + 1)
        for w in ws:
            mine = [e for e in got if e.watch_id == w.id]
            assert [e.type for e in mine] == ["published"] * 3 + [
                "overflowed"]
            assert lost(mine) == 7
        assert gone.id not in [e.watch_id for e in got]


def test_libtensords_own_overflow_reaches_poll_and_every_watch(daemon):
    """Events that come during another call wait in libtensord, bounded
    to (open watches) x event_limit + 64; what it drops there has no
    watch yet: every Watch open is told (it may have been theirs),
    poll() once."""
    with tensord.Client(daemon.sock, event_limit=1) as c:
        a = c.watch("a/")
        b = c.watch("b/")
        put_n(daemon.sock, "a/1", 100)
        arrived(c, "a/1")  # reads all 100 while it waits: 2 + 64 kept
        got_b = drain(b)
        assert [(e.type, e.version, e.watch_id) for e in got_b] == [
            ("overflowed", 34, b.id)]
        got_a = drain(a)
        assert [(e.type, e.version, e.watch_id) for e in got_a] == [
            ("overflowed", 34, a.id), ("published", 1, a.id),
            ("overflowed", 65, a.id)]
        assert [(e.type, e.version, e.watch_id) for e in c.poll()] == [
            ("overflowed", 34, 0)]
        # a watch made afterwards was not open then
        later = c.watch("a/")
        with pytest.raises(tensord.Timeout):
            later.next(0)


def test_a_busy_name_nobody_reads_stays_bounded(daemon):
    with tensord.Client(daemon.sock, event_limit=5) as c:
        busy = c.watch("g/")  # never read
        quiet = c.watch("quiet/")
        total = 0
        with tensord.Client(daemon.sock) as other:
            for _ in range(40):
                for _ in range(50):
                    other.put("g/x", np.zeros(1))
                total += 50
                arrived(c, "g/x")
                with pytest.raises(tensord.Timeout):
                    quiet.next(0)  # hands libtensord's queue over
        got = c.poll()
        # the bound, and one overflow Event counting the rest
        assert [(e.type, e.watch_id) for e in got] == [
            ("published", busy.id)] * 5 + [("overflowed", busy.id)]
        assert lost(got) == total - 5


def test_event_limit_can_be_changed_and_checked(daemon, client):
    w = client.watch("s/")
    client.event_limit = 2
    assert client.event_limit == 2
    put_n(daemon.sock, "s/a", 5)
    arrived(client, "s/a")
    got = client.poll()
    assert [e.type for e in got] == ["published"] * 2 + ["overflowed"]
    assert lost(got, w.id) == 3
    client.event_limit = 0  # no bound again
    put_n(daemon.sock, "s/a", 80)
    arrived(client, "s/a")
    got = []
    for _ in range(100):
        if len(got) >= 80:
            break
        got += client.poll()
    assert [e.type for e in got] == ["published"] * 80
    with pytest.raises(OverflowError):
        client.event_limit = -1
    with pytest.raises(OverflowError):
        client.event_limit = 2 ** 32
    with pytest.raises(TypeError):
        client.event_limit = "3"
    with pytest.raises(TypeError):
        tensord.Client(daemon.sock, event_limit=1.5)
    with pytest.raises(AttributeError):
        del client.event_limit
    assert client.event_limit == 0
    client.close()
    with pytest.raises(ValueError):
        client.event_limit = 3


def test_event_fields_say_what_an_overflow_is():
    assert "overflowed" in tensord.Event.type.__doc__
    assert "dropped" in tensord.Event.version.__doc__


def test_events_without_memory_are_counted_not_lost(daemon, client):
    """An Event the binding finds no memory for (nor for an overflow
    Event of its watch) is counted for no watch known: every Watch and
    poll() are told once there is memory again."""
    testcapi = pytest.importorskip("_testcapi")
    w = client.watch("n/")
    other = client.watch("m/")
    put_n(daemon.sock, "n/x", 3)
    arrived(client, "n/x")
    with pytest.raises((MemoryError, tensord.Timeout)):
        testcapi.set_nomemory(0)  # every Python allocation fails
        try:
            w.next(0)  # hands the 3 over: none can be kept
        finally:
            testcapi.remove_mem_hooks()
    assert [(e.type, e.version, e.watch_id) for e in drain(w)] == [
        ("overflowed", 3, w.id)]
    assert [(e.type, e.version, e.watch_id) for e in drain(other)] == [
        ("overflowed", 3, other.id)]
    assert [(e.type, e.version, e.watch_id) for e in client.poll()] == [
        ("overflowed", 3, 0)]


def test_a_closed_watchs_events_give_their_room_back(daemon):
    """Nobody but poll() could take a closed watch's events: they go
    with it, also those still in libtensord's queue, and the bound is
    the other watches' again."""
    with tensord.Client(daemon.sock, event_limit=3) as c:
        gone = c.watch("gone/")
        stays = c.watch("stays/")
        put_n(daemon.sock, "gone/x", 3)
        arrived(c, "gone/x")
        with pytest.raises(tensord.Timeout):
            stays.next(0)  # gone's 3 fill the queue
        put_n(daemon.sock, "gone/x", 2)
        arrived(c, "gone/x")  # 2 more in libtensord's queue
        gone.close()
        assert c.poll() == []
        v = put_n(daemon.sock, "stays/y", 3)
        arrived(c, "stays/y")
        assert [(e.type, e.version) for e in drain(stays)] == [
            ("published", x) for x in v]


def test_reconnects_leave_a_bounded_queue_room_for_the_watches(
        daemon, monkeypatch):
    """TENSORD_RECONNECT=1: each reconnect is told to poll() as one
    'reconnected' Event outside the bound, which no Watch takes; counted
    in it, a few restarts filled the bound for good and every watch's
    events were dropped."""
    monkeypatch.setenv("TENSORD_RECONNECT", "1")
    with tensord.Client(daemon.sock, event_limit=2) as c:
        w = c.watch("r/")
        for _ in range(3):
            daemon.kill()
            os.unlink(daemon.sock)
            daemon.start()
            with pytest.raises(tensord.Error):
                c.stat("r/a")  # the call during which it went
            with pytest.raises(tensord.NotFound):
                c.stat("r/a")  # connects again, watches again
        v = put_n(daemon.sock, "r/a", 2)
        arrived(c, "r/a")
        assert [(e.type, e.version, e.watch_id) for e in drain(w)] == [
            ("published", v[0], w.id), ("published", v[1], w.id)]
        # the latest reconnect, once, with the watches it made again
        assert [tuple(e) for e in c.poll()] == [("reconnected", "", 1, 0)]
        assert c.poll() == []


def test_threads_taking_events_at_once_keep_each_watchs_order(daemon):
    """Two threads whose calls deliver events at once (each Watch.next()
    runs td_client_process) took them from libtensord's queue in order,
    but each then waited for the GIL to queue its own: the later event
    could be queued first, and a watch's versions came out of order. A
    gc callback that lets the GIL go while one thread queues an event
    makes that wait long here."""
    n = 100
    with tensord.Client(daemon.sock) as c:
        ws = [c.watch("o/"), c.watch("o/")]
        got = {w.id: [] for w in ws}

        def slow_gc(phase, info):
            if phase == "start":
                time.sleep(0.001)  # the GIL goes to the other thread

        def take(w):
            for _ in range(n):
                got[w.id].append(w.next(10).version)

        threshold = gc.get_threshold()
        threads = [threading.Thread(target=take, args=(w,)) for w in ws]
        for t in threads:
            t.start()
        gc.callbacks.append(slow_gc)
        gc.set_threshold(1)
        try:
            v = put_n(daemon.sock, "o/x", n)
            for t in threads:
                t.join()
        finally:
            gc.callbacks.remove(slow_gc)
            gc.set_threshold(*threshold)
        for w in ws:
            assert got[w.id] == v


def test_calls_hand_events_over_so_libtensord_drops_for_nobody(daemon):
    """After each call the binding takes what libtensord queued during
    it, so a watch nobody reads does not pile up there, past (open
    watches) x event_limit + 64, between two poll()s: before, calls
    without a poll() in between made libtensord drop the other watches'
    events too (each told 'overflowed')."""
    with tensord.Client(daemon.sock, event_limit=5) as c:
        busy = c.watch("busy/")
        quiet = c.watch("quiet/")
        with tensord.Client(daemon.sock) as other:
            for _ in range(10):
                for _ in range(50):  # fewer than 2 x 5 + 64 a call
                    other.put("busy/x", np.zeros(1))
                arrived(c, "busy/x")
            v = other.put("quiet/y", np.zeros(1))
            arrived(c, "quiet/y")
        assert [(e.type, e.version) for e in drain(quiet)] == [
            ("published", v)]
        got = drain(busy)
        assert [e.type for e in got] == ["published"] * 5 + ["overflowed"]
        assert lost(got) == 495
