/* SPDX-License-Identifier: MIT */
/*
 * The tensord Python module, on top of the binding's files: Client,
 * Watch and entries, and the module's init (the Client's put, alloc,
 * publish and get are in tensor.c, its rings in ring.c, follow in
 * follow.c, events in events.c, arrays in array.c and owner.c, DLPack in
 * dlexport.c; errors and arguments in common.c). Owns no
 * protocol logic: everything goes through libtensord's public API.
 * Every call that may wait on the daemon releases the GIL.
 */
#include "tdpy.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static PyTypeObject entry_type;

/* ---- Client ---- */

/* -1 (RuntimeError) when self has a connection, also a closed one that
 * waits for a call of another thread still in it; else 0 */
static int client_unconnected(ClientObject *self)
{
	if (!self->handle)
		return 0;
	/* closed, but a call of another thread still waits on the old
	 * connection, which closes when it returns */
	PyErr_SetString(PyExc_RuntimeError, self->c ?
			"already connected" :
			"the client's close() waits for a call of another "
			"thread still in it: connect again once that call "
			"returned");
	return -1;
}

static int client_init(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"socket", "event_limit", NULL};
	PyObject *path = NULL;
	unsigned limit = 0;
	struct td_error e = {0};
	struct epoll_event ee = {.events = EPOLLIN};
	struct td_client *h = NULL;
	const char *p = NULL, *reconnect;
	uint32_t flags;
	int rc, sock;

	if (client_unconnected(self) < 0 ||
	    !PyArg_ParseTupleAndKeywords(args, kw, "|O&$O&", kwlist,
					 PyUnicode_FSConverter, &path,
					 tdpy_conv_event_limit, &limit))
		return -1;
	if (path)
		p = PyBytes_AS_STRING(path);
	/* into h, not self: other threads read self->handle meanwhile; its
	 * HELLO waits as any call does (Ctrl-C ends it: tdpy_interrupted),
	 * with td_client_connect()'s $TENSORD_RECONNECT */
	reconnect = getenv("TENSORD_RECONNECT");
	flags = reconnect && !strcmp(reconnect, "1") ? TD_CLIENT_RECONNECT : 0;
	Py_BEGIN_ALLOW_THREADS
	rc = td_client_connect_intr(p, flags, tdpy_interrupted, self, &h, &e);
	Py_END_ALLOW_THREADS
	Py_XDECREF(path);
	if (rc < 0) {
		tdpy_raise(rc, &e, "connect");
		return -1;
	}
	/* another thread's __init__ connected self while this one did:
	 * theirs stays, this connection goes (it would leak) */
	if (client_unconnected(self) < 0) {
		Py_BEGIN_ALLOW_THREADS
		td_client_close(h);
		Py_END_ALLOW_THREADS
		return -1;
	}
	self->handle = self->c = h;
	self->conn++; /* leases of an earlier connection stay ended */
	/* a closed client connected again: its old list goes */
	tdpy_events_reset(self); /* checked below */
	/* atomic: tdpy_events_c_sync reads it without the GIL */
	__atomic_store_n(&self->event_limit, limit, __ATOMIC_RELAXED);
	self->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	self->epfd = epoll_create1(EPOLL_CLOEXEC);
	self->epfd_forks = tdpy_forks;
	/* libtensord's own descriptor: readable while it has work queued */
	sock = td_client_fd(self->c);
	self->cfd = sock;
	self->cfd_parked = false;
	/* (nobody else uses the new handle yet: no deliver lock needed) */
	if (self->pending)
		tdpy_events_c_sync(self, self->c);
	if (!self->pending || self->evfd < 0 || self->epfd < 0 || sock < 0 ||
	    td_client_set_event_handler(self->c, tdpy_on_event, self) < 0 ||
	    td_client_set_interrupt_ex(self->c, tdpy_interrupted, self,
				       TD_INTR_SEND | TD_INTR_PARKED) < 0 ||
	    epoll_ctl(self->epfd, EPOLL_CTL_ADD, sock, &ee) < 0 ||
	    epoll_ctl(self->epfd, EPOLL_CTL_ADD, self->evfd, &ee) < 0) {
		if (!PyErr_Occurred())
			PyErr_SetFromErrno(PyExc_OSError);
		self->c = NULL;
		tdpy_client_close_now(self);
		return -1;
	}
	return 0;
}

static PyObject *client_new(PyTypeObject *t, PyObject *args, PyObject *kw)
{
	ClientObject *self = (ClientObject *)t->tp_alloc(t, 0);
	pthread_mutexattr_t a;

	if (!self)
		return NULL;
	self->epfd = self->evfd = self->cfd = -1;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&self->deliver, &a);
	pthread_mutexattr_destroy(&a);
	self->forks = tdpy_forks;
	return (PyObject *)self;
}

static PyObject *client_close(ClientObject *self, PyObject *unused)
{
	tdpy_client_forked(self);
	self->c = NULL;
	if (!self->busy && self->handle)
		tdpy_client_close_now(self);
	Py_RETURN_NONE;
}

static void client_dealloc(ClientObject *self)
{
	if (self->weakrefs)
		PyObject_ClearWeakRefs((PyObject *)self);
	tdpy_client_forked(self);
	self->c = NULL;
	if (self->handle)
		tdpy_client_close_now(self); /* and what was deferred */
	else
		tdpy_client_flush(self); /* (a handler's, in a failed HELLO) */
	tdpy_events_free(self);
	pthread_mutex_destroy(&self->deliver);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *client_enter_m(ClientObject *self, PyObject *unused)
{
	if (!self->c) {
		PyErr_SetString(PyExc_ValueError, "the client is closed");
		return NULL;
	}
	return tdpy_enter((PyObject *)self, NULL);
}


static PyObject *client_closed(ClientObject *self, void *unused)
{
	return PyBool_FromLong(!self->c);
}

static PyObject *client_info(ClientObject *self, PyObject *unused)
{
	struct td_client_info i;

	if (!self->c) {
		PyErr_SetString(PyExc_ValueError, "the client is closed");
		return NULL;
	}
	/* libtensord's lock: another thread's call may hold it until its
	 * reply comes (a daemon stopped: for ever), so without the GIL */
	if (!tdpy_client_enter(self))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	td_client_info(self->handle, &i);
	Py_END_ALLOW_THREADS
	tdpy_client_leave(self);
	return Py_BuildValue("{s:I,s:s,s:s,s:K,s:s}", "daemon_pid",
			     i.daemon_pid, "path_in",
			     i.path_in == TD_CLIENT_PATH_PIDFD ? "pidfd" : "scm",
			     "path_out",
			     i.path_out == TD_CLIENT_PATH_PIDFD ? "pidfd" :
								  "scm",
			     "max_bytes", (unsigned long long)i.max_bytes,
			     "ident", i.ident);
}


static PyObject *entry_new(const struct td_entry *en)
{
	PyObject *r = PyStructSequence_New(&entry_type), *shape;
	const char *dn = td_tensor_dtype_name(en->dtype);
	uint32_t nd = en->ndim < TD_ENTRY_MAX_DIMS ? en->ndim :
						     TD_ENTRY_MAX_DIMS;

	if (!r)
		return NULL;
	shape = PyTuple_New(nd);
	if (!shape) {
		Py_DECREF(r);
		return NULL;
	}
	for (uint32_t i = 0; i < nd; i++)
		PyTuple_SET_ITEM(shape, i,
				 PyLong_FromUnsignedLongLong(en->shape[i]));
	PyStructSequence_SET_ITEM(r, 0, PyUnicode_DecodeUTF8(en->name,
		(Py_ssize_t)strlen(en->name), "replace"));
	PyStructSequence_SET_ITEM(r, 1,
				  PyLong_FromUnsignedLongLong(en->version));
	PyStructSequence_SET_ITEM(r, 2, PyUnicode_FromString(dn ? dn : "?"));
	PyStructSequence_SET_ITEM(r, 3, shape);
	PyStructSequence_SET_ITEM(r, 4,
				  PyLong_FromUnsignedLongLong(en->bytes));
	PyStructSequence_SET_ITEM(r, 5, PyLong_FromUnsignedLong(
						en->lease_count));
	PyStructSequence_SET_ITEM(r, 6, PyLong_FromUnsignedLong(en->flags));
	PyStructSequence_SET_ITEM(r, 7, PyBytes_FromStringAndSize(
		en->meta, (Py_ssize_t)en->meta_len));
	for (int i = 0; i < 8; i++)
		if (!PyStructSequence_GET_ITEM(r, i)) {
			Py_DECREF(r);
			return NULL;
		}
	return r;
}

static PyObject *client_stat(ClientObject *self, PyObject *args)
{
	struct td_error e = {0};
	struct td_entry en = {0};
	struct td_client *c;
	const char *name;
	PyObject *r;
	int rc;

	if (!PyArg_ParseTuple(args, "O&", tdpy_conv_name, &name))
		return NULL;
	c = tdpy_client_enter(self);
	if (!c)
		return NULL;
	TDPY_CALL(self, rc, td_client_stat(c, name, &en, &e));
	if (rc < 0)
		return tdpy_raise(rc, &e, "stat");
	r = entry_new(&en);
	td_entry_fini(&en);
	return r;
}

static PyObject *client_ls(ClientObject *self, PyObject *args)
{
	struct td_error e = {0};
	struct td_entry *list = NULL;
	struct td_client *c;
	const char *prefix = NULL;
	PyObject *r;
	size_t n = 0;
	int rc;

	if (!PyArg_ParseTuple(args, "|z", &prefix))
		return NULL;
	c = tdpy_client_enter(self);
	if (!c)
		return NULL;
	TDPY_CALL(self, rc, td_client_list(c, prefix, &list, &n, &e));
	if (rc < 0)
		return tdpy_raise(rc, &e, "ls");
	r = PyList_New((Py_ssize_t)n);
	for (size_t i = 0; r && i < n; i++) {
		PyObject *x = entry_new(&list[i]);

		if (!x) {
			Py_CLEAR(r);
			break;
		}
		PyList_SET_ITEM(r, (Py_ssize_t)i, x);
	}
	td_entry_list_free(list, n);
	return r;
}

static PyObject *client_rm(ClientObject *self, PyObject *args)
{
	struct td_error e = {0};
	struct td_client *c;
	const char *name;
	uint64_t v = 0;
	int rc;

	if (!PyArg_ParseTuple(args, "O&", tdpy_conv_name, &name))
		return NULL;
	c = tdpy_client_enter(self);
	if (!c)
		return NULL;
	TDPY_CALL(self, rc, td_client_delete(c, name, &v, &e));
	if (rc < 0)
		return tdpy_raise(rc, &e, "rm");
	return PyLong_FromUnsignedLongLong(v);
}

static PyObject *client_trim(ClientObject *self, PyObject *unused)
{
	struct td_client *c = tdpy_client_enter(self);
	int rc;

	if (!c)
		return NULL;
	TDPY_CALL(self, rc, td_client_trim(c));
	return PyLong_FromLong(rc + tdpy_maps_trim(self));
}

static PyObject *client_fileno(ClientObject *self, PyObject *unused)
{
	if (!self->c) {
		PyErr_SetString(PyExc_ValueError, "the client is closed");
		return NULL;
	}
	return PyLong_FromLong(self->epfd);
}

/*
 * Every queued event, without waiting; clears fileno()'s readiness. A
 * broken connection raises once the events that came before are given.
 */
static PyObject *client_poll(ClientObject *self, PyObject *unused)
{
	PyObject *r;

	if (!self->c) {
		PyErr_SetString(PyExc_ValueError, "the client is closed");
		return NULL;
	}
	/*
	 * Another thread's call in flight holds libtensord until it
	 * returns: no wait for it here, what pending has is given, and
	 * libtensord's fd leaves fileno() meanwhile (the events that call
	 * reads keep it readable, and the loop would call back at once, for
	 * ever); it is back when the last call returns (tdpy_client_leave).
	 */
	if (tdpy_client_in_flight(self) && !self->cfd_parked &&
	    tdpy_client_epoll(self, EPOLL_CTL_DEL, self->cfd) == 0)
		self->cfd_parked = true;
	if (tdpy_events_process(self, "poll") < 0) {
		if (!tdpy_events_waiting(self))
			return NULL;
		PyErr_Clear(); /* the next call raises it again */
	}
	r = tdpy_events_take_all(self);
	if (r)
		tdpy_client_unwake(self);
	return r;
}

/* ---- Watch ---- */

typedef struct {
	PyObject_HEAD
	ClientObject *client;
	uint64_t id;
	uint64_t conn; /* the client's connection the watch is on */
	struct tdpy_watchq q; /* its share of the client's queue (events.c) */
	bool open;
	PyObject *weakrefs;
} WatchObject;

/*
 * The daemon's watch, then its Watch linked (events.c), with deliver
 * held throughout: another thread's td_client_process() could otherwise
 * deliver the watch's first events before the Watch is linked, and they
 * would be dropped as a closed watch's.
 */
static PyObject *client_watch(ClientObject *self, PyObject *args,
			      PyObject *kw)
{
	static char *kwlist[] = {"name", "prefix", NULL};
	struct td_error e = {0};
	struct td_client *c;
	WatchObject *w = NULL;
	const char *name;
	uint64_t id = 0;
	int prefix = 1, rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|p", kwlist,
					 tdpy_conv_name, &name, &prefix))
		return NULL;
	c = tdpy_client_enter(self);
	if (!c)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&self->deliver);
	rc = td_client_watch(c, name, prefix ? TD_WATCH_PREFIX : 0, &id, &e);
	Py_END_ALLOW_THREADS /* (deliver, then the GIL: the handler's order) */
	if (rc == 0 && (w = PyObject_New(WatchObject, &tdpy_watch_type))) {
		w->weakrefs = NULL;
		Py_INCREF(self);
		w->client = self;
		w->id = id;
		w->conn = self->conn;
		w->open = true;
		tdpy_events_watch_open(self, &w->q, id);
	}
	/* libtensord keeps room for this watch's events too */
	Py_BEGIN_ALLOW_THREADS
	tdpy_events_c_sync(self, c);
	pthread_mutex_unlock(&self->deliver);
	Py_END_ALLOW_THREADS
	tdpy_client_leave(self);
	if (rc < 0)
		return tdpy_raise(rc, &e, "watch");
	return (PyObject *)w; /* NULL: MemoryError (the daemon's watch
			       * stays, its events dropped) */
}

/*
 * Close: at once, with the GIL held, the Watch is unlinked and its
 * Events leave pending (events.c): none comes out afterwards, also
 * when another thread is delivering or taking events meanwhile (its
 * poll() during the UNWATCH round trip took them before). Then the
 * daemon's watch ends, and a td_client_process() hands over its events
 * still in libtensord's queue (none come after the UNWATCH), which the
 * handler drops: with a bound they would hold the others' room there.
 */
/* Deferred (tdpy_client_defer): a Watch's end in the daemon (cl, in
 * p, lives as long as its list of deferred ones: its dealloc runs them) */
static void unwatch_run(struct tdpy_deferred *d, struct td_client *h)
{
	ClientObject *cl = d->p;

	if (!h)
		return;
	(void)td_client_unwatch(h, d->id, NULL);
	pthread_mutex_lock(&cl->deliver);
	tdpy_events_c_sync(cl, h);
	pthread_mutex_unlock(&cl->deliver);
}

static void watch_end(WatchObject *w)
{
	ClientObject *cl = w->client;
	struct td_client *c;
	bool kept = tdpy_intr_kept();
	int rc;

	if (!w->open)
		return;
	w->open = false;
	tdpy_events_forget(cl, &w->q);
	tdpy_client_unwake(cl); /* its Events woke fileno() */
	/* ids are per connection: a client connected again may have
	 * another watch of this id, which an UNWATCH would end */
	if (!cl->c || cl->conn != w->conn)
		return;
	/* a signal handler inside a call of cl, whose lock this thread
	 * holds: after that call (no exception: a dying Watch raises none) */
	if (tdpy_client_locked_here(cl)) {
		if (tdpy_client_defer(cl, unwatch_run, cl, w->id, NULL) < 0)
			PyErr_Clear(); /* its events dropped, as a closed
					* watch's are */
		return;
	}
	c = tdpy_client_enter(cl);
	if (!c) { /* closed meanwhile (a deferred release let the GIL go) */
		PyErr_Clear();
		return;
	}
	Py_BEGIN_ALLOW_THREADS
	rc = td_client_unwatch(c, w->id, NULL);
	pthread_mutex_lock(&cl->deliver);
	tdpy_events_c_sync(cl, c);
	pthread_mutex_unlock(&cl->deliver);
	Py_END_ALLOW_THREADS
	tdpy_client_leave(cl);
	(void)rc;
	/* a signal handler's exception in the UNWATCH's wait: it ends no
	 * call (the connection is abandoned) */
	if (!kept)
		tdpy_intr_redeliver((PyObject *)w);
	if (cl->c && tdpy_events_process(cl, "watch close") < 0)
		PyErr_Clear();
}

static void watch_dealloc(WatchObject *w)
{
	PyObject *type, *value, *tb;

	if (w->weakrefs)
		PyObject_ClearWeakRefs((PyObject *)w);
	PyErr_Fetch(&type, &value, &tb);
	watch_end(w);
	PyErr_Restore(type, value, tb);
	Py_DECREF(w->client);
	PyObject_Free(w);
}

static PyObject *watch_close(WatchObject *w, PyObject *unused)
{
	watch_end(w);
	Py_RETURN_NONE;
}

/* This watch's next event out of pending (events.c); NULL if none (no
 * exception). Events of other watches stay for them (or poll()). The
 * last one taken quiets fileno(), which an event loop's reader would
 * otherwise be woken by for nothing. */
static PyObject *watch_take(WatchObject *w)
{
	PyObject *x = tdpy_events_take(w->client, &w->q);

	if (x)
		tdpy_client_unwake(w->client);
	return x;
}

/*
 * This watch's next event, waiting up to ms (-1 forever): what
 * td_client_process() delivers, and between deliveries a wait for
 * libtensord's descriptor with the GIL released.
 */
static PyObject *watch_wait(WatchObject *w, int ms)
{
	ClientObject *cl = w->client;
	struct timespec t0, now;
	PyObject *x;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct pollfd pfd = {.events = POLLIN};
		int left = ms, rc, err = 0;

		/* (also between slices: another thread may close it, or
		 * close the client and connect again; the new connection's
		 * events are not ours) */
		if (!w->open)
			return PyErr_Format(PyExc_ValueError,
					    "the watch is closed");
		if (cl->c && cl->conn != w->conn)
			return PyErr_Format(PyExc_ValueError, "the watch's "
					    "connection was closed (the client "
					    "connected again since: watch "
					    "anew)");

		x = watch_take(w);
		if (x || tdpy_events_process(cl, "watch") < 0)
			return x;
		x = watch_take(w);
		if (x)
			return x;
		if (ms > 0) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			left = ms - (int)((now.tv_sec - t0.tv_sec) * 1000 +
					  (now.tv_nsec - t0.tv_nsec) / 1000000);
			if (left < 0)
				left = 0;
		}
		if (left == 0)
			return tdpy_raise(-ETIMEDOUT, NULL, "watch: no event");
		/* a slice at a time, as every wait: signal handlers run in
		 * between, and a close() by another thread (deferred while
		 * this call is in) is seen by the next tdpy_events_process() */
		if (left < 0 || left > TDPY_SIGNAL_SLICE_MS)
			left = TDPY_SIGNAL_SLICE_MS;
		/* another thread's call in flight holds libtensord (its
		 * events wait there, and readable its fd would wake this at
		 * once, for ever): a short sleep, then a look again */
		pfd.fd = cl->cfd;
		if (tdpy_client_in_flight(cl)) {
			pfd.fd = -1;
			if (left > TDPY_BUSY_SLICE_MS)
				left = TDPY_BUSY_SLICE_MS;
		}
		if (!tdpy_client_enter(cl))
			return NULL;
		cl->idle++; /* (another thread's poll() need not wait) */
		Py_BEGIN_ALLOW_THREADS
		rc = poll(&pfd, 1, left);
		if (rc < 0)
			err = errno;
		Py_END_ALLOW_THREADS
		cl->idle--;
		tdpy_client_leave(cl);
		if (rc < 0 && err != EINTR) {
			errno = err;
			return PyErr_SetFromErrno(PyExc_OSError);
		}
		if (PyErr_CheckSignals() < 0)
			return NULL;
	}
}

static PyObject *watch_next_m(WatchObject *w, PyObject *args, PyObject *kw)
{
	int ms;

	if (!tdpy_timeout_arg(args, kw, &ms))
		return NULL;
	return watch_wait(w, ms);
}

static PyObject *watch_iternext(WatchObject *w)
{
	return watch_wait(w, -1);
}

static PyObject *watch_get_id(WatchObject *w, void *unused)
{
	return PyLong_FromUnsignedLongLong(w->id);
}

static PyMethodDef watch_methods[] = {
	{"next", (PyCFunction)(void (*)(void))watch_next_m,
	 METH_VARARGS | METH_KEYWORDS,
	 "next(timeout=None): the next Event; tensord.Timeout if none came"},
	{"close", (PyCFunction)watch_close, METH_NOARGS,
	 "stop watching; its events not taken yet go too, and none comes "
	 "out afterwards (poll() included)"},
	{"__enter__", tdpy_enter, METH_NOARGS, NULL},
	{"__exit__", tdpy_exit_close, METH_VARARGS, NULL},
	{NULL},
};

static PyGetSetDef watch_getset[] = {
	{"id", (getter)watch_get_id, NULL, "the daemon's watch id", NULL},
	{NULL},
};

PyTypeObject tdpy_watch_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "tensord.Watch",
	.tp_doc = "Iterator of Events for a name or prefix.",
	.tp_basicsize = sizeof(WatchObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_dealloc = (destructor)watch_dealloc,
	.tp_weaklistoffset = offsetof(WatchObject, weakrefs),
	.tp_iter = PyObject_SelfIter,
	.tp_iternext = (iternextfunc)watch_iternext,
	.tp_methods = watch_methods,
	.tp_getset = watch_getset,
};

/* ---- Client type ---- */

static PyMethodDef client_methods[] = {
	{"close", (PyCFunction)client_close, METH_NOARGS,
	 "Disconnect; views and loans already made stay valid."},
	{"__enter__", (PyCFunction)client_enter_m, METH_NOARGS, NULL},
	{"__exit__", tdpy_exit_close, METH_VARARGS, NULL},
	{"info", (PyCFunction)client_info, METH_NOARGS,
	 "The negotiated connection facts."},
	{"put", (PyCFunction)(void (*)(void))tdpy_client_put,
	 METH_VARARGS | METH_KEYWORDS,
	 "put(name, array, metadata=None, pin=False, stream=False) -> version "
	 "(stream: the copy goes into the name's stream loan, kept mapped; "
	 "the version is recyclable, not write-sealed)"},
	{"alloc", (PyCFunction)(void (*)(void))tdpy_client_alloc,
	 METH_VARARGS | METH_KEYWORDS,
	 "alloc(name, shape, dtype, strides=None, format=None, recycle=False,"
	 " stream=False, private=True) -> writable "
	 "Array (a Planes of them for a format of several planes); "
	 "private=False (with recycle or stream): publish() leaves its "
	 "pages shared and makes it read-only, and the mapping serves the "
	 "buffer's next loan"},
	{"publish", (PyCFunction)(void (*)(void))tdpy_client_publish,
	 METH_VARARGS | METH_KEYWORDS,
	 "publish(array_or_planes, metadata=None, pin=False, wait=True) -> "
	 "version (None with wait=False: no wait for the daemon's answer; "
	 "a failure raises from the next alloc(), put() or publish())"},
	{"publish_many", (PyCFunction)(void (*)(void))tdpy_client_publish_many,
	 METH_VARARGS | METH_KEYWORDS,
	 "publish_many(arrays, metadata=None, pin=False) -> tuple of "
	 "versions: the alloc() arrays (or Planes) published as one step, "
	 "all or none; every loan is consumed either way"},
	{"get", (PyCFunction)(void (*)(void))tdpy_client_get,
	 METH_VARARGS | METH_KEYWORDS,
	 "get(name, version=None, newer_than=None, timeout=None) -> "
	 "read-only Array (a Planes of them for a tensor of several planes)"},
	{"get_many", (PyCFunction)(void (*)(void))tdpy_client_get_many,
	 METH_VARARGS | METH_KEYWORDS,
	 "get_many(names, newer=None, timeout=None) -> tuple of read-only "
	 "Arrays: the latest version of each name, all leased at one "
	 "instant (versions published together are got together); with "
	 "newer, once names[0] has a version newer than it"},
	{"stat", (PyCFunction)client_stat, METH_VARARGS,
	 "stat(name) -> Entry"},
	{"ls", (PyCFunction)client_ls, METH_VARARGS,
	 "ls(prefix=None) -> [Entry]"},
	{"rm", (PyCFunction)client_rm, METH_VARARGS,
	 "rm(name) -> removed version"},
	{"trim", (PyCFunction)client_trim, METH_NOARGS,
	 "Drop cached mappings nobody uses; returns how many."},
	{"watch", (PyCFunction)(void (*)(void))client_watch,
	 METH_VARARGS | METH_KEYWORDS,
	 "watch(name, prefix=True) -> Watch (an iterator of Events)"},
	{"fileno", (PyCFunction)client_fileno, METH_NOARGS,
	 "An fd that polls readable when poll() or a Subscription's poll() "
	 "has something (for loop.add_reader)."},
	{"poll", (PyCFunction)client_poll, METH_NOARGS,
	 "Every queued watch Event, without waiting."},
	{"ring_create", (PyCFunction)(void (*)(void))tdpy_client_ring_create,
	 METH_VARARGS | METH_KEYWORDS,
	 "ring_create(name, shape, dtype, slots=4, readers=0) -> Ring"},
	{"subscribe", (PyCFunction)(void (*)(void))tdpy_client_subscribe,
	 METH_VARARGS | METH_KEYWORDS,
	 "subscribe(name, timeout=None) -> Subscription"},
	{"ring_stat", (PyCFunction)tdpy_client_ring_stat, METH_VARARGS,
	 "ring_stat(name) -> dict"},
	{"follow", (PyCFunction)tdpy_client_follow, METH_VARARGS,
	 "follow(name) -> Follow (each new version of name, taken without "
	 "a message to the daemon)"},
	{NULL},
};

static PyGetSetDef client_getset[] = {
	{"closed", (getter)client_closed, NULL, "whether close() was called", NULL},
	{"event_limit", (getter)tdpy_client_get_event_limit,
	 (setter)tdpy_client_set_event_limit,
	 "most Events of each watch kept queued, 0 no bound (the default); "
	 "one of a watch that has that many queued is dropped and counted "
	 "in that watch's 'overflowed' Event", NULL},
	{NULL},
};

PyTypeObject tdpy_client_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "tensord.Client",
	.tp_doc = "Client(socket=None, *, event_limit=0): a connection to "
		  "tensord (socket None: $TENSORD_SOCKET, "
		  "$XDG_RUNTIME_DIR/tensord.sock, /run/tensord/tensord.sock; "
		  "event_limit: see Client.event_limit).",
	.tp_basicsize = sizeof(ClientObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_new = client_new,
	.tp_init = (initproc)client_init,
	.tp_dealloc = (destructor)client_dealloc,
	.tp_weaklistoffset = offsetof(ClientObject, weakrefs),
	.tp_methods = client_methods,
	.tp_getset = client_getset,
};

/* ---- module ---- */

static PyStructSequence_Field entry_fields[] = {
	{"name", NULL},	       {"version", NULL}, {"dtype", NULL},
	{"shape", NULL},       {"bytes", NULL},	  {"lease_count", NULL},
	{"flags", NULL},       {"metadata", NULL}, {NULL},
};
static PyStructSequence_Desc entry_desc = {"tensord.Entry", NULL,
					   entry_fields, 8};

static PyObject *dtypes(void)
{
	PyObject *d = PyDict_New();

	for (uint32_t i = 0; d && td_tensor_dtype_name(i); i++) {
		PyArray_Descr *x = tdpy_descr_of(i);

		if (!x || PyDict_SetItemString(d, td_tensor_dtype_name(i),
					       (PyObject *)x) < 0) {
			Py_XDECREF(x);
			Py_CLEAR(d);
			break;
		}
		Py_DECREF(x);
	}
	return d;
}

static struct PyModuleDef module_def = {
	PyModuleDef_HEAD_INIT,
	.m_name = "tensord",
	.m_doc = "Zero-copy numpy arrays and DLPack tensors over tensord.",
	.m_size = -1,
};


PyMODINIT_FUNC PyInit_tensord(void)
{
	PyObject *m;

	if (tdpy_numpy_import() < 0)
		return NULL;
	m = PyModule_Create(&module_def);
	if (!m)
		return NULL;
	if (tdpy_errors_init(m) < 0 || tdpy_events_init(m) < 0 ||
	    PyStructSequence_InitType2(&entry_type, &entry_desc) < 0 ||
	    PyType_Ready(&tdpy_client_type) < 0 ||
	    PyType_Ready(&tdpy_watch_type) < 0 || tdpy_array_init(m) < 0 ||
	    tdpy_ring_init(m) < 0 || tdpy_planes_init(m) < 0 ||
	    tdpy_follow_init(m) < 0)
		goto fail;
	Py_INCREF(&tdpy_client_type);
	Py_INCREF(&tdpy_watch_type);
	Py_INCREF(&entry_type);
	if (PyModule_AddObject(m, "Client", (PyObject *)&tdpy_client_type) ||
	    PyModule_AddObject(m, "Watch", (PyObject *)&tdpy_watch_type) ||
	    PyModule_AddObject(m, "Entry", (PyObject *)&entry_type) ||
	    PyModule_AddObject(m, "DTYPES", dtypes()) ||
	    PyModule_AddIntConstant(m, "ENTRY_PIN", TD_PUBLISH_PIN) ||
	    PyModule_AddIntConstant(m, "ENTRY_RING", TD_ENTRY_RING) ||
	    PyModule_AddIntConstant(m, "ENTRY_RECYCLE", TD_ENTRY_RECYCLE))
		goto fail;
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}
