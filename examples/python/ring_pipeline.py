#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""ring_pipeline: a producer process and a subscriber streaming frames.

    ring_pipeline.py NAME FRAMES

The parent creates the ring (1 MiB uint8 frames, 4 slots) and starts a
subscriber process (this script with --subscribe), then fills FRAMES
frames in place: frame v holds the byte v % 251 everywhere. The
subscriber reads each view in place and checks it; rings deliver the
latest frame, so a slow reader skips some and says how many it saw. No
message reaches the daemon per frame.
"""
import subprocess
import sys
import time

import numpy as np
import tensord

SHAPE = (1024, 1024)


def subscribe(name):
    with tensord.Client() as client:
        sub = client.subscribe(name, timeout=10)
        seen = 0
        for view in sub:  # ends when the producer closes the ring
            want = view.version % 251
            if view[0, 0] != want or view[-1, -1] != want:
                sys.exit(f"frame {view.version}: torn or wrong bytes")
            seen += 1
            last = view.version
            sub.release()
        print(f"subscriber: {seen} frames, last version {last}")


def produce(name, frames):
    with tensord.Client() as client:
        ring = client.ring_create(name, SHAPE, np.uint8, slots=4)
        child = subprocess.Popen([sys.executable, __file__, "--subscribe",
                                  name])
        while client.ring_stat(name)["subscribers"] == 0:
            if child.poll() is not None:
                sys.exit("subscriber died")
            time.sleep(0.01)
        for v in range(1, frames + 1):
            slot = ring.acquire()  # a writable view of a free slot
            slot.fill(v % 251)
            del slot
            if ring.publish() != v:
                sys.exit("versions are not 1, 2, 3, ...")
        ring.close()
        return child.wait()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--subscribe":
        subscribe(sys.argv[2])
    elif len(sys.argv) == 3:
        sys.exit(produce(sys.argv[1], int(sys.argv[2])))
    else:
        sys.exit(f"usage: {sys.argv[0]} NAME FRAMES")
