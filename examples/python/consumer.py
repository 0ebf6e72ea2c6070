#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""consumer: wait for a tensor newer than a version, read it in place.

    consumer.py NAME [AFTER_VERSION [TIMEOUT_S]]

Prints the version, shape, metadata and the sum of the elements. The
array is a read-only view of the very pages the producer wrote; the lease
taken by get() keeps them unchanged until release() (or until the array
and every view of it are gone), even if the producer publishes a newer
version or deletes the name meanwhile.
"""
import sys

import tensord


def main():
    if not 2 <= len(sys.argv) <= 4:
        sys.exit(f"usage: {sys.argv[0]} NAME [AFTER_VERSION [TIMEOUT_S]]")
    name = sys.argv[1]
    after = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    timeout = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
    with tensord.Client() as client:
        try:
            with client.get(name, newer_than=after, timeout=timeout) as a:
                print(f"{name} version {a.version} shape {a.shape} "
                      f"dtype {a.dtype_name} metadata {a.metadata!r} "
                      f"sum {a.sum():g}")
        except tensord.Timeout:
            sys.exit(f"consumer: nothing newer than {after} in {timeout} s")


if __name__ == "__main__":
    main()
