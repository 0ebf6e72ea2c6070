#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""asyncio_watcher: watch a prefix and a ring from an asyncio loop.

    asyncio_watcher.py PREFIX EVENTS [RING LAST_VERSION]

Client.fileno() polls readable when a watch event or a subscription's
next view is ready; the reader callback drains both without blocking
(Client.poll(), Subscription.poll()). Prints each event and each frame,
and stops after EVENTS events and, with a ring, once the frame with
LAST_VERSION arrived. Prints "ready" once it is watching. A daemon that
goes away ends it with the tensord.Error it raised.
"""
import asyncio
import sys

import tensord


async def main(prefix, events, ring, last):
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    with tensord.Client() as client:
        watch = client.watch(prefix)
        sub = client.subscribe(ring, timeout=10) if ring else None
        state = {"events": 0, "frame": 0 if ring else last}

        def on_readable():
            try:
                drain()
            except tensord.Error as e:
                # the daemon went away: a broken connection keeps
                # fileno() readable, and a reader left registered would
                # run again at once, for ever
                loop.remove_reader(client.fileno())
                if not done.done():
                    done.set_exception(e)

        def drain():
            for ev in client.poll():
                print(f"event {ev.type} {ev.name} {ev.version}", flush=True)
                state["events"] += 1
            while sub is not None:
                view = sub.poll()
                if view is None:
                    break
                print(f"frame {view.version} sum {int(view.sum())}",
                      flush=True)
                state["frame"] = view.version
                view.release()
            if (state["events"] >= events and state["frame"] >= last
                    and not done.done()):
                done.set_result(None)

        loop.add_reader(client.fileno(), on_readable)
        if sub is not None:
            sub.poll()  # waits by fd from now (joins client.fileno())
        print("ready", flush=True)
        try:
            await asyncio.wait_for(done, 60)
        finally:
            # before close(): the fd's number is free then, and a loop
            # still holding it would not watch the next fd of that number
            loop.remove_reader(client.fileno())
            watch.close()
            if sub is not None:
                sub.close()


if __name__ == "__main__":
    if len(sys.argv) not in (3, 5):
        sys.exit(f"usage: {sys.argv[0]} PREFIX EVENTS [RING LAST_VERSION]")
    ring = sys.argv[3] if len(sys.argv) == 5 else None
    last = int(sys.argv[4]) if ring else 0
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), ring, last))
