/* SPDX-License-Identifier: MIT */
/*
 * Rings: tensord.Ring (the producer) and tensord.Subscription.
 *
 * Slots stay mapped until td_ring_close()/td_sub_close(), so a Ring or
 * Subscription with live arrays over its slots defers that close until
 * the last such array dies: an array never points at unmapped memory.
 *
 * Rings wake readers with a futex, which no event loop can poll. For
 * asyncio, Subscription.poll() starts a waiter thread that takes the next
 * view (td_sub_next, 100 ms at a time so close() never waits longer) and
 * signals the client's fileno(); the loop thread then takes it from
 * poll(). The subscription is used by one thread at a time as libtensord
 * requires: the waiter only runs while the loop thread holds no view.
 */
#include "tdpy.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
	PyObject_HEAD
	ClientObject *client;
	struct td_ring *r; /* NULL once really closed */
	bool closed;       /* close() was called */
	bool busy;         /* acquire() waits with the GIL released */
	unsigned views;    /* live arrays over slots */
	uint32_t dtype;
	int ndim;
	npy_intp shape[TDPY_MAX_DIMS];
	PyObject *name;
} RingObject;

enum wait_state { W_ARMED, W_READY, W_TAKEN, W_DONE };

typedef struct {
	PyObject_HEAD
	ClientObject *client;
	struct td_sub *s; /* NULL once really closed */
	bool closed;
	bool busy;        /* next() waits with the GIL released */
	unsigned views;   /* live arrays over slots */
	uint64_t held;    /* version of the view held, 0 none */
	unsigned exports; /* live DLPack exports of the held view */
	PyObject *name;
	/* poll() mode: a waiter thread takes views */
	bool async;
	bool stop;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	enum wait_state state;
	int rc;
	struct td_view view;
	int evfd; /* the client's eventfd, duplicated */
} SubObject;

static PyObject *busy_error(void)
{
	PyErr_SetString(PyExc_RuntimeError, "used by another thread at "
			"the same time (one thread at a time per ring or "
			"subscription)");
	return NULL;
}

/* ---- Ring ---- */

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

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&OO&|IIp", kwlist,
					 tdpy_conv_name, &name, &shape_o,
					 tdpy_conv_dtype, &desc.dtype, &slots,
					 &readers, &huge))
		return NULL;
	ring = PyObject_New(RingObject, &tdpy_ring_type);
	if (!ring)
		return NULL;
	memset((char *)ring + sizeof(PyObject), 0,
	       sizeof(*ring) - sizeof(PyObject));
	Py_INCREF(self);
	ring->client = self;
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

static void ring_really_close(RingObject *ring)
{
	struct td_ring *r = ring->r;

	ring->r = NULL;
	if (r) {
		Py_BEGIN_ALLOW_THREADS
		td_ring_close(r);
		Py_END_ALLOW_THREADS
	}
}

void tdpy_ring_view_gone(PyObject *obj)
{
	RingObject *ring = (RingObject *)obj;

	if (--ring->views == 0 && ring->closed && !ring->busy)
		ring_really_close(ring);
}

static RingObject *ring_usable(RingObject *ring)
{
	if (ring->closed) {
		PyErr_SetString(PyExc_ValueError, "the ring is closed");
		return NULL;
	}
	if (ring->busy)
		return (RingObject *)busy_error();
	return ring;
}

static PyObject *ring_acquire(RingObject *ring, PyObject *args)
{
	PyObject *to = Py_None;
	struct td_slot slot;
	OwnerObject *o;
	uint64_t bytes;
	int ms = -1, rc;

	if (!PyArg_ParseTuple(args, "|O", &to) ||
	    !tdpy_conv_timeout(to, &ms) || !ring_usable(ring))
		return NULL;
	ring->busy = true;
	Py_BEGIN_ALLOW_THREADS
	rc = td_ring_acquire(ring->r, ms, &slot);
	Py_END_ALLOW_THREADS
	ring->busy = false;
	if (rc < 0)
		return tdpy_raise(rc, NULL, "acquire");
	o = tdpy_owner_new(OWNER_SLOT, (PyObject *)ring);
	if (!o)
		return NULL;
	ring->views++;
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
	return tdpy_owner_array(o);
}

static PyObject *ring_publish(RingObject *ring, PyObject *unused)
{
	uint64_t v = 0;
	int rc;

	if (!ring_usable(ring))
		return NULL;
	rc = td_ring_publish(ring->r, &v);
	if (rc < 0)
		return tdpy_raise(rc, NULL, "publish: no slot acquired");
	return PyLong_FromUnsignedLongLong(v);
}

static PyObject *ring_close(RingObject *ring, PyObject *unused)
{
	ring->closed = true;
	if (!ring->views && !ring->busy)
		ring_really_close(ring);
	Py_RETURN_NONE;
}

static void ring_dealloc(RingObject *ring)
{
	ring_really_close(ring);
	Py_XDECREF(ring->client);
	Py_XDECREF(ring->name);
	PyObject_Free(ring);
}

static PyObject *ring_get_name(RingObject *ring, void *unused)
{
	Py_INCREF(ring->name);
	return ring->name;
}

static PyMethodDef ring_methods[] = {
	{"acquire", (PyCFunction)ring_acquire, METH_VARARGS,
	 "acquire(timeout=None) -> writable Array over a free slot"},
	{"publish", (PyCFunction)ring_publish, METH_NOARGS,
	 "Publish the acquired slot; returns its version."},
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
	.tp_methods = ring_methods,
	.tp_getset = ring_getset,
};

/* ---- Subscription ---- */

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
	sub->evfd = -1;
	pthread_mutex_init(&sub->mu, NULL);
	pthread_cond_init(&sub->cv, NULL);
	Py_INCREF(self);
	sub->client = self;
	sub->name = PyUnicode_FromString(name);
	c = sub->name ? tdpy_client_enter(self) : NULL;
	if (!c) {
		Py_DECREF(sub);
		return NULL;
	}
	TDPY_CALL(self, rc, td_ring_subscribe(c, name, ms, &sub->s, &e));
	if (rc < 0) {
		Py_DECREF(sub);
		return tdpy_raise(rc, &e, "subscribe");
	}
	return (PyObject *)sub;
}

static void *sub_waiter(void *arg)
{
	SubObject *sub = arg;

	pthread_mutex_lock(&sub->mu);
	while (!sub->stop) {
		struct td_view v;
		uint64_t one = 1;
		int rc;

		if (sub->state != W_ARMED) {
			pthread_cond_wait(&sub->cv, &sub->mu);
			continue;
		}
		pthread_mutex_unlock(&sub->mu);
		rc = td_sub_next(sub->s, 100, &v);
		pthread_mutex_lock(&sub->mu);
		if (rc == -ETIMEDOUT)
			continue;
		sub->view = v;
		sub->rc = rc;
		sub->state = W_READY;
		pthread_cond_broadcast(&sub->cv);
		if (write(sub->evfd, &one, sizeof(one)) < 0) {
			/* saturated: readable anyway */
		}
	}
	pthread_mutex_unlock(&sub->mu);
	return NULL;
}

static void sub_stop_waiter(SubObject *sub)
{
	if (!sub->async)
		return;
	pthread_mutex_lock(&sub->mu);
	sub->stop = true;
	pthread_cond_broadcast(&sub->cv);
	pthread_mutex_unlock(&sub->mu);
	Py_BEGIN_ALLOW_THREADS
	pthread_join(sub->th, NULL);
	Py_END_ALLOW_THREADS
	sub->async = false;
	if (sub->evfd >= 0)
		close(sub->evfd);
	sub->evfd = -1;
}

static void sub_really_close(SubObject *sub)
{
	struct td_sub *s = sub->s;

	sub_stop_waiter(sub);
	sub->s = NULL;
	if (s) {
		Py_BEGIN_ALLOW_THREADS
		td_sub_close(s);
		Py_END_ALLOW_THREADS
	}
}

void tdpy_sub_view_gone(PyObject *obj)
{
	SubObject *sub = (SubObject *)obj;

	if (--sub->views == 0 && sub->closed && !sub->busy)
		sub_really_close(sub);
}

/* Give the held view back (either mode). */
static void sub_release_held(SubObject *sub)
{
	if (sub->async) {
		pthread_mutex_lock(&sub->mu);
		if (sub->state == W_TAKEN) {
			td_sub_release(sub->s);
			sub->state = W_ARMED;
			pthread_cond_broadcast(&sub->cv);
		}
		pthread_mutex_unlock(&sub->mu);
	} else if (sub->held) {
		td_sub_release(sub->s);
	}
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

	if (!sub->exports)
		return false;
	snprintf(e.reason, sizeof(e.reason), "the held view (version %llu) "
		 "is exported through DLPack (%u tensors alive); its slot "
		 "stays held until they are gone (del them)",
		 (unsigned long long)sub->held, sub->exports);
	tdpy_raise(-EBUSY, &e, "subscription");
	return true;
}

int tdpy_sub_view_release(PyObject *obj, uint64_t version)
{
	SubObject *sub = (SubObject *)obj;

	if (sub->s && !sub->busy && sub->held == version) {
		if (sub_exported(sub))
			return -1;
		sub_release_held(sub);
	}
	return 0;
}

int tdpy_sub_export(PyObject *obj, uint64_t version)
{
	SubObject *sub = (SubObject *)obj;

	if (!sub->s || sub->held != version) {
		PyErr_SetString(PyExc_BufferError, "this ring view was "
				"released (its slot may be rewritten): no "
				"DLPack export");
		return -1;
	}
	sub->exports++;
	return 0;
}

void tdpy_sub_export_gone(PyObject *obj)
{
	((SubObject *)obj)->exports--;
}

static PyObject *view_array(SubObject *sub, const struct td_view *v)
{
	OwnerObject *o = tdpy_owner_new(OWNER_VIEW, (PyObject *)sub);
	uint64_t bytes;

	if (!o)
		return NULL;
	sub->views++;
	/* where DLPack maps the slot copy-on-write (array.c, dl_place) */
	o->fd = td_sub_plane_fd(sub->s, v, 0, &o->plane_off[0]);
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
	if (sub->closed || !sub->s) {
		PyErr_SetString(PyExc_ValueError,
				"the subscription is closed");
		return NULL;
	}
	if (sub->busy)
		return (SubObject *)busy_error();
	return sub;
}

/* Take the waiter's view (mu held, state READY). */
static PyObject *sub_take(SubObject *sub)
{
	int rc = sub->rc;

	sub->state = rc < 0 ? W_DONE : W_TAKEN;
	if (rc < 0)
		return tdpy_raise(rc, NULL, "next");
	sub->held = sub->view.version;
	return view_array(sub, &sub->view);
}

static int sub_start(SubObject *sub)
{
	if (sub->async)
		return 0;
	if (sub->client->evfd < 0) {
		PyErr_SetString(PyExc_ValueError, "the client is closed");
		return -1;
	}
	sub_release_held(sub);
	sub->evfd = fcntl(sub->client->evfd, F_DUPFD_CLOEXEC, 0);
	if (sub->evfd < 0) {
		PyErr_SetFromErrno(PyExc_OSError);
		return -1;
	}
	sub->state = W_ARMED;
	sub->stop = false;
	if (pthread_create(&sub->th, NULL, sub_waiter, sub)) {
		close(sub->evfd);
		sub->evfd = -1;
		PyErr_SetString(PyExc_OSError, "cannot start a thread");
		return -1;
	}
	sub->async = true;
	return 0;
}

static PyObject *sub_poll(SubObject *sub, PyObject *unused)
{
	PyObject *r = NULL;

	if (!sub_usable(sub) || sub_exported(sub) || sub_start(sub) < 0)
		return NULL;
	pthread_mutex_lock(&sub->mu);
	if (sub->state == W_READY) {
		r = sub_take(sub);
	} else if (sub->state == W_TAKEN) {
		/* like next(): polling again gives the held view back */
		td_sub_release(sub->s);
		sub->held = 0;
		sub->state = W_ARMED;
		pthread_cond_broadcast(&sub->cv);
	}
	pthread_mutex_unlock(&sub->mu);
	if (!r && !PyErr_Occurred())
		Py_RETURN_NONE;
	return r;
}

/*
 * Without the GIL: wait up to ms for the waiter's view and take it. The
 * mutex is never held while taking the GIL (a thread holding the GIL may
 * be waiting for the mutex). Returns the waiter's rc (state READY) or
 * the condition wait's error; *st is the state found.
 */
static int sub_wait_ready(SubObject *sub, int ms, enum wait_state *st,
			  struct td_view *v)
{
	struct timespec dl;
	int rc = 0;

	clock_gettime(CLOCK_REALTIME, &dl);
	if (ms > 0) {
		dl.tv_sec += ms / 1000;
		dl.tv_nsec += (long)(ms % 1000) * 1000000;
		if (dl.tv_nsec >= 1000000000) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000;
		}
	}
	pthread_mutex_lock(&sub->mu);
	while (sub->state == W_ARMED && rc == 0)
		rc = ms < 0 ? pthread_cond_wait(&sub->cv, &sub->mu) :
			      pthread_cond_timedwait(&sub->cv, &sub->mu, &dl);
	*st = sub->state;
	if (sub->state == W_READY) {
		rc = sub->rc;
		*v = sub->view;
		sub->state = rc < 0 ? W_DONE : W_TAKEN;
	}
	pthread_mutex_unlock(&sub->mu);
	return rc;
}

static PyObject *sub_wait(SubObject *sub, int ms)
{
	enum wait_state st;
	struct td_view v;
	int rc = 0;

	if (!sub_usable(sub) || sub_exported(sub))
		return NULL;
	if (!sub->async) {
		sub->busy = true;
		Py_BEGIN_ALLOW_THREADS
		rc = td_sub_next(sub->s, ms, &v);
		Py_END_ALLOW_THREADS
		sub->busy = false;
		sub->held = 0;
		if (rc < 0)
			return tdpy_raise(rc, NULL, "next");
		sub->held = v.version;
		return view_array(sub, &v);
	}
	sub_release_held(sub);
	sub->busy = true;
	Py_BEGIN_ALLOW_THREADS
	rc = sub_wait_ready(sub, ms, &st, &v);
	Py_END_ALLOW_THREADS
	sub->busy = false;
	if (st != W_READY)
		return tdpy_raise(rc == ETIMEDOUT ? -ETIMEDOUT : -EPIPE, NULL,
				  "next");
	if (rc < 0)
		return tdpy_raise(rc, NULL, "next");
	sub->held = v.version;
	return view_array(sub, &v);
}

static PyObject *sub_next_m(SubObject *sub, PyObject *args)
{
	PyObject *to = Py_None;
	int ms;

	if (!PyArg_ParseTuple(args, "|O", &to) ||
	    !tdpy_conv_timeout(to, &ms))
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
	Py_RETURN_NONE;
}

static PyObject *sub_close(SubObject *sub, PyObject *unused)
{
	if (sub->busy)
		return busy_error();
	sub->closed = true;
	sub_stop_waiter(sub);
	if (!sub->views)
		sub_really_close(sub);
	Py_RETURN_NONE;
}

static void sub_dealloc(SubObject *sub)
{
	sub_really_close(sub);
	pthread_mutex_destroy(&sub->mu);
	pthread_cond_destroy(&sub->cv);
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
	{"next", (PyCFunction)sub_next_m, METH_VARARGS,
	 "next(timeout=None) -> read-only Array of the next version "
	 "(gives the held one back first); Timeout, or Error EPIPE once "
	 "the producer closed the ring"},
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
