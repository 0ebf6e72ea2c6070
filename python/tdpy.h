/* SPDX-License-Identifier: MIT */
/*
 * The tensord Python binding: declarations shared by its files.
 *
 * Objects:
 *  - Client (module.c): one libtensord handle; its put, alloc, publish
 *    and get are tensor.c's.
 *  - Owner (owner.c): the memory behind arrays (a lease, a loan, a ring
 *    slot, a subscriber's view, or one plane of a lease or loan). Every
 *    tensord.Array has one at the end of its .base chain, so the memory
 *    lives as long as any view of it.
 *  - Array (array.c): a numpy.ndarray subclass adding .version,
 *    .metadata, release(), __dlpack__ and __dlpack_device__. An array
 *    is one exactly when its memory is a view of an Owner's: numpy's
 *    copies of it become plain ndarrays in its __array_finalize__.
 *  - Planes (planes.c): a tensor of several planes, one Array per plane.
 *  - Event and the client's queue of them (events.c).
 *  - Watch (module.c), Ring and Subscription (ring.c), Follow
 *    (follow.c).
 *  - maps.c: the client's cache of the mappings behind leases, and
 *    behind alloc(private=False) loans.
 *  - common.c: errors, argument converters, calls in flight.
 *
 * Calls point one way (the suite's python-call-cycles test): maps.c,
 * common.c and owner.c at the bottom, module.c on top. What an Owner
 * asks of ring.c or follow.c goes through tdpy_owner_hooks.
 */
#ifndef TDPY_H
#define TDPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL tdpy_ARRAY_API
#ifndef TDPY_MODULE_C
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>
#include <pthread.h>
#include <stdbool.h>
#include <tensord/blob.h>
#include <tensord/tensord.h>

/* Most dimensions a tensor has here (blob and wire both cap at 16). */
#define TDPY_MAX_DIMS TD_ENTRY_MAX_DIMS

struct tdpy_map; /* maps.c: a cached mapping of a leased plane or a loan */

/*
 * A Watch's share of its client's queue (events.c): its Events in
 * pending are bounded by the client's event_limit on their own. Linked
 * from ClientObject.watches while the watch is open: an event of no
 * linked watch (one closed) is dropped where it is delivered.
 */
struct tdpy_watchq {
	struct tdpy_watchq *next;
	uint64_t id;        /* the watch's id (libtensord's) */
	unsigned queued;    /* its Events in pending, the overflow one not
			     * counted */
	PyObject *overflow; /* its overflow Event in pending, or NULL */
	uint64_t lost_seen; /* the client's lost_any given to it */
	bool linked;
};

typedef struct {
	PyObject_HEAD
	struct td_client *c; /* NULL once closed (or pending close) */
	struct td_client *handle; /* the handle, until really closed */
	unsigned busy;       /* calls in flight with the GIL released */
	int epfd;            /* fileno(): td_client_fd, evfd and polled
			      * subscriptions' eventfds; -1 when none */
	int evfd;            /* eventfd: readable while pending has Events */
	int cfd;             /* td_client_fd() (constant for the handle),
			      * -1 when none */
	bool cfd_parked;     /* cfd out of epfd: a poll() found another
			      * thread's call in flight (tdpy_client_leave
			      * puts it back when the last one returns) */
	unsigned idle;       /* of the calls in flight (busy), those that
			      * hold nothing of libtensord's: Watch.next()'s
			      * waits between two hand-overs */
	bool want_hand_over; /* a poll() or Watch.next() found another
			      * thread's call in flight: that call hands
			      * events over between its wait's slices */
	unsigned epfd_forks; /* tdpy_forks when epfd was made: a child of
			      * fork() shares the set, and leaves it be */
	PyObject *pending;   /* Events td_client_process() delivered, not
			      * yet returned (by poll() or a Watch) */
	struct tdpy_watchq *watches; /* the open Watches' shares of pending
				      * (events.c), linked */
	unsigned watch_count;  /* of them */
	unsigned handing;      /* td_client_process() calls in flight from
				* events.c (no drain from their leave) */
	unsigned event_limit;  /* most Events of one watch in pending (its
				* overflow one not counted), 0 no bound */
	PyObject *lost_event;  /* the overflow Event of watch_id 0 in pending,
				* if any (events.c) */
	uint64_t lost_any;     /* events dropped for no watch known, all
				* told (never goes back) */
	uint64_t lost_unqueued; /* of them, in no overflow Event yet */
	PyObject *reconnected; /* the 'reconnected' Event in pending, if
				* any (outside the bound; events.c) */
	struct tdpy_map *maps; /* leased planes' mappings, recent first */
	unsigned idle_maps;    /* of them, used by no view */
	uint64_t conn;         /* connections made (Client.__init__ again
				* after close() makes another) */
	/* held (GIL released; recursive for a nested one) around each
	 * td_client_process(): one thread at a time hands events to
	 * pending, so they join it in libtensord's order (module.c); also
	 * around a watch's opening, so that no event of it is delivered
	 * before its Watch is linked. Taken before the GIL, never while
	 * holding it (the event handler holds it and waits for the GIL). */
	pthread_mutex_t deliver;
	unsigned forks;        /* tdpy_forks when made, or when a child of
				* fork() took it over (tdpy_client_forked) */
	/* releases and closes a signal handler (or a collection it ran)
	 * asked for while this thread held the handle's lock (common.c,
	 * tdpy_client_defer), done once that call is out */
	struct tdpy_deferred *deferred;
	PyObject *weakrefs;    /* weakref.ref(client) works */
} ClientObject;

enum owner_kind {
	OWNER_LEASE, /* get(): read-only, a td_tensor */
	OWNER_LOAN,  /* alloc(): writable until published */
	OWNER_SLOT,  /* Ring.acquire(): writable ring slot */
	OWNER_VIEW,  /* Subscription.next(): read-only ring slot */
	OWNER_PLANE, /* one plane of a multi-plane LEASE or LOAN (parent) */
};

/* Most planes of a tensor the binding views (image formats have 4). */
#define TDPY_MAX_PLANES 4

typedef struct {
	PyObject_HEAD
	enum owner_kind kind;
	PyObject *parent;     /* Client, Ring or Subscription (owned ref) */
	struct td_tensor *t;  /* LEASE: NULL once released */
	struct td_alloc *a;   /* LOAN: NULL once published or freed */
	void *map;            /* own mapping (LOAN), page aligned */
	size_t map_len;
	struct tdpy_map *loan_map; /* LOAN of alloc(private=False): map is
				    * this cached one's (maps.c) */
	struct tdpy_map *cache; /* LEASE, PLANE of one: the mapping used */
	uint64_t file_off;    /* LEASE, PLANE, VIEW: data's offset in fd */
	void *heap;           /* LEASE of an inline plane: a private copy */
	char *data;           /* first byte of the tensor */
	uint64_t size;        /* bytes of its plane */
	uint64_t version;     /* 0 until published (LOAN) */
	uint32_t dtype;       /* td code */
	int ndim;
	npy_intp shape[TDPY_MAX_DIMS];
	npy_intp strides[TDPY_MAX_DIMS];
	bool explicit_strides; /* LOAN: publish these strides */
	uint32_t alloc_flags; /* LOAN: TD_ALLOC_RECYCLE, _STREAM or 0 */
	bool keep_shared;     /* LOAN: alloc(private=False) */
	PyObject *format;     /* LOAN: image format (str) or NULL */
	uint64_t row_pitch;   /* LOAN with format: the plane's stride */
	bool writable;
	PyObject *name;       /* str */
	PyObject *metadata;   /* bytes */
	Py_ssize_t exports;   /* live buffer-protocol exports */
	uint32_t plane;       /* PLANE: its index in the parent's tensor */
	uint32_t plane_count; /* LEASE, LOAN: > 1 when viewed as Planes */
	uint64_t plane_off[TDPY_MAX_PLANES];  /* LOAN: planes in buffer 0 */
	uint64_t plane_size[TDPY_MAX_PLANES];
	/* LOAN of alloc(private=False) as Planes: weak references to its
	 * plane arrays, which publish() of any one of them turns read-only */
	PyObject *plane_refs[TDPY_MAX_PLANES];
	int fd;               /* VIEW: the ring's data file (the
			       * subscription's fd) */
	uint64_t conn;        /* LEASE, LOAN, SLOT, VIEW: the client's conn
			       * it came on */
	uint64_t ticket;      /* SLOT: the acquire() it came from */
	PyObject *follow;     /* LEASE from Follow.next(): that Follow */
	unsigned dl_exports;  /* LEASE of a follow: live DLPack exports */
	PyObject *weakrefs;
} OwnerObject;

extern PyTypeObject tdpy_client_type, tdpy_owner_type, tdpy_array_type;
extern PyTypeObject tdpy_ring_type, tdpy_sub_type, tdpy_watch_type;
extern PyTypeObject tdpy_planes_type, tdpy_follow_type;
extern PyObject *tdpy_error;

/* common.c: numpy's C API (module init, first); tensord.Error and its
 * subclasses into m. 0, or -1 with the exception set. */
int tdpy_numpy_import(void);
int tdpy_errors_init(PyObject *m);
/*
 * td_client_set_interrupt()'s fn (common.c), ud the ClientObject: in
 * Python's main thread it runs the signal handlers (the GIL taken, the
 * handle's lock held by the waiting call); nonzero, ending the call,
 * when one raised (its exception kept for tdpy_intr_take), else the
 * call goes on waiting.
 */
int tdpy_interrupted(void *ud);
/* After a call that a handler's exception ended (-EINTR): that
 * exception set now; whether one (or another) is set. */
bool tdpy_intr_take(void);
/*
 * After a wait whose end nothing raises (a close or release in a
 * dealloc, obj the object): a handler's exception kept there is raised
 * at the main thread's next bytecode boundary, where the handler's own
 * raise would have come (any other exception set now stays as it is); a
 * close() or release() method returns, and it raises right after. One
 * that cannot wait there (no room among Python's pending calls, or a
 * second kept before the first is raised: the next handler's run raises
 * the first, so hardly) goes to sys.unraisablehook, told obj's type
 * (obj may be in its dealloc). tdpy_intr_kept: whether one is
 * kept now (a call's own, which that call raises: a site that finds one
 * before its wait leaves it be).
 */
void tdpy_intr_redeliver(PyObject *obj);
bool tdpy_intr_kept(void);
/* Raise the tensord.Error subclass for rc (-errno) with e's reason; for
 * -EINTR, a signal handler's exception (set, kept, or raised by the
 * handlers run now) instead, if any. */
PyObject *tdpy_raise(int rc, const struct td_error *e, const char *what);
/*
 * Whether this thread holds libtensord's lock of cl's handle: a signal
 * handler runs inside one of cl's calls (tdpy_interrupted). A call on
 * cl would wait for itself: tdpy_client_reentered raises RuntimeError
 * (-1), 0 when not so; releases and closes go to tdpy_client_defer.
 */
bool tdpy_client_locked_here(const ClientObject *cl);
int tdpy_client_reentered(const ClientObject *cl);
/*
 * A release or close deferred: run(d, handle) with the GIL released once
 * no call of this thread holds the handle (tdpy_client_flush, at the
 * client's next entry, leave or close); ref (owned, may be NULL) is
 * dropped after, with the GIL. 0, or -1 with MemoryError.
 */
struct tdpy_deferred {
	struct tdpy_deferred *next;
	void (*run)(struct tdpy_deferred *d, struct td_client *h);
	void *p;
	uint64_t id;
	PyObject *ref;
};
int tdpy_client_defer(ClientObject *cl,
		      void (*run)(struct tdpy_deferred *, struct td_client *),
		      void *p, uint64_t id, PyObject *ref);
void tdpy_client_flush(ClientObject *cl);

/* Argument converters (PyArg "O&"): str name, timeout in seconds. */
int tdpy_conv_name(PyObject *o, void *out);    /* const char ** */
int tdpy_conv_timeout(PyObject *o, void *out); /* int * (ms, -1) */
/* o as an int if it is one (operator.index: numpy's integers too), a
 * new reference; NULL for anything else, with no exception set (but
 * one its __index__ raised) */
PyObject *tdpy_index(PyObject *o);
/* uint64_t *: an int in 0..2**64-1 (TypeError, OverflowError) */
int tdpy_conv_version(PyObject *o, void *out);
/* The one optional argument `timeout` (seconds or None, positional or
 * keyword) of next() and acquire(): 1 and *ms, or 0 with an exception. */
int tdpy_timeout_arg(PyObject *args, PyObject *kw, int *ms);

/*
 * Forks of this process (common.c counts them in each child). In a child
 * of fork(), threads of the parent that were inside a call on a client
 * do not exist: tdpy_client_forked, at every entry, makes deliver anew
 * (one of them may have held it) and counts no call in flight (busy), so
 * that the child's calls raise ECHILD and its close() closes, instead of
 * hanging or waiting for calls that never return.
 */
extern unsigned tdpy_forks;
void tdpy_client_forked(ClientObject *self);
/* Whether a call of another thread is in flight on the client (the GIL
 * held: none of this thread's; in a child of fork(), none). */
static inline bool tdpy_client_in_flight(ClientObject *self)
{
	tdpy_client_forked(self);
	return self->c && self->busy > self->idle;
}
/* Checked entry to a client call: NULL (ValueError set) when closed. */
struct td_client *tdpy_client_enter(ClientObject *self);
/* Its end; then tdpy_client_left (events.c's, set at its init) hands
 * the binding the events libtensord queued meanwhile, if it has to. */
void tdpy_client_leave(ClientObject *self);
extern void (*tdpy_client_left)(ClientObject *self);
/* events.c's: the events of a call in flight handed over between the
 * slices of its wait (tdpy_wait_sliced) while a poll() waits for them */
extern void (*tdpy_client_hand_over)(ClientObject *self);
/* Close the handle now (no call in flight): fileno()'s fds, mappings. */
void tdpy_client_close_now(ClientObject *self);
/*
 * Run a libtensord call on an entered client with the GIL released,
 * then leave it. Watch events that arrive meanwhile stay queued in
 * libtensord, whose td_client_fd() (inside fileno()) stays readable.
 */
#define TDPY_CALL(self, rc, expr)                                            \
	do {                                                                 \
		Py_BEGIN_ALLOW_THREADS                                       \
		rc = (expr);                                                 \
		Py_END_ALLOW_THREADS                                         \
		tdpy_client_leave(self);                                     \
	} while (0)

/*
 * A wait of ms (-1: no limit) in slices of TDPY_SIGNAL_SLICE_MS: each a
 * call fn(arg, slice_ms) with the GIL released, between which Python's
 * signal handlers run, so that Ctrl-C ends it (libtensord does not
 * return on EINTR). fn's result when it is neither -ETIMEDOUT nor
 * -EAGAIN (none in that slice); -ETIMEDOUT once ms passed (at once for
 * ms 0); -EINTR with the handler's exception set: run between slices, or
 * inside one whose request the daemon is late to answer (stopped,
 * wedged: tdpy_interrupted, the connection abandoned).
 */
#define TDPY_SIGNAL_SLICE_MS 100
/* A Watch.next() while another thread's call is in flight looks again
 * this often (module.c, watch_wait). */
#define TDPY_BUSY_SLICE_MS 10
int tdpy_wait_sliced(int ms, int (*fn)(void *arg, int slice_ms), void *arg,
		     ClientObject *cl);

/* Whether fileno()'s eventfd is this process's (not a parent's, shared
 * with a child of fork(): only the process that made it uses it). */
bool tdpy_evfd_ours(ClientObject *self);
/* Wake fileno() readers (an eventfd write). */
void tdpy_client_wake(ClientObject *self);
/* Quiet that wake once pending holds nothing (a Watch took the last;
 * events.c, beside what it asks). */
void tdpy_client_unwake(ClientObject *self);
/* epoll_ctl(op, fd) on fileno()'s set (EPOLLIN), only in the process that
 * made it: 0, or -1 and errno (ECHILD in a child of fork(), EBADF once
 * the client is closed). */
int tdpy_client_epoll(ClientObject *self, int op, int fd);

/* numpy descr of a td dtype code (new ref), raw bytes 'V<n>' when numpy
 * has no such type; NULL with an exception when the code is unknown. */
PyArray_Descr *tdpy_descr_of(uint32_t dtype);
/* td dtype code of a numpy descr, -1 with TypeError when none fits. */
int tdpy_dtype_of(const PyArray_Descr *d);
/* dtype argument: a td name ("f32") or anything numpy takes. */
int tdpy_conv_dtype(PyObject *o, void *out); /* uint32_t * */
/* shape argument: an int or a sequence of ints >= 0. */
int tdpy_shape_parse(PyObject *o, npy_intp *shape, int *ndim);
/* strides argument (bytes): the same, "stride" in its errors. */
int tdpy_strides_parse(PyObject *o, npy_intp *strides, int *n);
/* Dense C-order byte strides; 0 and the byte count, -1 on overflow. */
int tdpy_dense(int ndim, const npy_intp *shape, npy_intp itemsize,
	       npy_intp *strides, uint64_t *bytes);
/* Bytes a strided layout spans; -1 with ValueError when it cannot. */
int tdpy_span(int ndim, const npy_intp *shape, const npy_intp *strides,
	      npy_intp itemsize, uint64_t *span);

/* A new Owner of kind, parent referenced; fields zero. */
OwnerObject *tdpy_owner_new(enum owner_kind kind, PyObject *parent);
/* End what the owner (or its root) holds: lease, unpublished loan. */
void tdpy_owner_release(OwnerObject *plane_or_root);
/* An Array over o's tensor, o's reference is stolen (NULL on error). */
PyObject *tdpy_owner_array(OwnerObject *o);
/* The Owner at the end of obj's .base chain, NULL (TypeError) if none. */
OwnerObject *tdpy_owner_of(PyObject *obj);
/* The Owner obj's chain of bases ends at, or NULL; sets no exception. */
OwnerObject *tdpy_owner_at_base(PyObject *obj);
/* release() of an Array or a Lease: None, or NULL with the exception. */
PyObject *tdpy_owner_do_release(OwnerObject *o);
/* Whether the root owner r still holds its lease, loan or slot. */
bool tdpy_owner_held(OwnerObject *r);
/* A BufferError being raised about o's bytes: its text names the tensor
 * (a ring's for its slots and views) and says what refused ("DLPack
 * export", "buffer"). Any other exception is left as it is. */
void tdpy_owner_name_refusal(OwnerObject *o, const char *what);
/* tensord.Array.__dlpack__ and __dlpack_device__ (dlexport.c). */
PyObject *tdpy_array_dlpack(PyObject *self, PyObject *args, PyObject *kw);
PyObject *tdpy_array_dlpack_device(PyObject *self, PyObject *unused);
/* The owner holding the lease or loan: o, or a PLANE's parent. */
OwnerObject *tdpy_owner_root(OwnerObject *o);
/* Whether o's bytes may be written through it: a plane's root decides
 * too (a published alloc(private=False) loan is read-only, its pages
 * the buffer's). */
bool tdpy_owner_writable(OwnerObject *o);
/* A tensord.Planes over root (a reference taken) and its plane arrays
 * (the tuple's reference is stolen); NULL on error. */
PyObject *tdpy_planes_new(OwnerObject *root, PyObject *arrays,
			  const char *format);
/* A new PLANE owner of root: its index, names and dtype set. */
OwnerObject *tdpy_plane_owner(OwnerObject *root, uint32_t i);
/* Give o (a LOAN) a loan of size bytes, mapped shared and writable by
 * the binding (o->map, o->data). 0, or -1 with the exception set. */
int tdpy_loan_open(ClientObject *self, OwnerObject *o, uint64_t size);
/* publish() of a loan whose views may live on: their pages become
 * copy-on-write (unless alloc(private=False)). 0, or -1 with the
 * exception set. */
int tdpy_loan_leave(OwnerObject *o);
/* alloc() of a multi-plane image format: a writable tensord.Planes over
 * one loan (o is consumed). */
PyObject *tdpy_alloc_planes(ClientObject *self, OwnerObject *o);
/*
 * A read-only mapping of [off, off + size) of fd from cl's cache (maps.c)
 * or new: 0 with *m (give it back with tdpy_map_put) and *data, or
 * -errno. tdpy_maps_trim unmaps the idle ones (returns how many);
 * tdpy_maps_detach, at close, too, and leaves the used ones to their
 * last put.
 */
int tdpy_map_get(ClientObject *cl, int fd, uint64_t off, uint64_t size,
		 struct tdpy_map **m, char **data);
void tdpy_map_put(struct tdpy_map *m);
/*
 * A writable shared mapping of the size bytes of a recyclable loan's fd
 * (maps.c), cached or new: 0 with *m and its address, or -errno. The
 * loan's owner gives it back with tdpy_map_put when it dies.
 */
int tdpy_map_loan(ClientObject *cl, int fd, uint64_t size,
		  struct tdpy_map **m, void **addr);
int tdpy_maps_trim(ClientObject *cl);
void tdpy_maps_detach(ClientObject *cl);

/* RuntimeError: a Ring, Subscription or Follow used by two threads. */
PyObject *tdpy_busy_error(void);
/*
 * A Ring's, Subscription's or Follow's busy flag, at its every use: in a
 * child of fork() the parent's thread that set it (waiting in next() or
 * acquire() at the fork) does not exist, so the child clears it, once
 * per fork (*forks is tdpy_forks when the object was made or adopted),
 * and its calls raise ECHILD, its close() frees its copy.
 */
void tdpy_busy_forked(bool *busy, unsigned *forks);

/*
 * What an Owner of a ring slot (SLOT, VIEW) or a followed lease asks the
 * file that made it (ring.c, follow.c), which fill this at their init:
 * owner.c and dlexport.c call up only through it.
 */
struct tdpy_owner_hooks {
	/* Whether a SLOT (VIEW) owner still holds its slot: acquired and
	 * not yet published (the view the subscription holds), on a
	 * connection still open. */
	bool (*slot_held)(OwnerObject *o);
	bool (*view_held)(OwnerObject *o);
	/* A SLOT's (VIEW's) owner died: the ring (subscription) drops its
	 * count of views. */
	void (*slot_gone)(PyObject *ring);
	void (*view_gone)(PyObject *sub);
	/* -1 (tensord.Error EBUSY) while a DLPack export holds the view. */
	int (*view_release)(PyObject *sub, uint64_t version);
	/* A DLPack export of the held view `version` begins (-1 with
	 * BufferError when that view is no longer held) or ends: the slot
	 * stays held, and next(), poll() and release() refuse, while any
	 * export lives. */
	int (*view_export)(PyObject *sub, uint64_t version);
	void (*view_export_gone)(PyObject *sub);
	/* Follows: o, a lease root, holds what the follow gave last; o
	 * ends (released or dead): the follow holds nothing any more. */
	void (*follow_hold)(PyObject *follow, OwnerObject *o);
	void (*follow_let_go)(PyObject *follow, OwnerObject *o);
	/* o's tensor goes back to libtensord with the GIL released: +1
	 * (GIL held) before it lets the GIL go, -1 (GIL released) once
	 * libtensord took it back; next() and poll() meanwhile wait for
	 * that (libtensord would refuse them: EBUSY) */
	void (*follow_releasing)(PyObject *follow, int delta);
	/* -1 (tensord.Error EBUSY) while DLPack exports of root (a
	 * followed lease) live: its hold stays until they are gone. */
	int (*follow_exported)(OwnerObject *root);
};
extern struct tdpy_owner_hooks tdpy_owner_hooks; /* owner.c */

/* Metadata: None, bytes-like or str (UTF-8), into a held Py_buffer. */
int tdpy_meta_get(PyObject *o, Py_buffer *b);

/* libtensord's blocking release of a lease (a loan), which takes its
 * client's lock (that another thread's call may hold until a stopped
 * daemon answers): with the GIL released. */
static inline void tdpy_tensor_release(struct td_tensor *t)
{
	bool kept = tdpy_intr_kept();

	Py_BEGIN_ALLOW_THREADS
	td_tensor_release(t);
	Py_END_ALLOW_THREADS
	if (!kept)
		tdpy_intr_redeliver(NULL);
}
static inline void tdpy_alloc_free(struct td_alloc *a)
{
	bool kept = tdpy_intr_kept();

	Py_BEGIN_ALLOW_THREADS
	td_alloc_free(a);
	Py_END_ALLOW_THREADS
	if (!kept)
		tdpy_intr_redeliver(NULL);
}

/* Client methods made in tensor.c. */
PyObject *tdpy_client_put(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *tdpy_client_alloc(ClientObject *self, PyObject *args,
			    PyObject *kw);
PyObject *tdpy_client_publish(ClientObject *self, PyObject *args,
			      PyObject *kw);
PyObject *tdpy_client_get(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *tdpy_client_publish_many(ClientObject *self, PyObject *args,
				   PyObject *kw);
/* many.c */
PyObject *tdpy_client_get_many(ClientObject *self, PyObject *args,
			       PyObject *kw);
/* A read-only Array (a Planes for several planes) over t, which is
 * consumed, named name (a str, borrowed); follow: the Follow that gave
 * t, or NULL. */
PyObject *tdpy_lease_array(ClientObject *self, struct td_tensor *t,
			   PyObject *name, PyObject *follow);
/*
 * Wait for t's acquire fence, if it has one (docs/python.md, "Fences"),
 * up to what is left of a call's timeout of ms begun at start
 * (tdpy_mono_ms(); < 0: now; ms -1: no limit; sliced, so Ctrl-C ends
 * it): 0, or -errno with the reason in *e (-EINTR: a handler's exception
 * is set); t stays held.
 */
int tdpy_fence_wait(ClientObject *cl, struct td_tensor *t, const char *name,
		    int ms, int64_t start, struct td_error *e);
/* CLOCK_MONOTONIC in ms; and what is left of a timeout of ms begun at
 * start (ms itself when ms <= 0 or start < 0; 0 once spent) */
int64_t tdpy_mono_ms(void);
int tdpy_left_ms(int ms, int64_t start);
/* Client.follow(), in follow.c. */
PyObject *tdpy_client_follow(ClientObject *self, PyObject *args);

/* Client methods made in ring.c. */
PyObject *tdpy_client_ring_create(ClientObject *self, PyObject *args,
				  PyObject *kw);
PyObject *tdpy_client_subscribe(ClientObject *self, PyObject *args,
				PyObject *kw);
PyObject *tdpy_client_ring_stat(ClientObject *self, PyObject *args);

PyMODINIT_FUNC PyInit_tensord(void);

/* __enter__ returning self; __exit__ calling self.close() (no swallow). */
PyObject *tdpy_enter(PyObject *self, PyObject *unused);
PyObject *tdpy_exit_close(PyObject *self, PyObject *args);
/* __exit__ calling self.release(). */
PyObject *tdpy_exit_release(PyObject *self, PyObject *args);

/* Registration of the ring types into the module. */
int tdpy_ring_init(PyObject *m);
int tdpy_array_init(PyObject *m); /* and tdpy_owner_init */
int tdpy_owner_init(PyObject *m);
int tdpy_planes_init(PyObject *m);
int tdpy_follow_init(PyObject *m);

/* events.c: the client's queue of watch Events and its bound */
void tdpy_on_event(struct td_client *c, const struct td_event *ev,
		   void *ud);
/* whether poll() has something to give (fileno() stays readable) */
bool tdpy_events_waiting(ClientObject *self);
int tdpy_events_reset(ClientObject *self); /* a fresh pending; 0, -1 */
void tdpy_events_free(ClientObject *self);
PyObject *tdpy_events_take_all(ClientObject *self);
/* A watch opened: q (its Watch's) linked, counted, its share empty */
void tdpy_events_watch_open(ClientObject *self, struct tdpy_watchq *q,
			    uint64_t id);
/* Its next Event, NULL if none (no exception) */
PyObject *tdpy_events_take(ClientObject *self, struct tdpy_watchq *q);
/* A watch closed: unlinked, and its Events out of pending (no memory
 * needed); none of its events joins pending afterwards */
void tdpy_events_forget(ClientObject *self, struct tdpy_watchq *q);
/* libtensord's bound set for the watches open now (GIL released, deliver
 * held, the client entered) */
void tdpy_events_c_sync(ClientObject *self, struct td_client *c);
int tdpy_conv_event_limit(PyObject *o, void *out); /* unsigned * */
int tdpy_events_limit(ClientObject *self, unsigned max);
PyObject *tdpy_client_get_event_limit(ClientObject *self, void *unused);
int tdpy_client_set_event_limit(ClientObject *self, PyObject *v, void *u);
int tdpy_events_init(PyObject *m);
/* td_client_process() with the GIL released, one thread at a time (the
 * deliver lock): libtensord's events to pending; fileno() woken while
 * pending has any. rc >= 0, or -1 with the exception set. Nothing (0)
 * while another thread's call is in flight (tdpy_client_in_flight):
 * libtensord's lock is that call's until it returns. */
int tdpy_events_process(ClientObject *self, const char *what);

#endif
