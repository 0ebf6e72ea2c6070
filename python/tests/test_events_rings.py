# SPDX-License-Identifier: MIT
"""Watches, fileno()/poll() for event loops, rings and subscriptions."""
import asyncio
import errno
import select
import threading
import time

import numpy as np
import pytest
import tensord

from conftest import InThread, need_torch


def readable(fd, timeout):
    return bool(select.select([fd], [], [], timeout)[0])


def test_watch_iterates_events_in_order(daemon, client):
    w = client.watch("ev/")
    with tensord.Client(daemon.sock) as other:
        v1 = other.put("ev/a", np.zeros(1))
        v2 = other.put("ev/a", np.ones(1))
        other.put("elsewhere", np.zeros(1))
        other.rm("ev/a")
    got = [next(w), next(w), next(w)]
    assert [(e.type, e.name, e.version) for e in got] == [
        ("published", "ev/a", v1), ("published", "ev/a", v2),
        ("deleted", "ev/a", v2)]
    assert all(e.watch_id == w.id for e in got)
    with pytest.raises(tensord.Timeout):
        w.next(0.05)
    w.close()
    with pytest.raises(ValueError):
        w.next(0)


def test_an_exact_watch_ignores_longer_names(daemon, client):
    with client.watch("ev/x", prefix=False) as w:
        client.put("ev/xy", np.zeros(1))
        v = client.put("ev/x", np.zeros(1))
        e = w.next(10)
        assert (e.name, e.version) == ("ev/x", v)


def test_two_watches_each_get_their_own_events(client):
    a = client.watch("a/")
    b = client.watch("b/")
    vb = client.put("b/1", np.zeros(1))
    va = client.put("a/1", np.zeros(1))
    assert a.next(10).version == va  # b's event is kept for b
    assert b.next(10).version == vb


def test_fileno_wakes_for_events_and_poll_drains(daemon, client):
    w = client.watch("fd/")  # noqa: F841 (the watch lives while w does)
    fd = client.fileno()
    assert client.poll() == []
    assert not readable(fd, 0)
    with tensord.Client(daemon.sock) as other:
        v = [other.put("fd/a", np.zeros(1)) for _ in range(3)]
    assert readable(fd, 10)
    got = []
    for _ in range(100):  # bounded: a poll() that never drains it fails
        if len(got) >= 3:
            break
        assert readable(fd, 10)
        got += client.poll()
    assert [e.version for e in got] == v
    assert client.poll() == []
    assert not readable(fd, 0)


def test_events_queued_during_another_call_still_wake_fileno(daemon,
                                                              client):
    w = client.watch("q/")  # noqa: F841
    fd = client.fileno()
    with tensord.Client(daemon.sock) as other:
        v = other.put("q/a", np.zeros(1))
    # this call reads the event off the socket while it waits for its own
    # reply: the socket is empty afterwards, fileno() must still wake
    client.stat("q/a")
    assert readable(fd, 0)
    assert [e.version for e in client.poll()] == [v]
    assert not readable(fd, 0)


def test_ring_handoff_in_place(client):
    ring = client.ring_create("rg/a", (2, 3), "i16", slots=3)
    sub = client.subscribe("rg/a")
    slot = ring.acquire(5)
    assert slot.flags.writeable and slot.shape == (2, 3)
    assert slot.dtype == np.int16
    slot[:] = [[1, 2, 3], [4, 5, 6]]
    v = ring.publish()
    view = sub.next(5)
    assert view.version == v and view.name == "rg/a"
    assert not view.flags.writeable
    with pytest.raises(ValueError):
        view[0, 0] = 9
    assert view.tolist() == [[1, 2, 3], [4, 5, 6]]
    # a GET of the ring's name leases its latest slot, with DLPack
    g = client.get("rg/a")
    assert g.version == v and g.tolist() == view.tolist()
    sub.release()
    # a released view's slot may be rewritten: no DLPack export of it
    with pytest.raises(BufferError, match="released"):
        view.__dlpack__()
    with pytest.raises(tensord.Timeout):
        sub.next(0)
    with pytest.raises(tensord.Error, match=r'no slot of ring "[^"]+" is '
                       r"acquired \(acquire\(\) first\)"):
        ring.publish()  # nothing acquired
    t = need_torch().from_dlpack(g)
    t.zero_()
    assert view.tolist() == [[1, 2, 3], [4, 5, 6]]
    assert g.tolist() == [[1, 2, 3], [4, 5, 6]]


def test_timeouts_are_keywords_as_documented(client):
    # docs/python.md: ring.acquire(timeout=None), sub.next(timeout=1),
    # and Watch.next(timeout=...) as its docstring says
    ring = client.ring_create("rg/kw", (4,), "u8", slots=3)
    sub = client.subscribe("rg/kw", timeout=5)
    w = client.watch("rg/kwt")
    slot = ring.acquire(timeout=None)
    slot[:] = 3
    del slot
    v = ring.publish()
    view = sub.next(timeout=1)
    assert view.version == v and view.tolist() == [3] * 4
    del view
    with pytest.raises(tensord.Timeout):
        sub.next(timeout=0)
    with pytest.raises(tensord.Timeout):
        w.next(timeout=0)
    client.put("rg/kwt", np.zeros(2))
    assert w.next(timeout=5).name == "rg/kwt"
    with pytest.raises(TypeError):
        sub.next(wait=1)
    w.close()
    sub.close()
    ring.close()


def test_a_producers_slot_shares_pages_with_subscribers(client):
    ring = client.ring_create("rg/b", (8,), "f32", slots=4)
    sub = client.subscribe("rg/b")
    slot = ring.acquire()
    t = need_torch().from_dlpack(slot)  # writable: the slot's pages
    t.fill_(2.5)
    ring.publish()
    assert sub.next(5).tolist() == [2.5] * 8


def test_a_published_slot_turns_read_only_for_its_producer(client):
    """After publish() the slot is the subscribers': the producer's array
    over it (and what it views, and its buffer) is read-only, as a
    published alloc(private=False) array is; a stale slot array used to
    change the bytes subscribers were reading."""
    ring = client.ring_create("rg/ro", (4,), "u8", slots=2)
    sub = client.subscribe("rg/ro", timeout=5)
    slot = ring.acquire()
    again = ring.acquire()  # before publish(): the same slot
    part = slot[1:]
    slot[:] = 7
    v = ring.publish()
    view = sub.next(timeout=5)
    assert view.version == v and list(view) == [7, 7, 7, 7]
    for a in (slot, again):
        assert not a.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            a[0] = 1
        with pytest.raises(ValueError):
            a.flags.writeable = True
        with pytest.raises(BufferError, match="published"):
            a.__dlpack__()
        assert memoryview(a).readonly
    assert not slot.lease.held
    assert list(view) == [7, 7, 7, 7]
    # a view taken before publish() keeps numpy's flag: documented trust
    assert part.flags.writeable
    view.release()
    # the next acquire() is writable again
    nxt = ring.acquire()
    assert nxt.flags.writeable
    nxt[:] = 9
    assert ring.publish() > v
    assert list(sub.next(timeout=5)) == [9, 9, 9, 9]


def test_subscribing_to_a_tensor_is_refused_not_waited_for(client):
    """subscribe() of a plain tensor's name waited for a ring to be made
    there, which cannot happen while the tensor has the name (one
    meaning per name): for ever without a timeout, on a user's mistake.
    It is refused at once now, as follow() of a ring is."""
    client.put("er/t", np.zeros(4, np.float32))
    for timeout in (0, 10, None):
        with pytest.raises(tensord.Error,
                           match="is a tensor, not a ring") as ei:
            client.subscribe("er/t", timeout=timeout)
        assert ei.value.errno == errno.EINVAL
        del ei
    # a ring's name still subscribes, waiting for it to come or not
    r = client.ring_create("er/r", (4,), "f32")
    assert client.subscribe("er/r", timeout=0).name == "er/r"
    r.close()


def test_iterating_a_subscription_ends_when_the_producer_closes(client):
    ring = client.ring_create("rg/c", (1,), "u32")
    sub = client.subscribe("rg/c")
    s = ring.acquire()
    s[0] = 7
    del s
    ring.publish()
    ring.close()
    got = [int(v[0]) for v in sub]
    assert got == [7]


def test_a_ring_whose_client_closed_makes_no_version(daemon, client):
    # the client's close ends the ring in the daemon: acquire() and
    # publish() (of a slot acquired before, or of none: not "acquire()
    # first") raise ENOTCONN, and a subscriber gets the last version
    # made before, then the end (docs/python.md, "Rings")
    c = tensord.Client(daemon.sock)
    ring = c.ring_create("rg/cc", (1,), "u32", slots=2)
    idle = c.ring_create("rg/cc-idle", (1,), "u32", slots=2)
    sub = client.subscribe("rg/cc")
    s = ring.acquire()
    s[0] = 5
    del s
    ring.publish()
    ring.acquire()[0] = 6
    c.close()
    for call in (ring.publish, lambda: ring.acquire(timeout=0),
                 idle.publish):
        with pytest.raises(tensord.Error) as e:
            call()
        assert e.value.errno == errno.ENOTCONN, e.value
    assert [int(v[0]) for v in sub] == [5]
    ring.close()
    idle.close()


def test_a_subscription_waiting_for_ever_ends_when_the_daemon_dies(
        daemon, client):
    # the daemon's SIGKILL while the producer (this client) lives: the
    # ring itself goes on, but nothing would mark it closed any more, so
    # next(timeout=None) ends in EPIPE within a second or so instead of
    # waiting for ever (docs/python.md, "Rings")
    ring = client.ring_create("rg/k", (4,), "u8", slots=2)
    sub = client.subscribe("rg/k", timeout=5)

    def put(b):
        s = ring.acquire(timeout=1)
        s[:] = b
        del s
        return ring.publish()
    v1 = put(1)
    assert sub.next(timeout=1).version == v1
    daemon.kill()
    v2 = put(2)  # the producer's slots are shared memory: it goes on
    x = sub.next(timeout=0)
    assert x.version == v2 and x[0] == 2
    del x
    t = InThread(lambda: sub.next(timeout=None))
    t.inside(0)
    t.finish(timeout=15)
    assert isinstance(t.error, tensord.Error), t.error
    assert t.error.errno == errno.EPIPE, t.error
    put(3)
    with pytest.raises(tensord.Error) as e:
        sub.next(timeout=0)  # gone for good
    assert e.value.errno == errno.EPIPE


def test_subscription_poll_wakes_fileno(daemon, client):
    ring = client.ring_create("rg/p", (4,), "u8")
    sub = client.subscribe("rg/p")
    fd = client.fileno()
    assert sub.poll() is None  # starts the waiter
    client.poll()
    assert not readable(fd, 0.05)
    s = ring.acquire()
    s[:] = 3
    del s
    v = ring.publish()
    assert readable(fd, 10)
    view = None
    for _ in range(100):  # bounded: a poll() that never takes it fails
        client.poll()
        view = sub.poll()
        if view is not None:
            break
        assert readable(fd, 10)
    assert view is not None
    assert view.version == v and view.tolist() == [3] * 4
    view.release()
    # next() works in poll mode too; one that slept (the publish then
    # woke its futex, not the poll fd) wakes fileno() on its return, so
    # that the loop's next poll() arms the waiter again
    assert sub.poll() is None  # armed, the fd drained
    client.poll()
    assert not readable(fd, 0.05)
    t = InThread(lambda: sub.next(10))
    time.sleep(0.2)  # asleep in next()
    s = ring.acquire()
    s[:] = 4
    del s
    v2 = ring.publish()
    w = t.finish().result
    assert w.version == v2 and w.tolist() == [4] * 4
    assert readable(fd, 10)
    assert sub.poll() is None
    sub.close()
    ring.close()


def test_a_closed_subscription_with_a_live_view_leaves_fileno_quiet(
        client):
    # close() is deferred while a view of its slots lives, but its
    # timerfd left fileno() at once: the next publish made it readable
    # for good (nobody poll()s a closed subscription), and an asyncio
    # loop spun until the view died
    ring = client.ring_create("rg/cl", (4,), "u8")
    sub = client.subscribe("rg/cl")
    fd = client.fileno()
    assert sub.poll() is None  # waits by fd: its timerfd in fileno()
    s = ring.acquire()
    s[:] = 1
    del s
    ring.publish()
    assert readable(fd, 10)
    view = sub.poll()
    assert view is not None and view.tolist() == [1] * 4
    assert sub.poll() is None  # armed again
    sub.close()  # deferred: view lives
    s = ring.acquire()
    s[:] = 2
    del s
    ring.publish()
    assert client.poll() == []
    assert not readable(fd, 0.2)
    assert view.tolist() in ([1] * 4, [2] * 4)  # still mapped
    del view
    ring.close()


def test_ring_errors_name_the_ring_and_what_happened(client):
    # libtensord's ring calls fill no reason: these said strerror's
    # "Connection timed out" and "Broken pipe", of no ring in particular
    ring = client.ring_create("rg/why", (4,), "u8")
    sub = client.subscribe("rg/why")
    with pytest.raises(tensord.Timeout) as ei:
        sub.next(timeout=0.05)
    assert ei.value.errno == errno.ETIMEDOUT
    assert ei.value.reason == 'no new version of ring "rg/why" within 50 ms'
    s = ring.acquire()
    del s
    v = ring.publish()
    with pytest.raises(tensord.Timeout) as ei:
        ring.wait_read(v, timeout=0.05)
    assert ei.value.reason == (f"no read of version {v} by every "
                               'subscriber of ring "rg/why" within 50 ms')
    assert sub.next(timeout=5).version == v
    sub.release()
    ring.close()
    with pytest.raises(tensord.Error) as ei:
        sub.poll()
    assert ei.value.errno == errno.EPIPE
    assert ei.value.reason.startswith('the ring "rg/why" is closed')
    sub.close()


def test_a_watch_that_took_the_last_event_leaves_fileno_quiet(daemon,
                                                              client):
    # Watch.next() took its event out of the queue that wakes fileno(),
    # but left the wake-up: an event loop's reader then ran for nothing
    w = client.watch("wq/")
    with tensord.Client(daemon.sock) as prod:
        prod.put("wq/a", np.zeros(2, np.uint8))
    assert w.next(timeout=10).name == "wq/a"
    assert not readable(client.fileno(), 0.2)
    # so did closing a watch whose events were queued: they went with it
    with tensord.Client(daemon.sock) as prod:
        prod.put("wq/b", np.zeros(2, np.uint8))
        prod.stat("wq/b")  # the event was sent before this reply
    client.stat("wq/b")  # and read into libtensord's queue meanwhile
    other = client.watch("wq-other/")
    with pytest.raises(tensord.Timeout):
        other.next(timeout=0)  # hands wq/b's event to w's share
    assert readable(client.fileno(), 10)
    w.close()
    assert not readable(client.fileno(), 0.2)
    assert client.poll() == []


def test_one_subscription_is_not_used_by_two_threads_at_once(client):
    ring = client.ring_create("rg/t", (1,), "u8")
    sub = client.subscribe("rg/t")
    t = InThread(lambda: sub.next(30))
    # until the waiter is inside next() this thread times out; once it
    # waits there (GIL released) this thread is refused, never let in
    saw = False
    for _ in range(10000):
        try:
            sub.next(0)
        except RuntimeError:
            saw = True
            break
        except tensord.Timeout:
            time.sleep(0.001)
    assert saw
    s = ring.acquire()
    del s
    ring.publish()
    t.finish()
    assert t.error is None and t.result.version == 1
    sub.close()
    ring.close()


def test_asyncio_drives_a_watch_and_a_subscription_through_add_reader(
        daemon, client):
    ring = client.ring_create("as/r", (4,), "u32", slots=4)
    sub = client.subscribe("as/r")
    watch = client.watch("as/t/")
    producer = tensord.Client(daemon.sock)
    events, frames = [], []

    async def main():
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def on_readable():
            events.extend(client.poll())
            while (view := sub.poll()) is not None:
                frames.append((view.version, view.tolist()))
            if (len(events) == 3 and frames and frames[-1][0] == 3
                    and not done.done()):
                done.set_result(None)

        loop.add_reader(client.fileno(), on_readable)
        threads = threading.active_count()
        assert sub.poll() is None  # waits by fd from now: no thread
        assert threading.active_count() == threads

        async def produce():
            for k in (1, 2, 3):
                await asyncio.sleep(0.01)
                producer.put(f"as/t/{k}", np.full(2, k, np.int8))
                slot = ring.acquire(5)
                slot[:] = k
                del slot
                ring.publish()

        task = asyncio.ensure_future(produce())
        try:
            await asyncio.wait_for(done, 30)
        finally:
            loop.remove_reader(client.fileno())
        await task

    asyncio.run(main())
    assert [(e.type, e.name, e.watch_id) for e in events] == [
        ("published", f"as/t/{k}", watch.id) for k in (1, 2, 3)]
    assert [client.stat(e.name).version for e in events] == [
        e.version for e in events]
    # the latest version, never a torn or repeated one
    assert [v for v, _ in frames] == sorted({v for v, _ in frames})
    assert frames[-1] == (3, [3] * 4)
    assert all(vals == [v] * 4 for v, vals in frames)
    producer.close()
    watch.close()
    sub.close()
    ring.close()


def test_a_waiting_watch_does_not_hold_the_client(client):
    watch = client.watch("wt/")
    t = InThread(lambda: watch.next(30))
    time.sleep(0.05)  # let it wait (the test holds either way)
    # this thread's calls on the same client go on meanwhile
    v = client.put("wt/x", np.zeros(3, np.uint8))
    assert client.stat("wt/x").version == v
    t.finish()
    assert t.error is None
    assert (t.result.name, t.result.version) == ("wt/x", v)
    watch.close()


def test_wait_read_returns_once_every_subscriber_read_and_released(client):
    # docs/python.md: ring.wait_read(version, timeout=None)
    ring = client.ring_create("rg/ls", (4,), "u8", slots=2)
    sub = client.subscribe("rg/ls", timeout=5)
    slot = ring.acquire(timeout=5)
    slot[:] = 1
    del slot
    v = ring.publish()
    with pytest.raises(tensord.Timeout):
        ring.wait_read(v, timeout=0)  # not taken yet
    view = sub.next(timeout=1)
    with pytest.raises(tensord.Timeout):
        ring.wait_read(v, timeout=0)  # held
    del view
    sub.release()
    assert ring.wait_read(v, timeout=0) is None
    # a version the ring has not published: a wrong value, saying so
    with pytest.raises(ValueError, match=f"not published version {v + 1}"):
        ring.wait_read(v + 1)
    with pytest.raises(TypeError):
        ring.wait_read()
    sub.close()
    ring.close()


def test_a_lock_step_producer_thread_makes_the_subscriber_see_every_version(
        client):
    n = 300
    ring = client.ring_create("rg/lstep", (16,), "u8", slots=2)
    sub = client.subscribe("rg/lstep", timeout=5)
    seen = []

    def consume():
        for view in sub:
            seen.append((view.version, int(view[0])))
            del view
            sub.release()

    t = threading.Thread(target=consume)
    t.start()
    for i in range(1, n + 1):
        slot = ring.acquire(timeout=5)
        slot[:] = i % 256
        del slot
        v = ring.publish()
        ring.wait_read(v, timeout=10)
    ring.close()
    t.join(10)
    assert not t.is_alive()
    assert seen == [(i, i % 256) for i in range(1, n + 1)]
    sub.close()


def test_wait_read_refuses_versions_that_are_not_u64(client):
    ring = client.ring_create("rg/lsv", (4,), "u8", slots=2)
    for bad, exc in ((-1, OverflowError), (2**64 + 1, OverflowError),
                     (1.0, TypeError), ("1", TypeError)):
        with pytest.raises(exc):
            ring.wait_read(bad, timeout=0)
    ring.close()


def test_a_close_asked_during_wait_read_is_carried_out_after_it(client):
    # close() from another thread while wait_read waits: deferred, then
    # done when the wait ends (the subscriber sees the ring closed)
    ring = client.ring_create("rg/lsc", (4,), "u8", slots=2)
    sub = client.subscribe("rg/lsc", timeout=5)
    slot = ring.acquire(timeout=5)
    del slot
    v = ring.publish()
    t = threading.Thread(target=lambda: time.sleep(0.2) or ring.close())
    t.start()
    with pytest.raises(tensord.Timeout):
        ring.wait_read(v, timeout=1)  # nobody reads: the wait times out
    t.join(60)
    assert not t.is_alive(), "the close did not return"
    view = sub.next(timeout=1)  # the version published before the close
    assert view.version == v
    del view
    with pytest.raises(tensord.Error) as e:
        sub.next(timeout=5)
    assert e.value.errno == errno.EPIPE
    sub.close()


def test_a_watch_waiting_for_ever_ends_when_another_thread_closes(client):
    # close() is deferred while a call is in; a Watch can deliver nothing
    # on a closed client, so its wait must end rather than wait for an
    # event that may never come (it waited in poll() with no limit)
    watch = client.watch("wc/")
    t = InThread(lambda: watch.next())
    t.inside()
    client.close()
    t.finish(timeout=10)
    assert isinstance(t.error, ValueError) and "closed" in str(t.error)


def test_an_old_connections_watch_leaves_the_new_ones_alone(daemon, client):
    # watch ids are per connection: the watch of a client connected again
    # may have the id of a watch of the earlier connection, whose close
    # (or garbage collection) must not UNWATCH it, nor take its events
    old = client.watch("wr/a")
    client.close()
    client.__init__(daemon.sock)
    new = client.watch("wr/b")
    assert new.id == old.id  # the collision this is about
    with tensord.Client(daemon.sock) as prod:
        v = prod.put("wr/b", np.zeros(1, np.uint8))
        with pytest.raises(ValueError, match="connected again"):
            old.next(timeout=1)
        old.close()
        del old
        w = prod.put("wr/b", np.ones(1, np.uint8))
    got = [new.next(timeout=5), new.next(timeout=5)]
    assert [(e.name, e.version) for e in got] == [("wr/b", v), ("wr/b", w)]
    new.close()
