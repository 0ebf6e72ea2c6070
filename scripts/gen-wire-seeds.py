#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write tests/data/wire-seeds/: one well-formed datagram (32-byte header +
body) per message body of docs/protocol.md, built from the byte tables there
(not from proto/wire.c), so test-wire cross-checks the two. File name =
<body kind>.bin; test-wire decodes each with that kind's decoder and the
fuzz-wire replay starts from them. Re-run after a protocol change:
    python3 scripts/gen-wire-seeds.py tests/data/wire-seeds
"""
import os
import struct
import sys

MAGIC = 0x31574454
OPS = dict(HELLO=1, ALLOC=2, PUBLISH=3, GET=4, RELEASE=5, LIST=6, STAT=7,
           DELETE=8, WATCH=9, UNWATCH=10, RING_SUBSCRIBE=12, STAGE_PAGE=20,
           PUBLISH_MANY=21, GET_MANY=22, NOTIFY=0x100)
F_REPLY, F_NOTIFY = 1, 2


def u32(v): return struct.pack('<I', v)
def i32(v): return struct.pack('<i', v)
def u64(v): return struct.pack('<Q', v)
def s(t): b = t.encode(); return struct.pack('<H', len(b)) + b
def by(b): return struct.pack('<I', len(b)) + b


def hdr(op, flags, body, fds=0, req=1, status=0):
    return struct.pack('<IHHIIQIi', MAGIC, 1, OPS[op], flags, fds, req,
                       len(body), status) + body


def fdents(ents):
    return u32(len(ents)) + b''.join(i32(f) + u64(b) for f, b in ents)


def entry(name, ver, shape, meta=b'', flags=0):
    return (s(name) + u64(ver) + u32(9) + u32(len(shape)) +
            b''.join(u64(d) for d in shape) + u64(4096) + u32(1) +
            u32(flags) + by(meta))


CAT_KINDS, ENT_RING = 1, 2
# recyclable loans (docs/fastpath.md, "Recycled loans")
ALLOC_RECYCLE, CAT_RECYCLE, ENT_RECYCLE = 2, 2, 4
ALLOC_NAMED = 0x40  # TD_WIRE_ALLOC_NAMED (docs/protocol.md §6.2)
# staged publishes (§13): PUBLISH's LOAN, STAGE, FIRED; ALLOC's REWRITE,
# STAGE
PUB_LOAN, PUB_STAGE, PUB_FIRED = 0x2, 0x8, 0x10
# a publish with a condition (§6.3, "A publish with a condition")
PUB_PIN, PUB_IF = 0x1, 0x20
ALLOC_REWRITE, ALLOC_STAGE = 0x8, 0x80


# A small reference-mode blob is not needed for the codec: blob bytes are
# opaque to wire (the daemon decodes them). Use a recognisable filler.
BLOB = bytes(range(72))

SEEDS = {
    'hello_req': hdr('HELLO', 0, u32(0) + i32(3) + s('seed')),
    'hello_rep': hdr('HELLO', F_REPLY, u32(100) + u32(1) + u32(1) + i32(4) +
                     u32(65536) + u32(16) + u32(255) + u32(16384) + u32(8) +
                     u64(0) + s('tensord 0.1.0'), fds=1),
    'alloc_req': hdr('ALLOC', 0, u32(0) + u32(2) + u64(4096) + u64(8192)),
    'alloc_rep': hdr('ALLOC', F_REPLY, u64(1) + fdents([(7, 1), (8, 2)])),
    'publish_req': hdr('PUBLISH', 0, s('cam/0') + u32(0) + u64(0) +
                       by(b'{}') + by(BLOB) + u32(1) + i32(5), fds=1),
    'publish_rep': hdr('PUBLISH', F_REPLY, u64(1)),
    'get_req': hdr('GET', 0, s('cam/0') + u32(2) + u32(1) + u64(1) +
                   u32(100)),
    'get_rep': hdr('GET', F_REPLY, u64(1) + u64(1) + by(b'{}') + by(BLOB) +
                   fdents([(9, 1)])),
    'release_req': hdr('RELEASE', 0, u64(1)),
    'list_req': hdr('LIST', 0, s('cam/') + s('')),
    'list_rep': hdr('LIST', F_REPLY, u32(2) + u32(1) +
                    entry('cam/0', 1, [2, 3], b'm') + entry('cam/1', 2, [])),
    'name_req': hdr('STAT', 0, s('cam/0')),
    'entry': hdr('STAT', F_REPLY, entry('cam/0', 3, [480, 640, 3])),
    'watch_req': hdr('WATCH', 0, s('cam/') + u32(1)),
    'watch_rep': hdr('WATCH', F_REPLY, u64(1)),
    'unwatch_req': hdr('UNWATCH', 0, u64(1)),
    'notify': hdr('NOTIFY', F_NOTIFY, u64(1) + u32(1) + u64(4) + s('cam/0'),
                  req=0),
    'delete_rep': hdr('DELETE', F_REPLY, u64(4)),
    'delete_req': hdr('DELETE', 0, s('cam/0') + u64(4)),
    'error': hdr('GET', F_REPLY, s('no tensor named "cam/9"'), status=-2),
    # rings in the catalogue (§6.6): the optional flags, the RING bit
    'stat_req': hdr('STAT', 0, s('cam/0') + u32(CAT_KINDS)),
    'list_req_kinds': hdr('LIST', 0, s('cam/') + s('') + u32(CAT_KINDS)),
    'entry_ring': hdr('STAT', F_REPLY, entry('cam/frames', 5, [480, 640, 3],
                                             flags=ENT_RING)),
    'list_rep_ring': hdr('LIST', F_REPLY, u32(2) + u32(0) +
                         entry('cam/0', 1, [2, 3], b'm') +
                         entry('cam/frames', 0, [64], flags=ENT_RING)),
    # recyclable loans (§6.2): the optional held ids, a recycled plane
    # (fd -1), the CAT_RECYCLE request bit and the RECYCLE entry flag
    'alloc_req_recycle': hdr('ALLOC', 0, u32(ALLOC_RECYCLE) + u32(2) +
                             u64(4096) + u64(8192) + u32(2) + u64(7) +
                             u64(9)),
    'alloc_rep_recycled': hdr('ALLOC', F_REPLY, u64(3) +
                              fdents([(-1, 7), (8, 12)])),
    'stat_req_recycle': hdr('STAT', 0, s('cam/0') +
                            u32(CAT_KINDS | CAT_RECYCLE)),
    'entry_recycle': hdr('STAT', F_REPLY, entry('cam/0', 6, [64, 64],
                                                flags=ENT_RECYCLE | 1)),
    # SCM consumers (§6.4): GET with the optional held ids (with the SCM
    # flag), and its reply leaving the held buffer out (fd -1) while the
    # fence stays attached
    # a named alloc (§6.2, ALLOC_NAMED): the name right after the sizes,
    # before the optional held ids
    'alloc_req_named': hdr('ALLOC', 0, u32(ALLOC_RECYCLE | ALLOC_NAMED) +
                           u32(1) + u64(4096) + s('cam/0') + u32(1) +
                           u64(7)),
    # an unpublished alloc given up (§6.5, REL_QUIET | REL_ALLOC)
    'release_req_alloc': hdr('RELEASE', 0, u64(3) + u32(0x1 | 0x2)),
    'get_req_held': hdr('GET', 0, s('cam/0') + u32(0) + u32(1) + u64(0) +
                        u32(0) + u32(2) + u64(7) + u64(9)),
    'get_rep_held': hdr('GET', F_REPLY, u64(6) + u64(2) + by(b'') +
                        by(BLOB) + fdents([(-1, 7), (11, 13)]), fds=1),
    # staged publishes (§13): the notice of a fired stage, a reply that
    # stages the next loan (version 10, trigger page generation 2), the
    # trigger page asked for
    'publish_req_fired': hdr('PUBLISH', 0, s('cam/0') +
                             u32(PUB_LOAN | PUB_STAGE | PUB_FIRED) + u64(4) +
                             by(b'') + by(b'x') + u32(0)),
    'publish_rep_stage': hdr('PUBLISH', F_REPLY, u64(9) + u64(4) +
                             fdents([(-1, 8)]) + u64(10) + u32(2)),
    'stage_page_req': hdr('STAGE_PAGE', 0, s('cam/0') + u32(1)),
    # a subscribe that waits 5 s for its ring (§10, "Waiting for a ring")
    'ring_sub_req_wait': hdr('RING_SUBSCRIBE', 0, s('cam/0') + u32(0x5) +
                             u32(5000)),
    # a take-back that may be staged, and its reply with the stage
    'alloc_req_stage': hdr('ALLOC', 0, u32(ALLOC_RECYCLE | ALLOC_REWRITE |
                                           ALLOC_NAMED | ALLOC_STAGE) +
                           u32(1) + u64(4096) + s('cam/0')),
    'alloc_rep_stage': hdr('ALLOC', F_REPLY, u64(4) + fdents([(-1, 8)]) +
                           u64(10) + u32(2)),
    # several names in one step (§6.10): two PUBLISH bodies, the second
    # with its fence attached; their versions; two names leased at one
    # instant (SCM) and their two GET reply bodies
    'publish_many_req': hdr('PUBLISH_MANY', 0,
                            u32(2) + u32(0) +
                            by(s('cam/image') + u32(0) + u64(3) + by(b'') +
                               by(BLOB) + u32(0)) +
                            u32(2) +
                            by(s('cam/label') + u32(0) + u64(4) + by(b'') +
                               by(BLOB) + u32(2) + i32(-1) + i32(6)),
                            fds=2),
    # a publish with a condition (§6.3): only while the name has no
    # version (expect 0); only while it is at version 7, with the next
    # loan asked for: `expect` comes before the held ids
    'publish_req_if_absent': hdr('PUBLISH', 0, s('cam/0') +
                                 u32(PUB_PIN | PUB_IF) + u64(4) + by(b'') +
                                 by(BLOB) + u32(0) + u64(0)),
    'publish_req_if': hdr('PUBLISH', 0, s('cam/0') + u32(PUB_LOAN | PUB_IF) +
                          u64(4) + by(b'') + by(BLOB) + u32(1) + i32(-1) +
                          u64(7) + u32(1) + u64(9)),
    # PUBLISH_MANY elements with conditions (§6.10): all or none
    'publish_many_req_if': hdr('PUBLISH_MANY', 0,
                               u32(2) + u32(0) +
                               by(s('cam/image') + u32(PUB_IF) + u64(3) +
                                  by(b'') + by(BLOB) + u32(0) + u64(0)) +
                               u32(0) +
                               by(s('cam/label') + u32(PUB_PIN | PUB_IF) +
                                  u64(4) + by(b'') + by(BLOB) + u32(0) +
                                  u64(12))),
    'publish_many_rep': hdr('PUBLISH_MANY', F_REPLY, u32(2) + u64(11) +
                            u64(12)),
    'get_many_req': hdr('GET_MANY', 0, u32(1) + u32(2) + s('cam/image') +
                        s('cam/label')),
    # a GET_MANY that waits (TD_WIRE_MANY_NEWER): names[0] newer than
    # version 11, for up to 500 ms
    'get_many_req_newer': hdr('GET_MANY', 0, u32(0x1 | 0x2) + u32(2) +
                              s('cam/image') + s('cam/label') + u64(11) +
                              u32(500)),
    'get_many_rep': hdr('GET_MANY', F_REPLY, u32(2) +
                        by(u64(11) + u64(1) + by(b'') + by(BLOB) +
                           fdents([(9, 1)])) +
                        by(u64(12) + u64(2) + by(b'') + by(BLOB) +
                           fdents([(10, 2)])), fds=2),
}

if __name__ == '__main__':
    out = sys.argv[1] if len(sys.argv) > 1 else 'tests/data/wire-seeds'
    os.makedirs(out, exist_ok=True)
    for k, v in SEEDS.items():
        with open(os.path.join(out, k + '.bin'), 'wb') as f:
            f.write(v)
