#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""producer: publish a 3x4 float32 tensor under a name, COUNT times.

    producer.py NAME [COUNT]

Version i (0-based) holds i * 100 + r * 4 + c at (r, c), so a consumer can
check what it got. The bytes are written straight into pages the daemon
lent (Client.alloc); publishing hands those very pages to every reader.
A loop of frames takes the stream's loans (stream=True: the publish lends
the next one) and keeps their mappings (private=False: each array turns
read-only at publish, and the next frame in the same buffer needs no new
mapping or page fault; docs/python.md, "Lifetime").
The socket is $TENSORD_SOCKET, else the default.
"""
import sys

import numpy as np
import tensord


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(f"usage: {sys.argv[0]} NAME [COUNT]")
    name = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) == 3 else 1
    with tensord.Client() as client:
        for i in range(count):
            # writable, the loan; read-only once published
            a = client.alloc(name, (3, 4), "f32", stream=True,
                             private=False)
            a[:] = np.arange(12, dtype=np.float32).reshape(3, 4) + i * 100
            version = client.publish(a, metadata=f"frame {i}")
            print(f"published {name} version {version}")


if __name__ == "__main__":
    main()
