/* SPDX-License-Identifier: MIT */
/*
 * libtensord: the blocking client library of tensord.
 *
 * A producer publishes a named tensor whose bytes live in shared memory
 * (memfd or dma-buf); the daemon keeps it; consumers map the very same pages
 * read-only. Only a small description (the EdgeFirst tensor blob) and file
 * descriptors cross the socket, never the bytes.
 *
 * Conventions (all functions):
 *  - Return >= 0 on success, a negative errno on failure. Objects come back
 *    through a last-but-one `**out` parameter.
 *  - Every function that talks to the daemon takes an optional last
 *    `struct td_error *err`. On failure it receives the same -errno and a
 *    NUL-terminated reason: the daemon's own reason string when the daemon
 *    refused, or a short local description otherwise. Pass NULL when not
 *    interested. There is no per-handle or thread-local "last error", so
 *    concurrent callers never see each other's reasons.
 *  - A file descriptor passed in is borrowed: the library duplicates what it
 *    keeps. Everything the library opens is close-on-exec.
 *  - Threads: one struct td_client may be shared by any number of threads.
 *    Calls on one handle serialise on a mutex owned by the handle: a call
 *    that waits (td_client_get_newer(), td_client_next_event(),
 *    td_ring_subscribe() before its ring exists) blocks the
 *    other threads' calls on that handle for as long as it waits. Use one
 *    handle per waiting thread when that matters. Tensors and allocations
 *    may be used and released from any thread.
 *  - fork(): a handle, its tensors and loans belong to the process that
 *    made them; a child connects anew (the daemon checks the pid).
 *  - timeout_ms: 0 does not wait; any negative value (-1, -2, INT_MIN)
 *    waits for ever, as poll(2)'s does (docs/fastpath.md, "Timeouts").
 */
#ifndef TENSORD_TENSORD_H
#define TENSORD_TENSORD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TD_BUILDING_LIBTENSORD)
#define TD_EXPORT __attribute__((visibility("default")))
#else
#define TD_EXPORT
#endif

struct td_client;
struct td_tensor;
struct td_alloc;

/* Longest reason string a daemon sends, in bytes (without the NUL). */
#define TD_REASON_MAX 1024
/* Longest tensor name in bytes (without the NUL). */
#define TD_NAME_MAX 255
/* Most dimensions a LIST/STAT entry describes. */
#define TD_ENTRY_MAX_DIMS 16

/* Failure detail; see the conventions above. */
struct td_error {
	int code;                         /* the -errno also returned */
	char reason[TD_REASON_MAX + 1]; /* NUL-terminated, "" when none */
};

/* Element types: the blob dtype codes (specs/blob.md §11.2). */
enum td_tensor_dtype {
	TD_TENSOR_U8 = 0,
	TD_TENSOR_I8 = 1,
	TD_TENSOR_U16 = 2,
	TD_TENSOR_I16 = 3,
	TD_TENSOR_U32 = 4,
	TD_TENSOR_I32 = 5,
	TD_TENSOR_U64 = 6,
	TD_TENSOR_I64 = 7,
	TD_TENSOR_F16 = 8,
	TD_TENSOR_F32 = 9,
	TD_TENSOR_F64 = 10,
};

/* Element size in bytes of a dtype code, 0 when the code is unknown. */
TD_EXPORT unsigned td_tensor_dtype_size(uint32_t dtype);
/* Lower-case name of a dtype ("f32"), NULL when unknown. Static string. */
TD_EXPORT const char *td_tensor_dtype_name(uint32_t dtype);
/* dtype code of a lower-case name ("f32", or numpy's "float32"), -EINVAL
 * when unknown. */
TD_EXPORT int td_tensor_dtype_from_name(const char *name);

/* ---- connection ---- */

/* How descriptors cross between this client and the daemon. */
enum td_client_path {
	TD_CLIENT_PATH_PIDFD = 1, /* the receiver pulls with pidfd_getfd() */
	TD_CLIENT_PATH_SCM = 2,   /* the sender attaches them (SCM_RIGHTS) */
};

struct td_client_info {
	uint32_t daemon_pid;
	/* how the daemon receives this client's fds (enum td_client_path) */
	uint32_t path_in;
	/* how this client receives the daemon's fds (enum td_client_path) */
	uint32_t path_out;
	uint64_t max_bytes; /* the daemon's memory limit, 0 = none */
	char ident[64];     /* "tensord 0.1.0", NUL-terminated */
};

/*
 * Connect to the daemon and say HELLO. socket_path NULL (or "") picks, in
 * order, $TENSORD_SOCKET, $XDG_RUNTIME_DIR/tensord.sock,
 * /run/tensord/tensord.sock (each taken when set and not empty).
 *
 * Import negotiation: $TENSORD_IMPORT = auto (default) | pidfd | scm.
 * With auto the client pulls the daemon's fds with pidfd_getfd() when the
 * kernel lets it (probed at connect) and asks for SCM_RIGHTS otherwise;
 * with scm it always asks for SCM_RIGHTS; with pidfd it fails with -EPERM
 * when pulling is not possible in either direction.
 *
 * Returns 0 and a new handle in *out (free it with td_client_close()), or
 * -errno: -ENOENT/-ECONNREFUSED no daemon (a path that is no socket is
 * -ECONNREFUSED too, its reason saying what it is), -EINVAL bad
 * $TENSORD_IMPORT or out NULL, -ENAMETOOLONG a path that does not fit a
 * sockaddr_un (107 bytes), -EPERM forced pidfd impossible, -EPROTO.
 *
 * A connection belongs to the process that made it. A child of fork()
 * that inherits it shares the parent's socket: there every call that
 * talks to the daemon fails with -ECHILD, releasing a tensor or loan
 * sends nothing (the parent's leases stay), and td_client_close() only
 * frees the child's copy; the child connects on its own. Likewise an
 * inherited ring or subscription: td_ring_acquire(), td_ring_publish(),
 * td_ring_wait_read(), td_sub_next(), td_sub_poll(), td_sub_release(),
 * td_sub_fd() and td_sub_set_handler() return -ECHILD in the child, and
 * td_ring_close()/td_sub_close() free only its copy. What the child does
 * with its copy never changes what the parent's td_client_fd() polls.
 */
TD_EXPORT int td_client_connect(const char *socket_path,
				struct td_client **out, struct td_error *err);

/*
 * td_client_connect_ex() flag: reconnect by itself after the daemon went
 * away (a restart). The next call that finds the connection broken
 * connects again to the same socket path and says HELLO; if the daemon is
 * not back yet that call fails (-ECONNREFUSED, -ENOENT) and a later one
 * tries again. After a reconnect every watch is re-established (its id
 * stays the same) and the application is told by a
 * TD_EVENT_TYPE_RECONNECTED event (version: the watches restored);
 * asynchronous GETs that were waiting fail with -ECONNRESET; tensors,
 * loans, rings and subscriptions of the old connection stay mapped and
 * readable but belong to the old daemon: releasing them sends nothing,
 * publishing an old loan fails with -ECONNRESET, and rings are not made
 * again. The call during which the daemon went away still fails (its
 * request may or may not have been served). A blocking call reconnects
 * in place, waiting as td_client_connect() does; td_client_process() and
 * td_client_get_newer_async() never wait for the daemon: their reconnect
 * goes on in the background of the event loop (see td_client_process).
 * $TENSORD_RECONNECT=1 sets the flag for td_client_connect().
 */
#define TD_CLIENT_RECONNECT 0x1u

/* td_client_connect() with flags (0 or TD_CLIENT_RECONNECT; else -EINVAL). */
TD_EXPORT int td_client_connect_ex(const char *socket_path, uint32_t flags,
				   struct td_client **out,
				   struct td_error *err);

/*
 * Close the connection. The daemon drops this client's leases, watches and
 * unpublished allocations. Cached mappings are unmapped and their fds
 * closed at once; tensors and allocations still held stay valid (mapped)
 * until each is released, after which nothing of the client remains.
 * Accepts NULL. Must not race with calls on the same handle.
 */
TD_EXPORT void td_client_close(struct td_client *c);

/* Negotiated facts about the connection into *info. 0 or -EINVAL. */
TD_EXPORT int td_client_info(struct td_client *c, struct td_client_info *info);

/*
 * A descriptor for an event loop (poll, epoll, libuv's uv_poll_t, GLib,
 * asyncio's add_reader): it polls readable whenever there is something to
 * process, i.e. the daemon sent something or the handle holds queued
 * watch events or finished asynchronous GETs (including what arrived
 * while another call waited for its reply). It is an epoll descriptor
 * over the connection's socket and an eventfd the library keeps readable
 * while anything is queued, so level-triggered polling never misses
 * work. Borrowed: valid until td_client_close(); never read, write or
 * close it. After it polls readable, call td_client_process() (which
 * delivers to callbacks), or drain with td_client_next_event(c, 0, ...)
 * until -ETIMEDOUT when no event handler is set. Returns the fd, -EINVAL
 * for NULL, -ENOTCONN once the connection is closed.
 */
TD_EXPORT int td_client_fd(struct td_client *c);

struct td_event;
struct td_tensor;

/*
 * Called by td_client_process() for each watch event, in arrival order
 * and one thread at a time (see there), with no lock held: it may call
 * any function on the handle (blocking ones too). ev is valid during the
 * call only. Once a callback closed the handle, no handler is called for
 * the events and subscriptions left.
 */
typedef void (*td_event_fn)(struct td_client *c, const struct td_event *ev,
			    void *ud);

/*
 * Deliver watch events to fn from td_client_process() instead of queueing
 * them for td_client_next_event(); fn NULL restores the queue. Events
 * queued before the call are delivered to fn too. 0 or -EINVAL.
 */
TD_EXPORT int td_client_set_event_handler(struct td_client *c, td_event_fn fn,
					  void *ud);

/*
 * Called by td_client_process() for each asynchronous GET that finished,
 * in that order and one thread at a time (see there), with no lock held.
 * status 0: t is the tensor (the callback owns it: release it with
 * td_tensor_release() when done); otherwise t is NULL, status is the
 * -errno td_client_get_newer() would have returned (-ETIMEDOUT,
 * -ECONNRESET when the connection broke, -ECANCELED when the handle was
 * closed first) and err holds the reason. err is valid during the call.
 */
typedef void (*td_get_fn)(struct td_client *c, int status,
			  struct td_tensor *t, const struct td_error *err,
			  void *ud);

/*
 * td_client_get_newer() without waiting: sends the GET and returns at
 * once; the daemon parks it until a version newer than `after` is
 * published (or timeout_ms passes, < 0 = forever) and fn receives the
 * result from a later td_client_process(). A ring name is served the
 * same way (its latest slot, leased). Any number may be outstanding (the
 * daemon parks at most 256 per connection and refuses the rest with
 * -EAGAIN, delivered to fn). Returns 0, or -errno when the request could
 * not be sent (fn is then never called): -ENOTCONN also from a callback
 * that td_client_close() runs. With TD_CLIENT_RECONNECT and the
 * connection broken it begins a reconnect (as td_client_process does)
 * unless one is under way, fails when that fails at once (-ENOENT,
 * -ECONNREFUSED), else returns 0, the GET sent once the new daemon
 * answered HELLO, or fn gets the reconnect's failure (-ETIMEDOUT, ...;
 * -ECANCELED when the handle is closed first).
 */
TD_EXPORT int td_client_get_newer_async(struct td_client *c, const char *name,
					uint64_t after, int timeout_ms,
					td_get_fn fn, void *ud,
					struct td_error *err);

/*
 * Do what td_client_fd() polled readable for, without blocking: read what
 * the daemon sent (a bounded number of messages: the fd stays readable
 * when more are left), then call the callbacks: finished asynchronous
 * GETs, ring subscriptions' handlers, then watch events when a handler is
 * set. Each kind is made by one thread at a time: another thread's call
 * leaves it to that thread and returns at once (td_client_fd() is quiet
 * for it meanwhile), so a callback that waits for another of its kind
 * waits for ever; one that calls td_client_process() itself goes on with
 * the next GET or event. Returns the number of callbacks made (0 is fine:
 * the work may have been another thread's), or -errno when the connection
 * is broken (-ECONNRESET: the daemon went away), after delivering what
 * was queued and failing every outstanding asynchronous GET with that
 * status. A broken connection keeps td_client_fd() readable (hang-up).
 *
 * With TD_CLIENT_RECONNECT the next call begins a reconnect without
 * waiting for the daemon: a non-blocking connect() and HELLO sent; it
 * returns (>= 0) while the try is under way, and td_client_fd() polls
 * readable when the try can go on: the HELLO reply came, connect() is to
 * be tried again (a full listen queue refuses at once; again after 5 ms,
 * doubling up to 100 ms), or the deadline passed. The deadline is
 * $TENSORD_CONNECT_TIMEOUT_MS (default 20000, 0 none) for the whole try,
 * connect and HELLO together. The call that reads the HELLO reply sends
 * the WATCHes that make the watches again and the GETs that waited,
 * without waiting for their replies either; TD_EVENT_TYPE_RECONNECTED
 * is queued once the WATCH replies are in (at once without watches; the
 * call that reads the last reply gives it to the event handler), and
 * td_client_unwatch() of a watch whose reply is still to come waits for
 * it. A failed try returns its -errno: -ENOENT, -ECONNREFUSED (no
 * daemon), -ETIMEDOUT (the deadline: "PATH did not answer HELLO within N
 * ms", or "nobody took the connection within N ms": a full queue), or
 * the daemon's refusal; then td_client_fd() polls readable only when the
 * next try is due (10 ms on, doubling up to a second) or something is
 * queued (a call woken before fails with the broken connection's -errno).
 * A blocking call on the handle meanwhile drops the try under way and
 * reconnects at once, waiting, as before.
 */
TD_EXPORT int td_client_process(struct td_client *c, struct td_error *err);

/* ---- producing ---- */

/* A plane: where its bytes sit inside one of the buffers. */
struct td_plane {
	uint32_t buffer; /* index into the buffers (fds or alloc planes) */
	uint64_t offset; /* byte offset inside that buffer */
	/* bytes per line; 0: for an image (format set) its rows packed
	 * (or at the row dimension's stride in td_publish.strides), else
	 * the plane's size (not an image) */
	uint64_t stride;
	uint64_t size;   /* bytes of the plane */
};

#define TD_PUBLISH_PIN 0x1u   /* the daemon never evicts this version */
#define TD_PUBLISH_FENCE 0x2u /* fence_fd is an acquire fence to attach */
/* modifiers holds a DRM format modifier per plane (dma-buf planes only:
 * the daemon refuses one on a memfd); without it every plane is linear */
#define TD_PUBLISH_MODIFIERS 0x4u
/* only while the name's current version is if_version (0: it has none),
 * checked where the daemon commits: -EEXIST (0, and it has one), -ESTALE
 * (another or none); -EOPNOTSUPP, nothing sent, without TD_WIRE_FEAT_PUB_IF
 * (docs/protocol.md §6.3, "A publish with a condition") */
#define TD_PUBLISH_IF 0x8u

/*
 * What to publish. Zero-initialise, then set what applies: a zeroed
 * struct means no quantization, dense C-order strides, no strings, no
 * metadata, no fence.
 */
struct td_publish {
	const char *name; /* tensor name, see docs/protocol.md */
	uint32_t flags;   /* TD_PUBLISH_*; other bits -EINVAL */
	uint32_t dtype;   /* enum td_tensor_dtype */
	uint32_t ndim;
	const uint64_t *shape;
	/* ndim byte strides; NULL = dense C order, but an image's (format
	 * set) row dimension at planes[0].stride when that is set (blob
	 * spec §8.1: the row pitch) */
	const int64_t *strides;
	/* quantization: used only when quant_scale_count > 0 */
	int32_t quant_axis; /* -1 per tensor, >= 0 per channel */
	uint32_t quant_scale_count;
	const float *quant_scales;
	uint32_t quant_zero_point_count; /* 0 = symmetric */
	const int32_t *quant_zero_points;
	/* blob strings (specs/blob.md §5); NULL = "" */
	const char *format;
	const char *color_space;
	const char *color_transfer;
	const char *color_encoding;
	const char *color_range;
	/* planes; plane_count 0 = one plane per buffer covering all of it */
	uint32_t plane_count;
	const struct td_plane *planes;
	/* td_client_publish() only: the caller's buffers (memfd/dma-buf) */
	uint32_t fd_count;
	const int *fds;
	int fence_fd; /* with TD_PUBLISH_FENCE: polled for POLLIN by readers */
	const void *meta; /* opaque user metadata, copied (NULL: -EINVAL
			   * unless meta_len is 0) */
	size_t meta_len;
	/* with TD_PUBLISH_MODIFIERS (read only then, so a caller built
	 * before this field passes none): one per plane (plane_count, or
	 * one per buffer when that is 0), e.g. from Vulkan's
	 * vkGetImageDrmFormatModifierPropertiesEXT; 0 = linear. Readers see
	 * it in td_tensor_plane_modifier() and never read such a plane as
	 * rows (blob spec §6.1) */
	const uint64_t *modifiers;
	/* with TD_PUBLISH_IF (read only then, as modifiers) */
	uint64_t if_version;
};

/*
 * Publish the caller's own buffers (p->fds, borrowed): memfds made with
 * MFD_ALLOW_SEALING and sealed F_SEAL_SHRINK (else -EINVAL naming the
 * seal: a buffer that could shrink under a reader's mapping would SIGBUS
 * it), or dma-bufs. The daemon takes its own reference to each buffer and
 * write-seals memfds (F_SEAL_WRITE), so the caller must hold no writable
 * shared mapping of them and must not write them after this call. Buffers
 * appear in the blob's fd table once each, in order of first use by the
 * planes; the fence is appended last. Returns 0 and the new version in
 * *version (may be NULL), or -errno with the daemon's reason.
 */
TD_EXPORT int td_client_publish(struct td_client *c, const struct td_publish *p,
				uint64_t *version, struct td_error *err);

/*
 * Ask the daemon for plane_count fresh zero-filled buffers of the given
 * sizes, mapped writable (MAP_SHARED) here. Write through td_alloc_data(),
 * then td_client_publish_alloc() (or drop them with td_alloc_free()).
 * The mapping is not passed to a child of fork() (MADV_DONTFORK): a
 * child's writable copy would fail the publish's write seal (-EBUSY)
 * until it exec'ed; there the loan's addresses are not mapped.
 * Alignment: a buffer whose size is a multiple of A (a power of two, at
 * most 2 MiB) is mapped at an A-aligned address, so asking for sizes that
 * are multiples of a device's minImportedHostPointerAlignment gives
 * buffers it can import (VK_EXT_external_memory_host). The same holds
 * for whole-buffer GET mappings, and for ring slot planes (td_ring_desc)
 * when every plane size of the ring is a multiple of A.
 * Returns 0 and the loan in *out, or -errno.
 */
TD_EXPORT int td_client_alloc(struct td_client *c, uint32_t plane_count,
			      const uint64_t *sizes, struct td_alloc **out,
			      struct td_error *err);

/*
 * td_client_alloc_ex() flag: a recyclable loan, for producers that hand
 * off a stream of same-sized tensors through the plain API
 * (docs/fastpath.md, "Recycled loans"). Its buffers are NOT write-sealed
 * at publish: consumers get read-only descriptors, but the published
 * version trusts this producer not to write after publishing (as a ring
 * does; td_entry.flags shows TD_ENTRY_RECYCLE). The library keeps the
 * buffers mapped after publish (up to 128 per client, past 16 only
 * within 1 GiB of them, least recently published dropped first), and
 * once a version is replaced or deleted and its last lease released,
 * the daemon hands the same buffer back to this client's next
 * recyclable loan of that size: no fd, no mmap, no new memory. A
 * recycled buffer holds the bytes of the version it last carried, not
 * zeros. A buffer some consumer still leases is never recycled, nor one
 * whose version went with its acquire fence unsignalled before that fence
 * signals (the device may still write it; another buffer serves
 * meanwhile). A daemon that predates the flag gives a plain loan.
 */
#define TD_ALLOC_RECYCLE 0x1u
/*
 * td_client_alloc_ex() flag: a recyclable loan (implies TD_ALLOC_RECYCLE)
 * whose PUBLISH also asks the daemon to lend the next loan of the same
 * sizes in its reply (docs/fastpath.md, "Streams: one round trip per
 * tensor"): the next td_client_alloc_ex() with TD_ALLOC_STREAM and those
 * sizes sends nothing. The lent loan is an unpublished alloc of this
 * client (counted against the limits, not evictable) until it is
 * published or a td_client_alloc_ex() of other sizes or flags hands it
 * back to the free list. The daemon lends only buffers its free list
 * holds, never a new one; without them (or from a daemon that predates
 * the flag) the next call makes an ALLOC round trip as before.
 */
#define TD_ALLOC_STREAM 0x2u
/*
 * td_client_alloc_ex() flag: a stream loan (implies TD_ALLOC_STREAM) that
 * may rewrite the buffers of the latest version (docs/fastpath.md,
 * "Rewriting the latest version"), as a ring's producer does: when the
 * version this client published last from a TD_ALLOC_REWRITE loan is
 * still the current version of its name and nobody holds it (every lease
 * released, no follower's hold), the ALLOC takes that version back (it
 * stops being current; a GET of the name then waits for the next publish,
 * at most a second) and lends its buffers, warm in the caches: a
 * ping-pong of large tensors then uses one buffer instead of alternating
 * two. Otherwise the loan comes from the free list as for
 * TD_ALLOC_RECYCLE. It costs an ALLOC round trip per tensor that
 * TD_ALLOC_STREAM saves, so the take-back is asked for only for loans of
 * at least $TENSORD_REWRITE_MIN bytes (default 8 MiB, all planes
 * together) when the producer spent at least $TENSORD_REWRITE_FILL_US
 * (default 200) microseconds between the alloc and the publish of its
 * last such loan (it writes its tensors); otherwise the loan is a stream
 * loan. Meant for a producer that waits for its consumers between tensors
 * (ping-pong, lock step, fan-out with acknowledgements): a reader that
 * comes after the producer's next ALLOC does not get the version before
 * it. One rewritten name per connection: the ALLOC takes back the one
 * this connection published last with the flag; a td_client_alloc_named()
 * loan of another name is a stream loan. Old daemons: a stream loan.
 */
#define TD_ALLOC_REWRITE 0x4u

/*
 * td_client_alloc() with flags (0, TD_ALLOC_RECYCLE, TD_ALLOC_STREAM,
 * TD_ALLOC_REWRITE; others -EINVAL).
 * Returns 0 and the loan in *out, or -errno.
 */
TD_EXPORT int td_client_alloc_ex(struct td_client *c, uint32_t plane_count,
				 const uint64_t *sizes, uint32_t flags,
				 struct td_alloc **out, struct td_error *err);
/*
 * 0 when name is a tensor name the daemon takes (docs/protocol.md: its
 * bytes and length), else -EINVAL with the reason: a check before work
 * that a refused name would waste (a loan filled for a publish that
 * fails).
 */
TD_EXPORT int td_name_check(const char *name, struct td_error *err);

/*
 * td_client_alloc_ex() for a loan that will be published as `name` (NULL:
 * td_client_alloc_ex() itself), and only as that name: another is refused
 * with -EINVAL. The uid must be allowed to write the name (-EACCES here,
 * not at publish). For recyclable loans it matters whom the buffers were
 * shown to (docs/fastpath.md, "Across names"): a buffer the daemon sent
 * to another connection that may not read every name this client may
 * write (under a policy) stays bound to the name it was read under, and
 * only a loan named so may have it again; an unnamed loan gets only
 * buffers no such reader was sent. Under a policy a named loan also gets
 * only buffers that carried its name alone (a recycled buffer holds what
 * it carried last). So a producer under a policy names its recyclable
 * loans to keep them recycled, and nothing it writes under one name
 * reaches a reader of another through a buffer of its loans. The next
 * loan a named TD_ALLOC_STREAM loan's PUBLISH lends is for its name (one
 * each for 16 names). From a daemon that predates named allocs the name
 * is checked here only. Returns 0 and the loan in *out, or -errno.
 */
TD_EXPORT int td_client_alloc_named(struct td_client *c, const char *name,
				    uint32_t plane_count,
				    const uint64_t *sizes, uint32_t flags,
				    struct td_alloc **out,
				    struct td_error *err);
/* Writable bytes of buffer i, NULL when i is out of range or size is 0. */
TD_EXPORT void *td_alloc_data(struct td_alloc *a, uint32_t i);
/* Size requested for buffer i, 0 when out of range. */
TD_EXPORT uint64_t td_alloc_size(const struct td_alloc *a, uint32_t i);
/* The fd of buffer i (borrowed, valid until the loan ends), -1 if none. */
TD_EXPORT int td_alloc_fd(const struct td_alloc *a, uint32_t i);
/*
 * Give a loan up unpublished. Accepts NULL. The daemon is told without
 * waiting (a daemon that predates it keeps the alloc until the client
 * disconnects), as it is for a loan whose publish failed.
 */
TD_EXPORT void td_alloc_free(struct td_alloc *a);

/*
 * Publish a loan. p->fds/fd_count are ignored; planes index the loan's
 * buffers (plane_count 0: one plane per buffer, of its requested size),
 * and every buffer of the loan must carry a plane (else -EINVAL). The
 * library unmaps its writable mapping BEFORE sending, because the daemon
 * write-seals the buffers (a TD_ALLOC_RECYCLE loan stays mapped, kept for
 * the next loan). Consumes the loan on success and on failure.
 * Returns 0 and *version (may be NULL), or -errno.
 */
TD_EXPORT int td_client_publish_alloc(struct td_client *c, struct td_alloc *a,
				      const struct td_publish *p,
				      uint64_t *version, struct td_error *err);

/*
 * td_client_publish_alloc() without waiting for the daemon's answer
 * (docs/fastpath.md, "A publish nobody waits for"): returns 0 once the
 * request is on the socket, so a producer that goes on to wait for its
 * consumers is not woken in between by the reply. The library reads the
 * answer when it comes in (while it waits for any other reply, or in
 * td_client_process()) and at the latest at the next
 * td_client_alloc_ex(), td_client_alloc(), td_client_publish*(),
 * td_client_put() or td_client_publish_wait() of this client, which wait
 * for it first: one such PUBLISH is on its way at a time. A
 * TD_ALLOC_STREAM loan's next loan, lent in that answer, is handed out
 * by the next td_client_alloc_ex() as with td_client_publish_alloc().
 * A failure (the daemon refused it, or the connection ended before it
 * answered: then it may or may not have been published) is returned
 * once, by the first of those calls, which then does nothing else (a
 * loan passed to it is consumed, as on any failure): on a client shared
 * by threads, the first call of any thread, which may not be the one
 * that published (the state is the client's, not a thread's).
 * Consumes the loan.
 * Returns 0, or -errno when the request could not be sent (or an earlier
 * failure, as above).
 */
TD_EXPORT int td_client_publish_alloc_nowait(struct td_client *c,
					     struct td_alloc *a,
					     const struct td_publish *p,
					     struct td_error *err);

/*
 * Wait for the answer to this client's td_client_publish_alloc_nowait()
 * if it has not come yet. Returns 0 and in *version (may be NULL) the
 * version the last such PUBLISH published (0 when none was made), or the
 * failure of one not returned yet (see above).
 */
TD_EXPORT int td_client_publish_wait(struct td_client *c, uint64_t *version,
				     struct td_error *err);

/*
 * Convenience: allocate one buffer of len bytes, copy data into it and
 * publish it as one plane described by p (p->fds, planes ignored).
 * Returns 0 and *version (may be NULL), or -errno.
 */
TD_EXPORT int td_client_put(struct td_client *c, const struct td_publish *p,
			    const void *data, size_t len, uint64_t *version,
			    struct td_error *err);
/*
 * td_client_put() whose loan is td_client_alloc_named(p->name, ...,
 * alloc_flags): 0 is td_client_put(); TD_ALLOC_STREAM copies into the
 * name's stream loan (the one the last such put's PUBLISH lent: no
 * request but the PUBLISH), whose few buffers stay mapped here and in
 * the name's followers, so a loop of puts makes no buffer, descriptor or
 * mapping per version; TD_ALLOC_RECYCLE a recyclable loan without the
 * lending. Either version is recyclable (TD_ENTRY_RECYCLE, not
 * write-sealed): nothing but this call writes its loan, before its
 * publish. Other flags: -EINVAL.
 */
TD_EXPORT int td_client_put_ex(struct td_client *c, const struct td_publish *p,
			       const void *data, size_t len,
			       uint32_t alloc_flags, uint64_t *version,
			       struct td_error *err);

/* ---- consuming ---- */

/*
 * Get the latest version of name. The tensor's planes are mapped read-only
 * (MAP_SHARED; MAP_PRIVATE where the kernel refuses shared maps of sealed
 * memory, which shares the pages all the same). The daemon holds a lease on
 * the version until td_tensor_release() or disconnect, so deleting or
 * replacing the name never changes bytes being read.
 * A ring name gives its latest version in place: the lease keeps the
 * producer from rewriting that slot, and only the slot's pages are mapped
 * (docs/fastpath.md, "Rings in the catalogue").
 * Returns 0 and *out, -ENOENT no such name, or -errno.
 */
TD_EXPORT int td_client_get(struct td_client *c, const char *name,
			    struct td_tensor **out, struct td_error *err);
/* Exactly version `version` of name; -ENOENT when it is gone. */
TD_EXPORT int td_client_get_version(struct td_client *c, const char *name,
				    uint64_t version, struct td_tensor **out,
				    struct td_error *err);
/*
 * The first version of name newer than `after`, waiting up to timeout_ms
 * milliseconds for one to be published (< 0 = forever, 0 = do not wait).
 * -ETIMEDOUT when none came. Blocks the handle while it waits.
 *
 * Asked for a name again, newer than the version it gave last (a
 * consumer's loop), it follows the name (td_client_follow, below) and
 * takes later versions from shared memory: warm, no message to the
 * daemon, and the wait no longer blocks the handle. Same results as the
 * GET; up to 16 names per handle, 2 follows each (the tensor got last
 * may still be held; a loop over more names follows 16 of them and sends
 * the GET for the others); with more held, while the name has no version
 * (it may become a ring) or when the daemon refuses FOLLOW, it sends the
 * GET.
 * Its idle follows end when a td_client_follow of the handle meets a
 * daemon limit, so that one is made as before; and its follows take at
 * most half of a name's follower rows and of the daemon's followed
 * names (a spare FOLLOW), so other handles' td_client_follow find room.
 * $TENSORD_GET_FOLLOW=0 at connect: always the GET (docs/fastpath.md,
 * "get_newer rides a follow").
 */
TD_EXPORT int td_client_get_newer(struct td_client *c, const char *name,
				  uint64_t after, int timeout_ms,
				  struct td_tensor **out, struct td_error *err);

/* ---- several names at one instant (docs/protocol.md §6.10) ---- */

#define TD_MANY_MAX 64 /* names in one td_client_*_many() call */

/*
 * Publish count (1..TD_MANY_MAX) loans as one step: allocs[i] under
 * pubs[i] (each as td_client_publish_alloc() takes it; distinct names,
 * distinct loans). The daemon checks every one (the policy, names,
 * seals, fences, quotas, that each loan is this connection's) before it
 * commits any, then makes them all current in one step of its loop: no
 * GET, td_client_get_many(), LIST, STAT, snapshot or HTTP read sees
 * some of them and not the others, and watchers get the N events after
 * the commit, in element order. A follower (td_client_follow) reads
 * each name on its own, so it may see one new version before the other;
 * pairs are read together with td_client_get_many().
 * All or none: a refusal publishes nothing, and err names the element
 * and why ("PUBLISH_MANY element 1 (\"cam/label\"): ...").
 * Consumes every loan on success and on failure (as
 * td_client_publish_alloc(): a refused loan may have been write-sealed
 * already, and is given up). A TD_ALLOC_STREAM loan's publish here lends
 * no next loan (the next td_client_alloc_ex() asks the daemon); a
 * staged loan is not fired (its stage is dropped); a TD_ALLOC_REWRITE
 * loan's version is the one a later take-back may rewrite (the last
 * such element's). The whole request must fit one message (64 KiB with
 * the blobs and metadata; at most 16 attached fds on the SCM path, i.e.
 * fences): else -EMSGSIZE or -E2BIG, nothing sent.
 * Returns 0 and versions[i] (versions may be NULL), -EOPNOTSUPP from a
 * daemon that does not serve it (TD_WIRE_FEAT_MANY; nothing sent), or
 * -errno.
 */
TD_EXPORT int td_client_publish_many(struct td_client *c, uint32_t count,
				     struct td_alloc *const *allocs,
				     const struct td_publish *pubs,
				     uint64_t *versions,
				     struct td_error *err);
/*
 * The latest version of each of count (1..TD_MANY_MAX) distinct names,
 * leased in one step of the daemon: out[i] as td_client_get() gives it
 * (end each with td_tensor_release()). Versions one
 * td_client_publish_many() made are got together or not at all: never
 * one of them with the version before of another. All or none: a name
 * with no version (-ENOENT), one the policy refuses (-EACCES, checked
 * for every name before any is looked up), a ring name (-EINVAL), a
 * name whose latest version its producer is rewriting (-EAGAIN), or a
 * reply that would not fit one message (-EMSGSIZE; on the SCM path more
 * than 16 descriptors in all: -E2BIG) fails the call with every out[i]
 * NULL and no lease left; err names the element. It never waits for a
 * version (td_client_get_many_newer() does). -EOPNOTSUPP from a daemon
 * that does not serve it (TD_WIRE_FEAT_MANY).
 */
TD_EXPORT int td_client_get_many(struct td_client *c, uint32_t count,
				 const char *const *names,
				 struct td_tensor **out, struct td_error *err);
/*
 * td_client_get_many() of the next step: waits up to timeout_ms (< 0 for
 * ever) until names[0] has a version newer than `after` (0: any), then
 * leases every name's latest in that step (pass td_tensor_version(out[0])
 * of the last call: the next publish_many, whole). No lease while it
 * waits. -ETIMEDOUT, -ENOENT (deleted meanwhile), -EDQUOT/-EAGAIN (the
 * uid's `waiters`, the connection's parked requests), -EOPNOTSUPP without
 * TD_WIRE_FEAT_MANY_WAIT; else as get_many (docs/protocol.md §6.10).
 */
TD_EXPORT int td_client_get_many_newer(struct td_client *c, uint32_t count,
				       const char *const *names,
				       uint64_t after, int timeout_ms,
				       struct td_tensor **out,
				       struct td_error *err);

/*
 * Following a name (docs/fastpath.md, "Following a name"): a consumer of
 * a stream that takes each new version without a message to the daemon.
 * The daemon writes each new version's description into shared memory
 * and wakes the followers; a follower holds the version through a row
 * of its own that the daemon honours as a lease, and maps its buffers
 * from this client's mapping cache. A buffer not mapped here yet (the
 * first versions; every version of a producer that does not recycle
 * its buffers, td_client_alloc_ex) and a version with a fence are
 * taken with a GET of that exact version instead: the same tensor,
 * one round trip. A stream of TD_ALLOC_STREAM versions settles on no
 * message at all on the consumer's side. A stream of loans named for the
 * name (td_client_alloc_named with TD_ALLOC_STREAM or TD_ALLOC_REWRITE,
 * a take-back too) is staged: its producer's publish wakes the
 * followers itself, and they take the version before the daemon has
 * read that publish (docs/fastpath.md, "A followed publish without the
 * daemon's hop"; futex_waitv, Linux 5.16; $TENSORD_STAGE=0 at connect
 * turns it off for a client).
 *
 * The name needs not exist yet; a deleted name is followed on to its
 * next version (a ring made under the name meanwhile is not followed:
 * nothing comes until it ends and the name is published again). A held
 * version is leased (not evicted, counted in the limits) until the
 * follower lets go or a policy reload ends the follow; never recycled.
 * Returns 0 and *out (end it with td_follow_close()), -EOPNOTSUPP when
 * the daemon does not serve FOLLOW, -EINVAL for a ring name (use
 * td_ring_subscribe()), -EACCES, -EBUSY (64 followers of that name),
 * -EDQUOT (a limit of this uid: its leases, descriptors or followed
 * names, or 32 followers of that name already; docs/policy.md §5), or
 * -errno.
 */
struct td_follow;
TD_EXPORT int td_client_follow(struct td_client *c, const char *name,
			       struct td_follow **out, struct td_error *err);
/*
 * The newest version of the followed name newer than the last one this
 * follow returned (others skipped), waiting up to timeout_ms (< 0 for
 * ever; 0: -EAGAIN at once when there is none). *out is a tensor as
 * td_client_get() gives; td_tensor_release() (or _nowait: one store) it
 * before the next call, else -EBUSY. -ETIMEDOUT, -EPIPE when the
 * connection is gone (follow again on a new one), -ECHILD after fork(),
 * -EACCES when a policy reload took this uid's read (docs/policy.md;
 * another uid's: followed anew, its fd kept). One thread at a time.
 */
TD_EXPORT int td_follow_next(struct td_follow *f, int timeout_ms,
			     struct td_tensor **out, struct td_error *err);
/*
 * Event loops: td_follow_fd() gives a timerfd (made, registered with the
 * daemon and armed on the first call, owned by the follow: a version
 * already there makes it readable at once) that polls readable when
 * td_follow_poll() may have something: a version newer than the last one
 * returned, or a connection gone. td_follow_poll() is td_follow_next()
 * with no wait that arms the fd when it finds nothing (-EAGAIN); before
 * the first td_follow_fd() it fails with -EINVAL. A daemon
 * that goes away fires no timerfd: watch td_client_fd() too; once a call
 * on the client (td_client_process() in the loop) finds the connection
 * gone, the library makes the fd readable and td_follow_poll() says
 * -EPIPE: close the follow and follow again (after a TD_CLIENT_RECONNECT
 * reconnect, on the new connection). The fd is a
 * timerfd, which the daemon's wake-up cannot block on (an eventfd's write
 * can): poll it, never write() it. td_follow_fd() returns -EOPNOTSUPP
 * when the daemon does not serve it, -ECONNRESET when the follow's
 * connection is gone as it makes the fd (once made, the same fd: then
 * td_follow_poll() says -EPIPE), -ECHILD in a child of fork().
 */
TD_EXPORT int td_follow_fd(struct td_follow *f);
TD_EXPORT int td_follow_poll(struct td_follow *f, struct td_tensor **out,
			     struct td_error *err);
/* End a follow (after the last tensor it gave is released, if one is
 * still held). Accepts NULL. */
TD_EXPORT void td_follow_close(struct td_follow *f);

/*
 * Release a tensor: tells the daemon the lease is over and drops this
 * tensor's references to its mappings. Accepts NULL.
 *
 * Mapping cache: mappings are kept per daemon buffer id. Getting a buffer
 * this client already holds or recently held reuses its fd and mapping (no
 * new import, no new mmap). Up to 64 mappings nobody uses stay cached; the
 * least recently used is unmapped beyond that. A cached mapping keeps its
 * buffer's memory alive after the daemon dropped it; td_client_trim()
 * drops them all now.
 */
TD_EXPORT void td_tensor_release(struct td_tensor *t);

/*
 * As td_tensor_release(), without waiting for the daemon's answer (a
 * stream's consumer saves a round trip per handoff): the RELEASE is on
 * the socket when this returns and the daemon ends the lease before it
 * serves this connection's next request, but another connection (or a
 * ring's producer) may still see the lease held for a moment. A daemon
 * that does not serve quiet releases (HELLO feature
 * TD_WIRE_FEAT_RELEASE_QUIET) gets a plain RELEASE. Accepts NULL.
 */
TD_EXPORT void td_tensor_release_nowait(struct td_tensor *t);

/*
 * Unmap and close every cached mapping no tensor uses, and every kept
 * buffer of recyclable loans no loan uses (those not while the answer to
 * a td_client_publish_alloc_nowait() that may lend them back is still to
 * come). Returns how many.
 */
TD_EXPORT int td_client_trim(struct td_client *c);

TD_EXPORT uint64_t td_tensor_version(const struct td_tensor *t);
TD_EXPORT uint32_t td_tensor_dtype(const struct td_tensor *t);
TD_EXPORT uint32_t td_tensor_ndim(const struct td_tensor *t);
/* ndim dimensions, outermost first. Valid while t lives. */
TD_EXPORT const uint64_t *td_tensor_shape(const struct td_tensor *t);
/*
 * Byte strides as published, *count = ndim, or NULL with *count = 0 when
 * the blob said "dense C order". libtensord's publishers always write
 * strides (for td_publish.strides NULL the dense ones, an image's row
 * dimension at its row pitch, as edgefirst-tensor does), so NULL comes
 * only from a blob of another writer. count may be NULL. A stride may
 * be negative (the blob spec's flipped axis): the daemon checks only that
 * the layout's span, (n - 1) * |stride| over the dimensions plus one
 * element, fits in the plane; the spec does not say
 * where element 0 lies in that span, so that is for the producer and its
 * readers to agree (Python and the HTTP store refuse such a tensor).
 */
TD_EXPORT const int64_t *td_tensor_strides(const struct td_tensor *t,
					   uint32_t *count);
/*
 * Quantization: returns the axis (-2 none, -1 per tensor, >= 0 channel
 * axis) and the scales and zero points (pointers valid while t lives; any
 * out pointer may be NULL).
 */
TD_EXPORT int32_t td_tensor_quant(const struct td_tensor *t,
				  const float **scales, uint32_t *scale_count,
				  const int32_t **zero_points,
				  uint32_t *zero_point_count);

enum td_tensor_string {
	TD_TENSOR_FORMAT = 0,
	TD_TENSOR_COLOR_SPACE = 1,
	TD_TENSOR_COLOR_TRANSFER = 2,
	TD_TENSOR_COLOR_ENCODING = 3,
	TD_TENSOR_COLOR_RANGE = 4,
};
/* One of the blob strings, NUL-terminated ("" when empty or out of range). */
TD_EXPORT const char *td_tensor_string(const struct td_tensor *t,
				       enum td_tensor_string which);
/* User metadata bytes (NULL with *len 0 when none). */
TD_EXPORT const void *td_tensor_meta(const struct td_tensor *t, size_t *len);

TD_EXPORT uint32_t td_tensor_plane_count(const struct td_tensor *t);
/*
 * Read-only bytes of plane i; NULL when out of range, of size 0, or a
 * dma-buf whose exporter refuses CPU mappings (import its fd instead).
 */
TD_EXPORT const void *td_tensor_plane_data(const struct td_tensor *t,
					   uint32_t i);
TD_EXPORT uint64_t td_tensor_plane_size(const struct td_tensor *t, uint32_t i);
TD_EXPORT uint64_t td_tensor_plane_stride(const struct td_tensor *t,
					  uint32_t i);
/* Buffer fd behind plane i (borrowed; valid while t lives), -1 if none. */
TD_EXPORT int td_tensor_plane_fd(const struct td_tensor *t, uint32_t i);
/*
 * Byte offset of plane i inside its buffer, the file td_tensor_plane_fd()
 * refers to (for a mapping of one's own, e.g. copy-on-write); 0 for an
 * inline plane or i out of range.
 */
TD_EXPORT uint64_t td_tensor_plane_offset(const struct td_tensor *t,
					  uint32_t i);
/* Sum of plane sizes. */
TD_EXPORT uint64_t td_tensor_bytes(const struct td_tensor *t);

/* 1 when the producer attached an acquire fence, else 0. */
TD_EXPORT int td_tensor_has_fence(const struct td_tensor *t);
/*
 * Wait until the acquire fence signals, at most timeout_ms (< 0 forever,
 * 0 just look): td_fence_wait() on td_tensor_fence_fd(). Returns 0 when
 * signalled or when there is no fence, -ETIMEDOUT, -EIO a sync_file that
 * signalled an error, -ECONNRESET an own fence (timerfd) not fired when
 * its lease's connection went (nothing fires it now). Reading the bytes
 * before this returns 0 may see an unfinished write.
 */
TD_EXPORT int td_tensor_fence_wait(const struct td_tensor *t, int timeout_ms);
/* The same, with the reason of a failure in *err (may be NULL). */
TD_EXPORT int td_tensor_fence_wait_err(const struct td_tensor *t,
				       int timeout_ms, struct td_error *err);
/*
 * The acquire fence's fd (borrowed; valid while t lives), -1 when none.
 * A GPU consumer imports a sync_file into its own API (Vulkan:
 * vkImportSemaphoreFdKHR with SYNC_FD, on a dup). For an eventfd it is a
 * timerfd of this consumer's own, fired by tensord (docs/fastpath.md,
 * "Fences"); an older daemon hands out the eventfd: never read() it.
 */
TD_EXPORT int td_tensor_fence_fd(const struct td_tensor *t);

/* What backs a plane (td_tensor_plane_kind()). */
#define TD_PLANE_MEMFD 1  /* shared memory (memfd, tmpfs or hugetlbfs) */
#define TD_PLANE_DMABUF 2 /* a dma-buf: import td_tensor_plane_fd() */
/*
 * TD_PLANE_* of plane i, 0 when out of range. A dma-buf is best imported
 * into the consumer's own API (Vulkan VK_EXT_external_memory_dma_buf,
 * EGL, V4L2) from td_tensor_plane_fd(): device memory stays on the
 * device. Its CPU mapping (td_tensor_plane_data()) is bracketed by
 * DMA_BUF_IOCTL_SYNC: SYNC_START|READ before the tensor is returned,
 * SYNC_END|READ at td_tensor_release(), so caches are coherent for CPU
 * reads in between (docs/fastpath.md, "GPU stages").
 */
TD_EXPORT int td_tensor_plane_kind(const struct td_tensor *t, uint32_t i);

/*
 * The DRM format modifier of plane i (drm_fourcc.h; 0 = DRM_FORMAT_MOD_LINEAR,
 * also when out of range). Only a dma-buf plane can carry another (the
 * daemon refuses one on a memfd plane): its bytes are in the device's
 * tiled or compressed layout, to be imported with that modifier (Vulkan
 * VK_EXT_image_drm_format_modifier, EGL_EXT_image_dma_buf_import_modifiers),
 * never read as rows of td_tensor_plane_data() (blob spec §6.1).
 */
TD_EXPORT uint64_t td_tensor_plane_modifier(const struct td_tensor *t,
					    uint32_t i);
/*
 * 0 when every plane of t is linear (its bytes read as its shape and
 * strides say), else -ENOTSUP with a reason in *why (when not NULL):
 * what a CPU reader (tensorctl save, zarr export, the Python arrays)
 * checks before it reads.
 */
TD_EXPORT int td_tensor_linear(const struct td_tensor *t, const char **why);

/* ---- fences for producers (docs/fastpath.md, "GPU stages") ----
 *
 * An acquire fence (TD_PUBLISH_FENCE) lets a producer publish before the
 * work writing the bytes is done: consumers wait on it before reading.
 * The daemon accepts two kinds: a sync_file (a kernel dma_fence, which a
 * GPU driver signals: Vulkan vkGetFenceFdKHR / vkGetSemaphoreFdKHR with
 * SYNC_FD) and an eventfd (which the producer signals itself, e.g. after
 * vkWaitForFences, where the driver exports no sync_file); not the
 * timerfd a GET hands a consumer.
 */

/*
 * A new unsignalled eventfd fence (close-on-exec, non-blocking) to
 * publish with TD_PUBLISH_FENCE, then signal with td_fence_signal().
 * The fd (close it once signalled: the daemon keeps its own, and one
 * closed before the signal can never be signalled, so consumers' waits
 * time out) or -errno.
 */
TD_EXPORT int td_fence_create(void);
/*
 * Signal an eventfd fence: every reader's wait returns from now on (its
 * own fence fired by tensord). One signalled already is left as it is
 * (never a blocking write). 0, -EINVAL (not an eventfd: a sync_file's
 * driver or tensord signals it), -EBADF, or -errno; the reason in *err.
 */
TD_EXPORT int td_fence_signal(int fence_fd, struct td_error *err);
/*
 * Wait until fence_fd (an eventfd, a sync_file, a GET's own timerfd)
 * signals, at most timeout_ms (< 0 forever, 0 just look). 0 signalled,
 * -ETIMEDOUT not in time, -EBADF not an open fd, -EINVAL none of those
 * kinds (a plain file, a pipe), -EIO a sync_file that signalled an
 * error; the reason in *err. Never consumes the signal.
 */
TD_EXPORT int td_fence_wait(int fence_fd, int timeout_ms,
			    struct td_error *err);

/* ---- catalogue ---- */

/*
 * td_entry.flags: the name is a ring (td_ring_create). Its version is the
 * latest published (0: none yet), bytes one slot's planes, lease_count
 * the GET leases on its slots; td_client_ring_stat() has the rest. A GET
 * of a ring name leases its latest slot like any tensor version.
 */
#define TD_ENTRY_RING 0x2u
/*
 * td_entry.flags: a version published from a TD_ALLOC_RECYCLE loan. Its
 * buffers are not write-sealed: it trusts its producer not to write after
 * publishing (consumers' descriptors are read-only all the same).
 */
#define TD_ENTRY_RECYCLE 0x4u

/* A tensor's summary (LIST, STAT). Strings and meta are owned. */
struct td_entry {
	char *name;
	uint64_t version;
	uint32_t dtype;
	uint32_t ndim;
	uint64_t shape[TD_ENTRY_MAX_DIMS];
	uint64_t bytes;       /* sum of plane sizes */
	uint32_t lease_count; /* leases held on this version, all clients */
	uint32_t flags; /* TD_PUBLISH_PIN, TD_ENTRY_RING, TD_ENTRY_RECYCLE */
	void *meta;
	size_t meta_len;
};

/* Summary of name's latest version into *e; td_entry_fini() it. */
TD_EXPORT int td_client_stat(struct td_client *c, const char *name,
			     struct td_entry *e, struct td_error *err);
/* Free what td_client_stat() put in *e. Accepts NULL; idempotent. */
TD_EXPORT void td_entry_fini(struct td_entry *e);
/*
 * Every tensor whose name starts with prefix (NULL or "" = all), sorted by
 * name, into a new array *out of *count entries (paged transparently).
 * Free with td_entry_list_free().
 */
TD_EXPORT int td_client_list(struct td_client *c, const char *prefix,
			     struct td_entry **out, size_t *count,
			     struct td_error *err);
TD_EXPORT void td_entry_list_free(struct td_entry *list, size_t count);

/*
 * Remove name. Leased versions stay readable by their holders. Returns 0
 * and the removed version in *version (may be NULL), -ENOENT, or -errno.
 */
TD_EXPORT int td_client_delete(struct td_client *c, const char *name,
			       uint64_t *version, struct td_error *err);

/*
 * Remove name only while version is its current version: the undo of
 * one's own publish that never removes a newer version someone else
 * published meanwhile. Returns 0, -ENOENT, -ESTALE (another version is
 * current; nothing removed), -EOPNOTSUPP (a daemon that predates this),
 * or -errno. version must not be 0.
 */
TD_EXPORT int td_client_delete_version(struct td_client *c, const char *name,
				       uint64_t version,
				       struct td_error *err);

/* ---- watching ---- */

#define TD_WATCH_PREFIX 0x1u /* name is a prefix */

enum td_event_type {
	TD_EVENT_TYPE_PUBLISHED = 1,
	TD_EVENT_TYPE_DELETED = 2,
	/* TD_CLIENT_RECONNECT: connected anew (watch_id 0, name "", version
	 * the number of watches re-established) */
	TD_EVENT_TYPE_RECONNECTED = 3,
	/* events dropped here (the limit, no memory): watch_id 0, name "",
	 * version how many; look again (td_client_list, stat) */
	TD_EVENT_TYPE_OVERFLOWED = 4,
};

struct td_event {
	uint64_t watch_id;
	uint32_t type; /* enum td_event_type */
	uint64_t version;
	char name[TD_NAME_MAX + 1];
};

/*
 * Watch a name (or, with TD_WATCH_PREFIX, every name under a prefix).
 * Returns 0 and the watch id in *watch_id (may be NULL), or -errno
 * (-EINVAL for flags other than TD_WATCH_PREFIX). Events arrive through
 * td_client_next_event(); events that come in while another call waits for
 * its reply are queued in order, with no bound unless one is set
 * (td_client_set_event_limit(); events it drops are counted in an
 * OVERFLOWED event): a client that watches busy names and makes blocking
 * calls without taking its events holds them all in memory. (One that
 * does not read its socket at all is cut by the daemon instead.)
 */
TD_EXPORT int td_client_watch(struct td_client *c, const char *name,
			      uint32_t flags, uint64_t *watch_id,
			      struct td_error *err);
TD_EXPORT int td_client_unwatch(struct td_client *c, uint64_t watch_id,
				struct td_error *err);
/*
 * At most max watch events queued (0: no bound, the default); one that
 * comes while max wait is dropped and counted in an OVERFLOWED event
 * (outside the bound), as inotify does. RECONNECTED is outside it too:
 * one waits at most, at the latest reconnect. 0 or -EINVAL (no client).
 */
TD_EXPORT int td_client_set_event_limit(struct td_client *c, unsigned max);
/*
 * What a signal does to a call waiting for the daemon's reply (a daemon
 * stopped with SIGSTOP, or wedged, never answers). By default nothing:
 * the wait goes on. With fn set, a signal caught by a handler that
 * interrupts that wait (EINTR) calls fn(ud) in the waiting thread, with
 * the handle's lock held (fn must not call into the handle), once the
 * reply has been waited for 100 ms (a reply in time is never given up
 * for a signal whose handler carries on; a request the daemon holds, a
 * GET or RING_SUBSCRIBE with a timeout, is given up too, so that Ctrl-C
 * ends a long wait: td_client_set_interrupt_ex's TD_INTR_PARKED waits
 * out its timeout instead). When fn returns nonzero the
 * call gives up and returns -EINTR. Its request is
 * then unanswered, so the connection is abandoned: shut down (the daemon
 * ends its leases, loans and rings when it reads the hang-up) and every
 * later call fails with -ECONNABORTED (or, with TD_CLIENT_RECONNECT,
 * connects again). Not the HELLO of td_client_connect() (that of
 * td_client_connect_intr() is), nor a send the socket's full buffer
 * holds up (td_client_set_interrupt_ex's TD_INTR_SEND). fn NULL restores
 * the default. 0 or -EINVAL (no client).
 */
TD_EXPORT int td_client_set_interrupt(struct td_client *c,
				      int (*fn)(void *ud), void *ud);
/*
 * td_client_set_interrupt() with flags: 0 is the same, TD_INTR_SEND asks
 * fn in a send the socket's full buffer holds up too (the daemon stopped
 * or reading slower than the requests come, thousands of releases sent
 * without waiting), as in the wait for a reply: when fn returns nonzero
 * that send is given up. None of its message was sent (a datagram is
 * queued whole or not at all), yet the connection is abandoned as above:
 * the call returns -EINTR (a release, which returns nothing, is left to
 * the hang-up, which ends it), every later call -ECONNABORTED;
 * TD_INTR_PARKED (below) changes when a held request is late. Flags may
 * be or'ed. 0, or -EINVAL (no client, a flag unknown).
 */
#define TD_INTR_SEND 0x1u
/*
 * TD_INTR_PARKED: a request the daemon may hold (td_client_get_newer()'s
 * GET with a timeout, td_ring_subscribe()'s with one) is late, and fn
 * asked, only 100 ms past that timeout: a signal while a running daemon
 * holds it gives up nothing. For a caller that waits in short slices and
 * runs its handlers between them (the Python binding: 100 ms); a wait
 * without limit (-1) has the 100 ms alone.
 */
#define TD_INTR_PARKED 0x2u
TD_EXPORT int td_client_set_interrupt_ex(struct td_client *c,
					 int (*fn)(void *ud), void *ud,
					 uint32_t flags);
/*
 * td_client_connect_ex() with td_client_set_interrupt(fn, ud) set on the
 * new handle before it connects: a signal that interrupts the wait for the
 * HELLO reply (a daemon stopped with SIGSTOP still accepts the
 * connection) asks fn as a call's would, and one that interrupts a
 * connect() a full listen queue holds asks it at once; when fn returns
 * nonzero the connect returns -EINTR with no handle made. fn NULL: as
 * td_client_connect_ex().
 */
TD_EXPORT int td_client_connect_intr(const char *socket_path,
				     uint32_t flags, int (*fn)(void *ud),
				     void *ud, struct td_client **out,
				     struct td_error *err);
/*
 * Next event in arrival order into *ev, waiting up to timeout_ms (< 0
 * forever, 0 only what is queued or already readable). Returns 0,
 * -ETIMEDOUT, or -errno (-ECONNRESET when the daemon went away).
 */
TD_EXPORT int td_client_next_event(struct td_client *c, int timeout_ms,
				   struct td_event *ev, struct td_error *err);

/* ---- status: what the daemon holds and who is connected ---- */

/* enum td_status.scope */
#define TD_STATUS_SCOPE_ALL 0 /* every client and uid (root, daemon uid) */
#define TD_STATUS_SCOPE_UID 1 /* only the asking uid's rows */

/* Refusal kinds: indexes of td_status.refused. */
enum td_refusal {
	TD_REFUSAL_PERMISSION = 0, /* -EACCES, -EPERM */
	TD_REFUSAL_QUOTA = 1,      /* -EDQUOT, -ENOSPC, -ENOBUFS */
	TD_REFUSAL_INPUT = 2,      /* malformed or invalid requests */
};

/* One connected client, as the daemon sees it. */
struct td_status_client {
	uint32_t pid, uid;
	uint32_t path_in; /* enum td_client_path: how the daemon takes fds */
	uint32_t leases, allocs, watches, waiters;
	uint64_t bytes_held; /* bytes of the versions it leases */
	uint64_t requests;   /* messages it sent */
	uint64_t refusals;   /* error replies that were refusals */
	uint64_t age_ms;     /* since it connected */
	char comm[17];       /* /proc/PID/comm at connect, NUL-terminated */
};

/* One uid holding memory. */
struct td_status_uid {
	uint32_t uid;
	uint64_t bytes;  /* charged to it */
	uint64_t quota;  /* its limit, 0 = none */
	uint64_t pinned; /* its PIN-flagged current versions' bytes (not
			  * the `pinned` limit's use: td_status_uid_pinned) */
};

struct td_status {
	char ident[64]; /* "tensord 0.1.0" */
	uint32_t scope; /* TD_STATUS_SCOPE_* */
	uint32_t daemon_uid;
	uint64_t uptime_ms;
	uint32_t import_forced; /* 0 auto, else enum td_client_path */
	uint32_t rings;
	uint64_t tensors, bytes, max_bytes; /* max_bytes 0 = unlimited */
	uint64_t requests;                  /* messages from every client */
	uint64_t evictions;
	uint64_t refused[3];     /* by enum td_refusal */
	uint64_t log_suppressed; /* audit lines the rate limit left out */
	uint64_t policy_reloads; /* SIGHUP reloads that took effect */
	uint32_t clients_total;  /* connected now, every uid */
	size_t client_count;     /* rows below */
	struct td_status_client *clients;
	size_t uid_count;
	struct td_status_uid *uids;
	/* Bytes of max_bytes kept for root and the daemon's uid: other uids
	 * stop at max_bytes - byte_reserve (0 without --max-bytes).
	 * UINT64_MAX from a daemon too old to say. */
	uint64_t byte_reserve;
};

/*
 * Ask the daemon for its status (docs/protocol.md, STATUS). The daemon's
 * uid and root see every client and uid; any other uid sees the totals
 * and its own uid's rows only (scope says which). Returns 0 and *out
 * (free with td_status_free()), -EOPNOTSUPP from a daemon that predates
 * STATUS, or -errno.
 */
TD_EXPORT int td_client_status(struct td_client *c, struct td_status **out,
			       struct td_error *err);
/* Free a td_client_status() result. Accepts NULL. */
TD_EXPORT void td_status_free(struct td_status *s);

#ifdef __cplusplus
}
#endif

/* rings (the fast path), STATUS's pinned-limit figures: own headers */
#include <tensord/ring.h>
#include <tensord/status.h>

#endif
