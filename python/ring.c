/* SPDX-License-Identifier: MIT */
/*
 * Rings: tensord.Ring (the producer) and tensord.Subscription.
 *
 * Slots stay mapped until td_ring_close()/td_sub_close(), so a Ring or
 * Subscription with live arrays over its slots defers that close until
 * the last such array dies: an array never points at unmapped memory.
 *
 * Rings wake readers with a futex, which no event loop can poll. For
 * asyncio, Subscription.poll() uses libtensord's event-loop readers: the
 * subscription's timerfd (td_sub_fd, which the producer's publish fires
 * while the subscription waits by fd) joins Client.fileno()'s epoll set,
 * and td_sub_poll() takes the next view without waiting. Not
 * td_sub_set_handler(): its td_client_process() gives the held view back
 * whenever a newer one exists, which a DLPack export must prevent.
 */
#include "tdpy.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

typedef struct {
	PyObject_HEAD
	ClientObject *client;
	struct td_ring *r; /* NULL once really closed */
	bool closed;       /* close() was called */
	bool busy;         /* acquire() waits with the GIL released */
	unsigned forks;    /* tdpy_busy_forked() */
	unsigned views;    /* live arrays over slots */
	uint64_t tickets;  /* acquire()s that took a slot */
	uint64_t acquired; /* the ticket of the slot acquired, 0 if none */
	PyObject *slot_arrays; /* weakrefs: what acquire() gave for it */
	uint32_t dtype;
	int ndim;
	npy_intp shape[TDPY_MAX_DIMS];
	PyObject *name;
	PyObject *weakrefs;
} RingObject;

typedef struct {
	PyObject_HEAD
	ClientObject *client;
	struct td_sub *s; /* NULL once really closed */
	bool closed;
	bool busy;        /* next() waits with the GIL released */
	unsigned forks;   /* tdpy_busy_forked() */
	unsigned views;   /* live arrays over slots */
	uint64_t held;    /* version of the view held, 0 none */
	bool pending;     /* libtensord holds `fenced`, whose fence has not
			   * signalled: given by the next next()/poll() */
	struct td_view fenced;
	unsigned exports; /* live DLPack exports of the held view */
	uint64_t conn;    /* the client's connection it was made on */
	PyObject *name;
	int efd;          /* poll() mode: td_sub_fd (in the client's epoll) */
	PyObject *weakrefs;
} SubObject;

/* ---- Ring ---- */

/*
 * A ring call's -errno with a reason naming the ring and what happened:
 * libtensord's ring calls fill no td_error, and strerror() read
 * "Connection timed out" for a wait that ran out, "Broken pipe" for a
 * ring that ended. `none` says what did not come within ms.
 */
static PyObject *ring_raise(int rc, PyObject *name, const char *what,
			    const char *none, int ms)
{
	struct td_error e = {.code = rc};
	const char *n = PyUnicode_AsUTF8(name);

	PyErr_Clear(); /* (n NULL: no memory, said as "?") */
	if (rc == -ETIMEDOUT)
		snprintf(e.reason, sizeof(e.reason), "%s of ring \"%s\" within "
			 "%d ms", none, n ? n : "?", ms);
	else if (rc == -EPIPE)
		snprintf(e.reason, sizeof(e.reason), "the ring \"%s\" is closed "
			 "(its producer closed it or went away, or this "
			 "client's connection is gone)", n ? n : "?");
	return tdpy_raise(rc, e.reason[0] ? &e : NULL, what);
}


/* An unsigned int argument (slots, readers): PyArg's "I" would wrap
 * 2**32 + 4 to 4 and -1 to 2**32 - 1 without a word. */
static int conv_uint(PyObject *o, void *out)
{
	PyObject *i = PyNumber_Index(o); /* TypeError: not an integer */
	unsigned long v;

	if (!i)
		return 0;
	v = PyLong_AsUnsignedLong(i); /* OverflowError: < 0 */
	Py_DECREF(i);
	if (v == (unsigned long)-1 && PyErr_Occurred())
		return 0;
	if (v > UINT_MAX) {
		PyErr_SetString(PyExc_OverflowError,
				"int too big to convert (over 2**32 - 1)");
		return 0;
	}
	*(unsigned *)out = (unsigned)v;
	return 1;
}

PyObject *tdpy_client_ring_create(ClientObject *self, PyObject *args,
				  PyObject *kw)
{
	static char *kwlist[] = {"name", "shape", "dtype", "slots",
				 "readers", "huge_pages", NULL};
	struct td_ring_desc desc = {0};
	uint64_t shape[TDPY_MAX_DIMS];
	struct td_error e = {0};
	struct td_client *c;
	PyObject *shape_o;
	RingObject *ring;
	const char *name;
	unsigned slots = 4, readers = 0;
	int huge = 0, rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&OO&|O&O&p", kwlist,
					 tdpy_conv_name, &name, &shape_o,
					 tdpy_conv_dtype, &desc.dtype,
					 conv_uint, &slots, conv_uint,
					 &readers, &huge))
		return NULL;
	ring = PyObject_New(RingObject, &tdpy_ring_type);
	if (!ring)
		return NULL;
	memset((char *)ring + sizeof(PyObject), 0,
	       sizeof(*ring) - sizeof(PyObject));
	Py_INCREF(self);
	ring->client = self;
	ring->forks = tdpy_forks;
	ring->dtype = desc.dtype;
	ring->name = PyUnicode_FromString(name);
	if (!ring->name ||
	    tdpy_shape_parse(shape_o, ring->shape, &ring->ndim) < 0) {
		Py_DECREF(ring);
		return NULL;
	}
	for (int i = 0; i < ring->ndim; i++)
		shape[i] = (uint64_t)ring->shape[i];
	desc.ndim = (uint32_t)ring->ndim;
	desc.shape = shape;
	desc.slot_count = slots;
	desc.reader_count = readers;
	desc.flags = huge ? TD_RING_HUGE_PAGES : 0;
	c = tdpy_client_enter(self);
	if (!c) {
		Py_DECREF(ring);
		return NULL;
	}
	TDPY_CALL(self, rc, td_ring_create(c, name, &desc, &ring->r, &e));
	if (rc < 0) {
		Py_DECREF(ring);
		return tdpy_raise(rc, &e, "ring_create");
	}
	return (PyObject *)ring;
}

/* Deferred (tdpy_client_defer): a ring's or subscription's close asked
 * for by a signal handler inside a call of its client */
static void ring_close_run(struct tdpy_deferred *d, struct td_client *h)
{
	(void)h;
	td_ring_close(d->p);
}

static void sub_close_run(struct tdpy_deferred *d, struct td_client *h)
{
	(void)h;
	td_sub_close(d->p);
}

/* p's close (libtensord takes cl's lock) after the call whose wait this
 * thread's signal handler runs in: true when deferred so */
static bool close_later(ClientObject *cl, void *p,
			void (*run)(struct tdpy_deferred *, struct td_client *))
{
	PyObject *type, *value, *tb;

	if (!tdpy_client_locked_here(cl))
		return false;
	PyErr_Fetch(&type, &value, &tb);
	if (tdpy_client_defer(cl, run, p, 0, NULL) < 0)
		/* left to its close (cl lives: a call of it is in) */
		PyErr_WriteUnraisable((PyObject *)cl);
	PyErr_Restore(type, value, tb);
	return true;
}

/* A ring's or subscription's close: its RING_CLOSE's reply waited for
 * (a signal handler's exception there raised after: it ends no call) */
static void ring_close_now(PyObject *obj, struct td_ring *r, struct td_sub *s)
{
	bool kept = tdpy_intr_kept();

	Py_BEGIN_ALLOW_THREADS
	td_ring_close(r);
	td_sub_close(s);
	Py_END_ALLOW_THREADS
	if (!kept)
		tdpy_intr_redeliver(obj);
}

static void ring_really_close(RingObject *ring)
{
	struct td_ring *r = ring->r;

	ring->r = NULL;
	ring->acquired = 0;
	if (r && !close_later(ring->client, r, ring_close_run))
		ring_close_now((PyObject *)ring, r, NULL);
}

static void tdpy_ring_view_gone(PyObject *obj)
{
	RingObject *ring = (RingObject *)obj;

	tdpy_busy_forked(&ring->busy, &ring->forks);
	if (--ring->views == 0 && ring->closed && !ring->busy)
		ring_really_close(ring);
}

/* After a wait: a close() another thread asked for meanwhile, unless an
 * array over a slot still needs the ring (then its end closes it). */
static void ring_unbusy(RingObject *ring)
{
	ring->busy = false;
	if (ring->closed && !ring->views)
		ring_really_close(ring);
}

static RingObject *ring_usable(RingObject *ring)
{
	tdpy_busy_forked(&ring->busy, &ring->forks);
	if (ring->closed) {
		PyErr_SetString(PyExc_ValueError, "the ring is closed");
		return NULL;
	}
	if (ring->busy)
		return (RingObject *)tdpy_busy_error();
	if (tdpy_client_reentered(ring->client) < 0)
		return NULL;
	tdpy_client_flush(ring->client);
	return ring;
}

/* One slice of acquire() or wait_read() (tdpy_wait_sliced): libtensord
 * waits on a futex, deaf to signals, so Ctrl-C is seen between slices. */
struct ring_arg {
	struct td_ring *r;
	struct td_slot *slot; /* acquire() */
	uint64_t version;     /* wait_read() */
};

static int acquire_slice(void *arg, int slice_ms)
{
	struct ring_arg *a = arg;

	return td_ring_acquire(a->r, slice_ms, a->slot);
}

static int wait_read_slice(void *arg, int slice_ms)
{
	struct ring_arg *a = arg;

	return td_ring_wait_read(a->r, a->version, slice_ms);
}

/* The array over the acquired slot, kept (weakly) for publish() */
static PyObject *slot_array(RingObject *ring, OwnerObject *o)
{
	PyObject *a = tdpy_owner_array(o), *ref;

	if (!a)
		return NULL;
	if (!ring->slot_arrays && !(ring->slot_arrays = PyList_New(0)))
		goto fail;
	ref = PyWeakref_NewRef(a, NULL);
	if (!ref || PyList_Append(ring->slot_arrays, ref) < 0) {
		Py_XDECREF(ref);
		goto fail;
	}
	Py_DECREF(ref);
	return a;
fail:
	Py_DECREF(a);
	return NULL;
}

/*
 * publish(): the slot is the subscribers' now, so the arrays acquire()
 * gave over it turn read-only, with the arrays they view and their
 * owner, which then refuses a writable buffer (flags.writeable = True,
 * memoryview, DLPack), as a published alloc(private=False) array does.
 * An array viewing one of them, made before, keeps its flag (numpy's
 * views copy it): the producer's trust, as for any ring slot.
 */
static void slot_arrays_read_only(RingObject *ring)
{
	PyObject *list = ring->slot_arrays;

	for (Py_ssize_t i = 0; list && i < PyList_GET_SIZE(list); i++) {
		PyObject *a = PyWeakref_GetObject(PyList_GET_ITEM(list, i));
		OwnerObject *o = a != Py_None ? tdpy_owner_at_base(a) : NULL;

		if (o)
			o->writable = false;
		for (; a && PyArray_Check(a);
		     a = PyArray_BASE((PyArrayObject *)a))
			PyArray_CLEARFLAGS((PyArrayObject *)a,
					   NPY_ARRAY_WRITEABLE);
	}
	if (list)
		PyList_SetSlice(list, 0, PyList_GET_SIZE(list), NULL);
}

static PyObject *ring_acquire(RingObject *ring, PyObject *args,
			     PyObject *kw)
{
	struct td_slot slot;
	OwnerObject *o;
	uint64_t bytes;
	int ms = -1, rc;

	if (!tdpy_timeout_arg(args, kw, &ms) || !ring_usable(ring))
		return NULL;
	ring->busy = true;
	rc = tdpy_wait_sliced(ms, acquire_slice,
			      &(struct ring_arg){.r = ring->r, .slot = &slot},
			      NULL);
	ring->busy = false;
	if (rc < 0) {
		ring_unbusy(ring);
		if (rc == -EINTR && tdpy_intr_take())
			return NULL; /* a signal handler's exception */
		return ring_raise(rc, ring->name, "acquire", "no free slot",
				  ms);
	}
	/* acquire() again before publish() is the same slot */
	if (!ring->acquired)
		ring->acquired = ++ring->tickets;
	o = tdpy_owner_new(OWNER_SLOT, (PyObject *)ring);
	if (!o)
		return NULL;
	ring->views++;
	o->ticket = ring->acquired;
	o->conn = ring->client->conn;
	o->writable = true;
	o->dtype = ring->dtype;
	o->ndim = ring->ndim;
	memcpy(o->shape, ring->shape, sizeof(o->shape));
	o->name = ring->name;
	Py_INCREF(o->name);
	tdpy_dense(o->ndim, o->shape, td_tensor_dtype_size(o->dtype),
		   o->strides, &bytes);
	if (bytes > slot.sizes[0]) {
		Py_DECREF(o);
		return tdpy_raise(-EPROTO, NULL, "acquire: slot too small");
	}
	o->data = slot.planes[0];
	o->size = slot.sizes[0];
	return slot_array(ring, o);
}

static PyObject *ring_publish(RingObject *ring, PyObject *unused)
{
	uint64_t v = 0;
	int rc;

	if (!ring_usable(ring))
		return NULL;
	/* it may ask the daemon (the wake-up fds of readers waiting by fd),
	 * under the client's lock: with the GIL released, busy meanwhile */
	ring->busy = true;
	Py_BEGIN_ALLOW_THREADS
	rc = td_ring_publish(ring->r, &v);
	Py_END_ALLOW_THREADS
	ring_unbusy(ring);
	if (rc == -EINVAL) {
		struct td_error e = {.code = rc};
		const char *n = PyUnicode_AsUTF8(ring->name);

		PyErr_Clear();
		snprintf(e.reason, sizeof(e.reason), "no slot of ring \"%s\" "
			 "is acquired (acquire() first)", n ? n : "?");
		return tdpy_raise(rc, &e, "publish");
	}
	if (rc < 0)
		return ring_raise(rc, ring->name, "publish", "", 0);
	ring->acquired = 0; /* the slot is the subscribers' now */
	slot_arrays_read_only(ring);
	return PyLong_FromUnsignedLongLong(v);
}

/* Closing the client ends the ring in the daemon: nothing is held. */
static bool conn_open(ClientObject *cl, OwnerObject *o)
{
	return cl->c && cl->conn == o->conn;
}

static bool tdpy_ring_slot_held(OwnerObject *o)
{
	RingObject *ring = (RingObject *)o->parent;

	return ring->r && ring->acquired == o->ticket &&
	       conn_open(ring->client, o);
}

static PyObject *ring_wait_read(RingObject *ring, PyObject *args,
				PyObject *kw)
{
	static char *kwlist[] = {"version", "timeout", NULL};
	uint64_t v;
	PyObject *to = Py_None;
	int ms = -1, rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|O", kwlist,
					 tdpy_conv_version, &v, &to) ||
	    !tdpy_conv_timeout(to, &ms) || !ring_usable(ring))
		return NULL;
	ring->busy = true;
	rc = tdpy_wait_sliced(ms, wait_read_slice,
			      &(struct ring_arg){.r = ring->r, .version = v},
			      NULL);
	ring_unbusy(ring);
	if (rc == -EINTR && tdpy_intr_take())
		return NULL; /* a signal handler's exception */
	/* the ring refuses only a version it has not published: a value
	 * wrong for it (docs/python.md, "Errors") */
	if (rc == -EINVAL)
		return PyErr_Format(PyExc_ValueError,
				    "wait_read: this ring has not published "
				    "version %llu",
				    (unsigned long long)v);
	if (rc < 0) {
		char none[64];

		snprintf(none, sizeof(none), "no read of version %llu by "
			 "every subscriber", (unsigned long long)v);
		return ring_raise(rc, ring->name, "wait_read", none, ms);
	}
	Py_RETURN_NONE;
}

static PyObject *ring_close(RingObject *ring, PyObject *unused)
{
	tdpy_busy_forked(&ring->busy, &ring->forks);
	ring->closed = true;
	if (!ring->views && !ring->busy)
		ring_really_close(ring);
	Py_RETURN_NONE;
}

static void ring_dealloc(RingObject *ring)
{
	if (ring->weakrefs)
		PyObject_ClearWeakRefs((PyObject *)ring);
	ring_really_close(ring);
	Py_XDECREF(ring->client);
	Py_XDECREF(ring->name);
	Py_XDECREF(ring->slot_arrays);
	PyObject_Free(ring);
}

static PyObject *ring_get_name(RingObject *ring, void *unused)
{
	Py_INCREF(ring->name);
	return ring->name;
}

static PyMethodDef ring_methods[] = {
	{"acquire", (PyCFunction)(void (*)(void))ring_acquire,
	 METH_VARARGS | METH_KEYWORDS,
	 "acquire(timeout=None) -> writable Array over a free slot"},
	{"publish", (PyCFunction)ring_publish, METH_NOARGS,
	 "Publish the acquired slot; returns its version."},
	{"wait_read", (PyCFunction)(void (*)(void))ring_wait_read,
	 METH_VARARGS | METH_KEYWORDS,
	 "wait_read(version, timeout=None): return once every subscriber "
	 "read that version and released it (tensord.Timeout if not)"},
	{"close", (PyCFunction)ring_close, METH_NOARGS,
	 "End the ring (deferred while arrays over its slots live)."},
	{"__enter__", tdpy_enter, METH_NOARGS, NULL},
	{"__exit__", tdpy_exit_close, METH_VARARGS, NULL},
	{NULL},
};

static PyGetSetDef ring_getset[] = {
	{"name", (getter)ring_get_name, NULL, "the ring's name", NULL},
	{NULL},
};

PyTypeObject tdpy_ring_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "tensord.Ring",
	.tp_doc = "A ring this process produces into (Client.ring_create).",
	.tp_basicsize = sizeof(RingObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_dealloc = (destructor)ring_dealloc,
	.tp_weaklistoffset = offsetof(RingObject, weakrefs),
	.tp_methods = ring_methods,
	.tp_getset = ring_getset,
};

/* ---- Subscription ---- */

/* One slice of subscribe()'s wait for the ring to be made. */
struct subscribe_arg {
	struct td_client *c;
	const char *name;
	int ms; /* the whole wait's */
	struct td_sub **s;
	struct td_error *e;
};

static int subscribe_slice(void *arg, int slice_ms)
{
	struct subscribe_arg *a = arg;
	int rc = td_ring_subscribe(a->c, a->name, slice_ms, a->s, a->e);

	/* a last slice of 0 ms says ENOENT, where the wait ran out */
	if (rc == -ENOENT && a->ms != 0)
		rc = -ETIMEDOUT;
	return rc;
}

PyObject *tdpy_client_subscribe(ClientObject *self, PyObject *args,
				PyObject *kw)
{
	static char *kwlist[] = {"name", "timeout", NULL};
	struct td_error e = {0};
	struct td_client *c;
	PyObject *to = Py_None;
	const char *name;
	SubObject *sub;
	int ms = -1, rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|O", kwlist,
					 tdpy_conv_name, &name, &to) ||
	    !tdpy_conv_timeout(to, &ms))
		return NULL;
	sub = PyObject_New(SubObject, &tdpy_sub_type);
	if (!sub)
		return NULL;
	memset((char *)sub + sizeof(PyObject), 0,
	       sizeof(*sub) - sizeof(PyObject));
	sub->efd = -1;
	sub->forks = tdpy_forks;
	Py_INCREF(self);
	sub->client = self;
	sub->conn = self->conn;
	sub->name = PyUnicode_FromString(name);
	c = sub->name ? tdpy_client_enter(self) : NULL;
	if (!c) {
		Py_DECREF(sub);
		return NULL;
	}
	/* in slices, so that Ctrl-C ends a wait for a ring to come */
	rc = tdpy_wait_sliced(ms, subscribe_slice, &(struct subscribe_arg){
		c, name, ms, &sub->s, &e}, self);
	tdpy_client_leave(self);
	if (rc < 0) {
		Py_DECREF(sub);
		if (rc == -EINTR && tdpy_intr_take())
			return NULL; /* a signal handler's exception */
		if (rc == -ETIMEDOUT)
			snprintf(e.reason, sizeof(e.reason), "no ring named "
				 "\"%s\" within %d ms", name, ms);
		return tdpy_raise(rc, &e, "subscribe");
	}
	return (PyObject *)sub;
}

/*
 * Its timerfd out of Client.fileno() (td_sub_close() closes it). At
 * close(), not at the deferred end: nobody poll()s a closed
 * subscription, and the next publish left fileno() readable for good,
 * an event loop spinning until the last view died.
 */
static void sub_unpoll(SubObject *sub)
{
	if (sub->efd >= 0)
		(void)tdpy_client_epoll(sub->client, EPOLL_CTL_DEL, sub->efd);
	sub->efd = -1;
}

static void sub_really_close(SubObject *sub)
{
	struct td_sub *s = sub->s;

	sub_unpoll(sub);
	sub->s = NULL;
	if (s && !close_later(sub->client, s, sub_close_run))
		ring_close_now((PyObject *)sub, NULL, s);
}

static void tdpy_sub_view_gone(PyObject *obj)
{
	SubObject *sub = (SubObject *)obj;

	tdpy_busy_forked(&sub->busy, &sub->forks);
	if (--sub->views == 0 && sub->closed && !sub->busy)
		sub_really_close(sub);
}

/* Give the held view back. */
static void sub_release_held(SubObject *sub)
{
	if (sub->held)
		td_sub_release(sub->s);
	sub->held = 0;
}

/*
 * A DLPack export of the held view keeps its slot held (the exported
 * tensor maps the slot's file copy-on-write, so a rewrite of the slot
 * would show through the pages it did not write): giving the view back
 * waits until every such tensor is gone.
 */
static bool sub_exported(SubObject *sub)
{
	struct td_error e = {.code = -EBUSY};
	const char *n;

	/* its connection gone (the client closed or connected anew), the
	 * daemon ended the subscription and nothing holds the slot any
	 * more: the call says that, as it does without an export */
	if (!sub->exports || !sub->client->c ||
	    sub->client->conn != sub->conn)
		return false;
	n = PyUnicode_AsUTF8(sub->name);
	PyErr_Clear(); /* (n NULL: no memory, said as "?") */
	snprintf(e.reason, sizeof(e.reason), "the held view of ring \"%s\" "
		 "(version %llu) is exported through DLPack (%u tensors "
		 "alive); its slot stays held until they are gone (del them)",
		 n ? n : "?", (unsigned long long)sub->held, sub->exports);
	tdpy_raise(-EBUSY, &e, "subscription");
	return true;
}

static int tdpy_sub_view_release(PyObject *obj, uint64_t version)
{
	SubObject *sub = (SubObject *)obj;

	if (sub->s && !sub->busy && sub->held == version) {
		if (sub_exported(sub))
			return -1;
		sub_release_held(sub);
	}
	return 0;
}

static int tdpy_sub_export(PyObject *obj, uint64_t version)
{
	SubObject *sub = (SubObject *)obj;

	/* busy: next() in another thread gave the held view back before
	 * it waits (sub->held is only updated when it returns) */
	if (!sub->s || sub->busy || sub->held != version) {
		PyErr_SetString(PyExc_BufferError, "this ring view was "
				"released (its slot may be rewritten): no "
				"DLPack export");
		return -1;
	}
	sub->exports++;
	return 0;
}

static void tdpy_sub_export_gone(PyObject *obj)
{
	((SubObject *)obj)->exports--;
}

/* Busy: next() in another thread gave the held view back before it
 * waits (sub->held is only updated when it returns). */
static bool tdpy_sub_view_held(OwnerObject *o)
{
	SubObject *sub = (SubObject *)o->parent;

	return sub->s && !sub->busy && sub->held == o->version &&
	       conn_open(sub->client, o);
}

static PyObject *view_array(SubObject *sub, const struct td_view *v)
{
	OwnerObject *o = tdpy_owner_new(OWNER_VIEW, (PyObject *)sub);
	uint64_t bytes;

	if (!o)
		return NULL;
	sub->views++;
	o->conn = sub->client->conn;
	/* where DLPack maps the slot copy-on-write (array.c, dl_place) */
	o->fd = td_sub_plane_fd(sub->s, v, 0, &o->file_off);
	o->version = v->version;
	o->dtype = v->dtype;
	o->name = sub->name;
	Py_INCREF(o->name);
	if (v->ndim > TDPY_MAX_DIMS || !td_tensor_dtype_size(v->dtype)) {
		Py_DECREF(o);
		return tdpy_raise(-EBADMSG, NULL, "next: bad ring layout");
	}
	o->ndim = (int)v->ndim;
	for (int i = 0; i < o->ndim; i++)
		o->shape[i] = (npy_intp)v->shape[i];
	if (tdpy_dense(o->ndim, o->shape, td_tensor_dtype_size(v->dtype),
		       o->strides, &bytes) < 0 || v->plane_count < 1 ||
	    bytes > v->sizes[0]) {
		Py_DECREF(o);
		return tdpy_raise(-EBADMSG, NULL, "next: slot too small");
	}
	o->data = (char *)v->planes[0];
	o->size = v->sizes[0];
	return tdpy_owner_array(o);
}

static SubObject *sub_usable(SubObject *sub)
{
	tdpy_busy_forked(&sub->busy, &sub->forks);
	if (sub->closed || !sub->s) {
		PyErr_SetString(PyExc_ValueError,
				"the subscription is closed");
		return NULL;
	}
	if (sub->busy)
		return (SubObject *)tdpy_busy_error();
	if (tdpy_client_reentered(sub->client) < 0)
		return NULL;
	tdpy_client_flush(sub->client);
	return sub;
}

/* poll() mode: the subscription's timerfd joins Client.fileno(). */
static int sub_start(SubObject *sub)
{
	int fd;

	if (sub->efd >= 0)
		return 0;
	if (sub->client->epfd < 0) {
		PyErr_SetString(PyExc_ValueError, "the client is closed");
		return -1;
	}
	sub->busy = true;
	Py_BEGIN_ALLOW_THREADS
	fd = td_sub_fd(sub->s); /* one RING_WAKE round trip, once */
	Py_END_ALLOW_THREADS
	sub->busy = false;
	if (fd < 0) {
		tdpy_raise(fd, NULL, "poll: the ring's timerfd");
		return -1;
	}
	if (tdpy_client_epoll(sub->client, EPOLL_CTL_ADD, fd) < 0) {
		PyErr_SetFromErrno(PyExc_OSError);
		return -1;
	}
	sub->efd = fd;
	return 0;
}

static int fence_slice(void *arg, int slice_ms)
{
	return td_sub_fence_wait(((SubObject *)arg)->s, slice_ms);
}

/*
 * A view is handed out only once its slot's fence signalled (a producer
 * that publishes with td_ring_publish_fenced() while its device still
 * writes): wait for the view libtensord now holds, up to what is left of
 * a call's timeout of ms begun at start (tdpy_left_ms). Until then it
 * stays pending: the next next()/poll() waits on it again rather than
 * skip it. 0, -ETIMEDOUT, -EPIPE (the producer closed or died), -EINTR
 * with a handler's exception set.
 */
static int sub_fence_wait(SubObject *sub, const struct td_view *v, int ms,
			  int64_t start)
{
	int rc = tdpy_wait_sliced(tdpy_left_ms(ms, start), fence_slice, sub,
				  NULL);

	sub->pending = rc == -ETIMEDOUT || rc == -EINTR;
	if (sub->pending)
		sub->fenced = *v;
	return rc;
}

static PyObject *fence_raise(SubObject *sub, int rc, int ms)
{
	struct td_error e = {.code = rc};

	if (rc == -EINTR && tdpy_intr_take())
		return NULL; /* a signal handler's exception */
	if (rc == -ETIMEDOUT)
		snprintf(e.reason, sizeof(e.reason),
			 "the fence of \"%s\" version %llu did not signal "
			 "within %d ms", PyUnicode_AsUTF8(sub->name),
			 (unsigned long long)sub->fenced.version, ms);
	else if (rc == -EPIPE)
		snprintf(e.reason, sizeof(e.reason), "the fence of \"%s\" "
			 "will not signal: its producer closed the ring",
			 PyUnicode_AsUTF8(sub->name));
	else /* -EBADMSG: a value no producer writes */
		snprintf(e.reason, sizeof(e.reason), "the fence of \"%s\": "
			 "%s", PyUnicode_AsUTF8(sub->name), strerror(-rc));
	return tdpy_raise(rc, &e, "next");
}

/* Without waiting: give the held view back, take the next or None. */
static PyObject *sub_poll(SubObject *sub, PyObject *unused)
{
	struct td_view v = sub->fenced;
	int rc;

	if (!sub_usable(sub) || sub_exported(sub) || sub_start(sub) < 0)
		return NULL;
	sub->held = 0; /* td_sub_poll() releases it */
	rc = sub->pending ? 0 : td_sub_poll(sub->s, &v);
	if (rc == -EAGAIN)
		Py_RETURN_NONE;
	if (rc < 0)
		return ring_raise(rc, sub->name, "poll", "", 0);
	rc = sub_fence_wait(sub, &v, 0, -1);
	if (rc == -ETIMEDOUT) {
		/* a fence wakes nobody: look again in a millisecond */
		(void)timerfd_settime(sub->efd, 0,
				      &(struct itimerspec){
					      .it_value = {0, 1000000}},
				      NULL);
		Py_RETURN_NONE;
	}
	if (rc < 0)
		return fence_raise(sub, rc, 0);
	sub->held = v.version;
	return view_array(sub, &v);
}

struct sub_arg {
	SubObject *sub;
	struct td_view *v;
};

/* One slice of Subscription.next() (tdpy_wait_sliced). */
static int sub_slice(void *arg, int slice_ms)
{
	struct sub_arg *a = arg;

	return td_sub_next(a->sub->s, slice_ms, a->v);
}

static PyObject *sub_wait(SubObject *sub, int ms)
{
	int64_t start = tdpy_mono_ms(); /* the timeout's, fence included */
	struct td_view v;
	int rc;

	if (!sub_usable(sub) || sub_exported(sub))
		return NULL;
	sub->busy = true;
	v = sub->fenced;
	rc = sub->pending ? 0
			  : tdpy_wait_sliced(ms, sub_slice,
					     &(struct sub_arg){sub, &v}, NULL);
	if (rc == 0 && (rc = sub_fence_wait(sub, &v, ms, start)) < 0) {
		sub->busy = false;
		sub->held = 0;
		return fence_raise(sub, rc, ms);
	}
	sub->busy = false;
	sub->held = 0;
	/* a sleep in td_sub_next() disarms the timerfd: wake fileno() so
	 * that the loop's next poll() arms it again */
	if (sub->efd >= 0)
		(void)timerfd_settime(sub->efd, 0,
				      &(struct itimerspec){.it_value = {0, 1}},
				      NULL); /* a timerfd: armed, not written */
	if (rc == -EINTR && tdpy_intr_take())
		return NULL; /* a signal handler's exception */
	if (rc < 0)
		return ring_raise(rc, sub->name, "next", "no new version",
				  ms);
	sub->held = v.version;
	return view_array(sub, &v);
}

static PyObject *sub_next_m(SubObject *sub, PyObject *args, PyObject *kw)
{
	int ms;

	if (!tdpy_timeout_arg(args, kw, &ms))
		return NULL;
	return sub_wait(sub, ms);
}

/* for view in sub: ends (StopIteration) when the producer closed it. */
static PyObject *sub_iternext(SubObject *sub)
{
	PyObject *r = sub_wait(sub, -1);
	PyObject *type, *value, *tb;

	if (r || !PyErr_ExceptionMatches(tdpy_error))
		return r;
	PyErr_Fetch(&type, &value, &tb);
	PyErr_NormalizeException(&type, &value, &tb);
	{
		PyObject *no = value ? PyObject_GetAttrString(value, "errno")
				     : NULL;
		long code = no ? PyLong_AsLong(no) : 0;

		Py_XDECREF(no);
		if (code == EPIPE) {
			Py_XDECREF(type);
			Py_XDECREF(value);
			Py_XDECREF(tb);
			PyErr_Clear();
			return NULL; /* StopIteration */
		}
	}
	PyErr_Restore(type, value, tb);
	return NULL;
}

static PyObject *sub_release_m(SubObject *sub, PyObject *unused)
{
	if (!sub_usable(sub) || sub_exported(sub))
		return NULL;
	sub_release_held(sub);
	/* a view whose fence did not signal in time is given back too, so
	 * the producer may reuse its slot (the next next() takes a newer) */
	if (sub->pending)
		td_sub_release(sub->s);
	sub->pending = false;
	Py_RETURN_NONE;
}

static PyObject *sub_close(SubObject *sub, PyObject *unused)
{
	tdpy_busy_forked(&sub->busy, &sub->forks);
	if (sub->busy)
		return tdpy_busy_error();
	sub->closed = true;
	sub_unpoll(sub);
	if (!sub->views)
		sub_really_close(sub);
	Py_RETURN_NONE;
}

static void sub_dealloc(SubObject *sub)
{
	if (sub->weakrefs)
		PyObject_ClearWeakRefs((PyObject *)sub);
	sub_really_close(sub);
	Py_XDECREF(sub->client);
	Py_XDECREF(sub->name);
	PyObject_Free(sub);
}

static PyObject *sub_get_name(SubObject *sub, void *unused)
{
	Py_INCREF(sub->name);
	return sub->name;
}

static PyMethodDef sub_methods[] = {
	{"next", (PyCFunction)(void (*)(void))sub_next_m,
	 METH_VARARGS | METH_KEYWORDS,
	 "next(timeout=None) -> read-only Array of the next version "
	 "(gives the held one back first); Timeout, or Error EPIPE once "
	 "the producer closed the ring or the subscription is gone (its "
	 "connection dropped)"},
	{"poll", (PyCFunction)sub_poll, METH_NOARGS,
	 "Without waiting: the next view or None; wakes Client.fileno()"},
	{"release", (PyCFunction)sub_release_m, METH_NOARGS,
	 "Give the held view back so its slot can be rewritten."},
	{"close", (PyCFunction)sub_close, METH_NOARGS,
	 "End the subscription (deferred while arrays over slots live)."},
	{"__enter__", tdpy_enter, METH_NOARGS, NULL},
	{"__exit__", tdpy_exit_close, METH_VARARGS, NULL},
	{NULL},
};

static PyGetSetDef sub_getset[] = {
	{"name", (getter)sub_get_name, NULL, "the ring's name", NULL},
	{NULL},
};

PyTypeObject tdpy_sub_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "tensord.Subscription",
	.tp_doc = "A subscription to a ring (Client.subscribe); iterating "
		  "gives each next view until the producer closes.",
	.tp_basicsize = sizeof(SubObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_dealloc = (destructor)sub_dealloc,
	.tp_weaklistoffset = offsetof(SubObject, weakrefs),
	.tp_iter = PyObject_SelfIter,
	.tp_iternext = (iternextfunc)sub_iternext,
	.tp_methods = sub_methods,
	.tp_getset = sub_getset,
};

PyObject *tdpy_client_ring_stat(ClientObject *self, PyObject *args)
{
	struct td_ring_stat st;
	struct td_error e = {0};
	struct td_client *c;
	const char *name;
	int rc;

	if (!PyArg_ParseTuple(args, "O&", tdpy_conv_name, &name))
		return NULL;
	c = tdpy_client_enter(self);
	if (!c)
		return NULL;
	TDPY_CALL(self, rc, td_client_ring_stat(c, name, &st, &e));
	if (rc < 0)
		return tdpy_raise(rc, &e, "ring_stat");
	return Py_BuildValue("{s:K,s:I,s:I,s:I,s:O,s:K,s:K}", "id",
			     (unsigned long long)st.id, "slot_count",
			     st.slot_count, "reader_count", st.reader_count,
			     "subscribers", st.subscribers, "closed",
			     st.closed ? Py_True : Py_False, "latest_version",
			     (unsigned long long)st.latest_version,
			     "daemon_requests",
			     (unsigned long long)st.daemon_requests);
}

int tdpy_ring_init(PyObject *m)
{
	tdpy_owner_hooks.slot_held = tdpy_ring_slot_held;
	tdpy_owner_hooks.slot_gone = tdpy_ring_view_gone;
	tdpy_owner_hooks.view_held = tdpy_sub_view_held;
	tdpy_owner_hooks.view_gone = tdpy_sub_view_gone;
	tdpy_owner_hooks.view_release = tdpy_sub_view_release;
	tdpy_owner_hooks.view_export = tdpy_sub_export;
	tdpy_owner_hooks.view_export_gone = tdpy_sub_export_gone;
	if (PyType_Ready(&tdpy_ring_type) < 0 ||
	    PyType_Ready(&tdpy_sub_type) < 0)
		return -1;
	Py_INCREF(&tdpy_ring_type);
	Py_INCREF(&tdpy_sub_type);
	if (PyModule_AddObject(m, "Ring", (PyObject *)&tdpy_ring_type) < 0 ||
	    PyModule_AddObject(m, "Subscription",
			       (PyObject *)&tdpy_sub_type) < 0)
		return -1;
	return 0;
}
