/* SPDX-License-Identifier: MIT */
/*
 * What every file of the binding stands on, below them all: numpy's C
 * API table, tensord.Error and its subclasses, argument converters, the
 * client's calls in flight (enter, leave, the close deferred to the last
 * of them) and the sliced waits that let signals in, context managers.
 */
#define TDPY_MODULE_C
#include "tdpy.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

PyObject *tdpy_error;
static PyObject *not_found, *permission_denied, *quota_exceeded, *timeout;

int tdpy_numpy_import(void)
{
	import_array1(-1);
	return 0;
}

static PyObject *add_exc(PyObject *m, const char *name, PyObject *base)
{
	char full[64];
	PyObject *e, *dict;

	snprintf(full, sizeof(full), "tensord.%s", name);
	/* Error's .errno and .reason are None until set (tdpy_raise), as
	 * OSError's errno: one the binding or its user makes without them
	 * (tensord.Timeout("...") in a test's fake) still has both */
	dict = base ? NULL
		    : Py_BuildValue("{s:O,s:O}", "errno", Py_None, "reason",
				    Py_None);
	if (!base && !dict)
		return NULL;
	e = PyErr_NewException(full, base, dict);
	Py_XDECREF(dict);
	if (e && PyModule_AddObject(m, name, e) < 0)
		return NULL;
	Py_XINCREF(e);
	return e;
}

unsigned tdpy_forks;

static void on_fork_child(void)
{
	tdpy_forks++;
}

static void tdpy_fork_watch(void)
{
	pthread_atfork(NULL, NULL, on_fork_child);
}

/* Python's main thread, the one its signal handlers run in */
static unsigned long main_ident;

static int main_thread_find(void)
{
	PyObject *th = PyImport_ImportModule("threading");
	PyObject *mt = th ? PyObject_CallMethod(th, "main_thread", NULL) : NULL;
	PyObject *id = mt ? PyObject_GetAttrString(mt, "ident") : NULL;

	if (id)
		main_ident = PyLong_AsUnsignedLong(id);
	Py_XDECREF(th);
	Py_XDECREF(mt);
	Py_XDECREF(id);
	return PyErr_Occurred() ? -1 : 0;
}

/*
 * libtensord's td_client_set_interrupt() fn: a signal interrupted the
 * wait for a reply that is late (GIL released, libtensord's lock of the
 * handle held). In Python's main thread, where its handlers run, they
 * run now, the GIL taken (lock, then GIL: the order of the event handler
 * too, and no thread waits for libtensord's lock with the GIL held). A
 * handler that raises nothing (SIGHUP, SIGCHLD, asyncio's wake-up)
 * leaves the call waiting; one that raises ends it (the connection
 * abandoned), its exception kept for the call to raise (tdpy_intr_take).
 * Meanwhile this thread holds the handle's lock: a frame per such wait
 * (innermost first) says which clients; a call on one raises
 * (tdpy_client_reentered), a release or close waits (tdpy_client_defer).
 * Elsewhere the signal is not this call's to act on. A wait in slices
 * (tdpy_wait_sliced) runs the handlers between them; a request one of
 * its slices sent (a GET or RING_SUBSCRIBE that the daemon holds for the
 * slice) asks here too, as any call's, libtensord asking only once its
 * reply is later than the daemon may hold it (a daemon stopped or
 * wedged): one that answers in time ends the slice, and the handlers
 * run between slices, the connection whole.
 */

struct intr_frame {
	const ClientObject *cl; /* (its handle's lock held, whichever
				 * connection: its HELLO's, its close's) */
	struct intr_frame *up;
};
static _Thread_local struct intr_frame *intr_top;
/* the exception a handler raised there, until the call raises it */
static _Thread_local PyObject *intr_type, *intr_value, *intr_tb;

static void intr_drop(void)
{
	Py_CLEAR(intr_type);
	Py_CLEAR(intr_value);
	Py_CLEAR(intr_tb);
}

int tdpy_interrupted(void *ud)
{
	ClientObject *self = ud;
	PyObject *type, *value, *tb;
	struct intr_frame f;
	PyGILState_STATE g;
	int rc;

	if (PyThread_get_thread_ident() != main_ident)
		return 0;
	g = PyGILState_Ensure();
	/* a path that let the GIL go with an exception set (a close on an
	 * error path): the handlers run without it, it stays */
	PyErr_Fetch(&type, &value, &tb);
	f.cl = self;
	f.up = intr_top;
	intr_top = &f;
	rc = PyErr_CheckSignals();
	intr_top = f.up;
	if (rc < 0) {
		intr_drop(); /* (one no call raised: this one is newer) */
		PyErr_Fetch(&intr_type, &intr_value, &intr_tb);
	}
	PyErr_Restore(type, value, tb);
	PyGILState_Release(g);
	return rc < 0;
}

/*
 * A handler's exception kept by a wait that no call raises (a close or
 * release in a dealloc, a deferred one at a call's end): moved here by
 * tdpy_intr_redeliver and raised by a pending call (Py_AddPendingCall)
 * at the main thread's next bytecode boundary, where the handler's own
 * raise would have come a moment later. The first waits there (a
 * handler run meanwhile, in another wait, raises it first); one kept
 * meanwhile goes to sys.unraisablehook.
 */
static PyObject *pend_type, *pend_value, *pend_tb;

static int intr_raise_pending(void *unused)
{
	(void)unused;
	if (!pend_type)
		return 0;
	PyErr_Restore(pend_type, pend_value, pend_tb);
	pend_type = pend_value = pend_tb = NULL;
	return -1;
}

void tdpy_intr_redeliver(PyObject *obj)
{
	PyObject *type, *value, *tb;

	if (!intr_type)
		return;
	/* (a dealloc while another exception propagates: it stays) */
	PyErr_Fetch(&type, &value, &tb);
	if (!pend_type && Py_AddPendingCall(intr_raise_pending, NULL) == 0) {
		pend_type = intr_type;
		pend_value = intr_value;
		pend_tb = intr_tb;
		intr_type = intr_value = intr_tb = NULL;
	} else {
		PyErr_Restore(intr_type, intr_value, intr_tb);
		intr_type = intr_value = intr_tb = NULL;
		/* its type: obj may be in its dealloc (the hook's reference
		 * to it would free it twice) */
		PyErr_WriteUnraisable(obj ? (PyObject *)Py_TYPE(obj) : NULL);
	}
	PyErr_Restore(type, value, tb);
}

bool tdpy_intr_kept(void)
{
	return intr_type != NULL;
}

bool tdpy_intr_take(void)
{
	if (intr_type && !PyErr_Occurred()) {
		PyErr_Restore(intr_type, intr_value, intr_tb);
		intr_type = intr_value = intr_tb = NULL;
	}
	intr_drop();
	return PyErr_Occurred() != NULL;
}

bool tdpy_client_locked_here(const ClientObject *cl)
{
	if (!cl)
		return false;
	for (const struct intr_frame *f = intr_top; f; f = f->up)
		if (f->cl == cl)
			return true;
	return false;
}

int tdpy_client_reentered(const ClientObject *cl)
{
	if (!tdpy_client_locked_here(cl))
		return 0;
	PyErr_SetString(PyExc_RuntimeError, "a call on this client from a "
			"signal handler that runs inside one of its calls "
			"(waiting for the daemon in this thread, which holds "
			"the client until its reply): call it after that "
			"call returns");
	return -1;
}

int tdpy_errors_init(PyObject *m)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, tdpy_fork_watch);
	tdpy_error = add_exc(m, "Error", NULL);
	if (!tdpy_error)
		return -1;
	if (main_thread_find() < 0)
		return -1;
	not_found = add_exc(m, "NotFound", tdpy_error);
	permission_denied = add_exc(m, "PermissionDenied", tdpy_error);
	quota_exceeded = add_exc(m, "QuotaExceeded", tdpy_error);
	timeout = add_exc(m, "Timeout", tdpy_error);
	return !not_found || !permission_denied || !quota_exceeded || !timeout
		       ? -1
		       : 0;
}

/* ---- errors and arguments ---- */

PyObject *tdpy_raise(int rc, const struct td_error *e, const char *what)
{
	int code = rc < 0 ? -rc : rc;
	const char *reason = e && e->reason[0] ? e->reason : strerror(code);
	PyObject *cls = tdpy_error, *exc, *r, *msg;

	/* a signal ended the wait for a reply (tdpy_interrupted): its
	 * handler's exception (KeyboardInterrupt) is the call's */
	if (code == EINTR && (tdpy_intr_take() || PyErr_CheckSignals() < 0))
		return NULL;

	switch (code) {
	case ENOENT:
		cls = not_found;
		break;
	case EPERM:
	case EACCES:
		cls = permission_denied;
		break;
	case EDQUOT:
	case ENOSPC:
		cls = quota_exceeded;
		break;
	case ETIMEDOUT:
		cls = timeout;
		break;
	}
	r = PyUnicode_DecodeUTF8(reason, (Py_ssize_t)strlen(reason),
				 "replace");
	if (!r)
		return NULL;
	msg = PyUnicode_FromFormat("%s: %U [%s]", what, r,
				   strerrorname_np(code) ?
				   strerrorname_np(code) : "?");
	exc = msg ? PyObject_CallFunctionObjArgs(cls, msg, NULL) : NULL;
	Py_XDECREF(msg);
	if (exc) {
		PyObject *no = PyLong_FromLong(code);

		PyObject_SetAttrString(exc, "errno", no);
		PyObject_SetAttrString(exc, "reason", r);
		Py_XDECREF(no);
		PyErr_SetObject(cls, exc);
		Py_DECREF(exc);
	}
	Py_DECREF(r);
	return NULL;
}

int tdpy_conv_name(PyObject *o, void *out)
{
	Py_ssize_t len;
	const char *s;

	if (!PyUnicode_Check(o)) {
		PyErr_Format(PyExc_TypeError, "name must be str, not %.100s",
			     Py_TYPE(o)->tp_name);
		return 0;
	}
	s = PyUnicode_AsUTF8AndSize(o, &len);
	if (!s)
		return 0;
	if ((size_t)len != strlen(s) || len > TD_NAME_MAX) {
		PyErr_Format(PyExc_ValueError, "name must be 1..%d bytes "
			     "without NUL", TD_NAME_MAX);
		return 0;
	}
	*(const char **)out = s;
	return 1;
}

int tdpy_conv_timeout(PyObject *o, void *out)
{
	double s;

	if (o == Py_None) {
		*(int *)out = -1;
		return 1;
	}
	if (PyBool_Check(o) || !PyNumber_Check(o)) {
		PyErr_Format(PyExc_TypeError, "timeout must be seconds or "
			     "None, not %.100s", Py_TYPE(o)->tp_name);
		return 0;
	}
	s = PyFloat_AsDouble(o);
	if (s == -1.0 && PyErr_Occurred())
		return 0;
	if (isnan(s) || s < 0) {
		/* NaN is no number of seconds: it said "must be >= 0" */
		PyErr_SetString(PyExc_ValueError,
				isnan(s) ? "timeout must be seconds >= 0 or "
					   "None, not NaN"
					 : "timeout must be >= 0");
		return 0;
	}
	*(int *)out = s * 1000 >= INT_MAX ? -1 : (int)ceil(s * 1000);
	return 1;
}

/* An integer as operator.index() takes it: an int or anything that is
 * one (np.uint64(3), which is no int subclass), never a float. */
PyObject *tdpy_index(PyObject *o)
{
	return PyIndex_Check(o) ? PyNumber_Index(o) : NULL;
}

int tdpy_conv_version(PyObject *o, void *out)
{
	unsigned long long v;
	PyObject *n = tdpy_index(o);

	if (!n) {
		if (!PyErr_Occurred())
			PyErr_Format(PyExc_TypeError, "a version is an int, "
				     "not %.100s", Py_TYPE(o)->tp_name);
		return 0;
	}
	v = PyLong_AsUnsignedLongLong(n); /* OverflowError: < 0, >= 2**64 */
	Py_DECREF(n);
	if (v == (unsigned long long)-1 && PyErr_Occurred())
		return 0;
	*(uint64_t *)out = v;
	return 1;
}

int tdpy_timeout_arg(PyObject *args, PyObject *kw, int *ms)
{
	static char *kwlist[] = {"timeout", NULL};
	PyObject *to = Py_None;

	return PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &to) &&
	       tdpy_conv_timeout(to, ms);
}

int tdpy_meta_get(PyObject *o, Py_buffer *b)
{
	memset(b, 0, sizeof(*b));
	if (!o || o == Py_None)
		return 0;
	if (PyUnicode_Check(o)) {
		Py_ssize_t n;
		const char *s = PyUnicode_AsUTF8AndSize(o, &n);

		return s ? PyBuffer_FillInfo(b, o, (void *)s, n, 1,
					     PyBUF_SIMPLE)
			 : -1;
	}
	if (!PyObject_CheckBuffer(o)) {
		PyErr_Format(PyExc_TypeError, "metadata must be bytes-like, "
			     "str or None, not %.100s", Py_TYPE(o)->tp_name);
		return -1;
	}
	if (PyObject_GetBuffer(o, b, PyBUF_SIMPLE) == 0)
		return 0;
	/* a buffer that is not one C-contiguous run of bytes (a strided
	 * memoryview, a Fortran-order array): its bytes in C order, copied
	 * (metadata is small, and copied into the blob anyway) */
	PyErr_Clear();
	o = PyBytes_FromObject(o);
	if (!o)
		return -1;
	if (PyObject_GetBuffer(o, b, PyBUF_SIMPLE) < 0) {
		Py_DECREF(o);
		return -1;
	}
	Py_DECREF(o); /* b holds it */
	return 0;
}

PyObject *tdpy_busy_error(void)
{
	PyErr_SetString(PyExc_RuntimeError, "used by another thread at "
			"the same time (one thread at a time per ring, "
			"subscription or follow)");
	return NULL;
}

void tdpy_busy_forked(bool *busy, unsigned *forks)
{
	if (*forks != tdpy_forks) {
		*forks = tdpy_forks;
		*busy = false;
	}
}

/* ---- calls in flight ---- */

int64_t tdpy_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int tdpy_left_ms(int ms, int64_t start)
{
	int64_t spent;

	if (ms <= 0 || start < 0)
		return ms;
	spent = tdpy_mono_ms() - start;
	return spent >= ms ? 0 : ms - (int)spent;
}

int tdpy_wait_sliced(int ms, int (*fn)(void *arg, int slice_ms), void *arg,
		     ClientObject *cl)
{
	int64_t deadline = ms < 0 ? -1 : tdpy_mono_ms() + ms;
	int rc;

	for (;;) {
		int64_t left = ms < 0 ? TDPY_SIGNAL_SLICE_MS
				      : deadline - tdpy_mono_ms();

		if (left > TDPY_SIGNAL_SLICE_MS)
			left = TDPY_SIGNAL_SLICE_MS;
		if (left < 0)
			left = 0;
		Py_BEGIN_ALLOW_THREADS
		rc = fn(arg, (int)left);
		Py_END_ALLOW_THREADS
		/* (-EINTR: a handler's exception, kept, ended the slice's
		 * request: set now) */
		if (rc == -EINTR)
			tdpy_intr_take();
		if (rc != -ETIMEDOUT && rc != -EAGAIN)
			return rc;
		if (ms >= 0 && tdpy_mono_ms() >= deadline)
			return -ETIMEDOUT;
		if (PyErr_CheckSignals() < 0)
			return -EINTR;
		/* a poll() of another thread waits for this call's events:
		 * handed over now, when this call is the only one in */
		if (cl && cl->c && cl->want_hand_over &&
		    cl->busy - cl->idle == 1 && tdpy_client_hand_over)
			tdpy_client_hand_over(cl);
		/*
		 * close() by another thread while cl's call waits is deferred
		 * to its end: one with a deadline still gets what comes until
		 * then, one without would wait for ever on a closed client.
		 */
		if (ms < 0 && cl && !cl->c) {
			PyErr_SetString(PyExc_ValueError,
					"the client was closed while this call "
					"waited without a timeout");
			return -EINTR;
		}
	}
}

void tdpy_client_forked(ClientObject *self)
{
	pthread_mutexattr_t a;

	if (self->forks == tdpy_forks)
		return;
	self->forks = tdpy_forks;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&self->deliver, &a);
	pthread_mutexattr_destroy(&a);
	self->busy = 0;
	self->idle = 0;
	self->handing = 0;
}

struct td_client *tdpy_client_enter(ClientObject *self)
{
	tdpy_client_forked(self);
	if (!self->c) {
		PyErr_SetString(PyExc_ValueError, "the client is closed");
		return NULL;
	}
	if (tdpy_client_reentered(self) < 0)
		return NULL;
	tdpy_client_flush(self);
	if (!self->c) { /* closed by another thread meanwhile */
		PyErr_SetString(PyExc_ValueError, "the client is closed");
		return NULL;
	}
	self->busy++;
	return self->c;
}

/* ---- releases and closes deferred (tdpy_client_defer) ---- */

int tdpy_client_defer(ClientObject *cl,
		      void (*run)(struct tdpy_deferred *, struct td_client *),
		      void *p, uint64_t id, PyObject *ref)
{
	struct tdpy_deferred *d = PyMem_RawMalloc(sizeof(*d)), **end;

	if (!d) {
		PyErr_NoMemory();
		return -1;
	}
	*d = (struct tdpy_deferred){.run = run, .p = p, .id = id, .ref = ref};
	Py_XINCREF(ref);
	/* in the order asked */
	for (end = &cl->deferred; *end; end = &(*end)->next)
		;
	*end = d;
	return 0;
}

/* All of cl's deferred ones, now, on h (the GIL held, no call of this
 * thread holding h) */
static void defer_run(ClientObject *cl, struct td_client *h)
{
	struct tdpy_deferred *list = cl->deferred, *d;
	bool kept = tdpy_intr_kept(); /* the call's own, for it to raise */

	if (!list)
		return;
	cl->deferred = NULL;
	Py_BEGIN_ALLOW_THREADS
	for (d = list; d; d = d->next)
		d->run(d, h);
	Py_END_ALLOW_THREADS
	/* a handler's exception in their waits: no call raises it */
	if (!kept)
		tdpy_intr_redeliver((PyObject *)cl);
	while (list) {
		d = list;
		list = d->next;
		Py_XDECREF(d->ref);
		PyMem_RawFree(d);
	}
}

void tdpy_client_flush(ClientObject *cl)
{
	if (!cl || !cl->deferred || tdpy_client_locked_here(cl))
		return;
	/* a call in flight meanwhile: close() by another thread waits */
	cl->busy++;
	defer_run(cl, cl->handle);
	if (--cl->busy == 0 && !cl->c && cl->handle)
		tdpy_client_close_now(cl);
}

void tdpy_client_close_now(ClientObject *self)
{
	struct td_client *h = self->handle;
	bool kept = tdpy_intr_kept();

	self->handle = NULL;
	if (self->epfd >= 0)
		close(self->epfd);
	if (self->evfd >= 0)
		close(self->evfd);
	self->epfd = self->evfd = self->cfd = -1;
	self->cfd_parked = false;
	tdpy_maps_detach(self);
	defer_run(self, h);
	Py_BEGIN_ALLOW_THREADS
	td_client_close(h);
	Py_END_ALLOW_THREADS
	/* what a handler inside the close let go of (its FOLLOW_CLOSEs
	 * wait for replies): the connection is gone, the memory goes */
	defer_run(self, NULL);
	/* a handler's exception in those waits: it ends no call */
	if (!kept)
		tdpy_intr_redeliver((PyObject *)self);
}

/* events.c's drain and hand-over, set at its init (pointers: events.c
 * is above) */
void (*tdpy_client_left)(ClientObject *self);
void (*tdpy_client_hand_over)(ClientObject *self);

void tdpy_client_leave(ClientObject *self)
{
	/* close() while a call waited: the last call out closes */
	if (--self->busy == 0 && !self->c && self->handle)
		tdpy_client_close_now(self);
	else if (self->c && tdpy_client_left)
		tdpy_client_left(self);
	/* a poll() meanwhile took libtensord's fd out of fileno(): back,
	 * where what it holds wakes the loop (level-triggered) */
	if (self->busy == self->idle && self->cfd_parked &&
	    tdpy_client_epoll(self, EPOLL_CTL_ADD, self->cfd) == 0)
		self->cfd_parked = false;
	/* what a signal handler inside the call let go of */
	if (self->handle)
		tdpy_client_flush(self);
}

/* The eventfd, as the epoll set, is shared with a child of fork(): the
 * child's poll() read the parent's wake-up, and the parent's loop missed
 * the Events its queue held. Only the process that made it uses it. */
bool tdpy_evfd_ours(ClientObject *self)
{
	return self->evfd >= 0 && self->epfd_forks == tdpy_forks;
}

void tdpy_client_wake(ClientObject *self)
{
	uint64_t one = 1;

	if (tdpy_evfd_ours(self) && write(self->evfd, &one, sizeof(one)) < 0) {
		/* the counter is saturated: it is readable anyway */
	}
}

/*
 * A child of fork() shares the parent's epoll set (one open file): its
 * close of an inherited Follow or Subscription took their fds out of the
 * parent's Client.fileno(), whose loop then never woke for them again.
 */
int tdpy_client_epoll(ClientObject *self, int op, int fd)
{
	struct epoll_event ee = {.events = EPOLLIN};

	if (self->epfd < 0) {
		errno = EBADF;
		return -1;
	}
	if (self->epfd_forks != tdpy_forks) {
		errno = ECHILD;
		return -1;
	}
	return epoll_ctl(self->epfd, op, fd, &ee);
}

/* ---- context managers ---- */

PyObject *tdpy_enter(PyObject *self, PyObject *unused)
{
	Py_INCREF(self);
	return self;
}

/* __exit__ calling self.<method>(), never swallowing the exception. */
static PyObject *exit_calling(PyObject *self, const char *method)
{
	PyObject *r = PyObject_CallMethod(self, method, NULL);

	if (!r)
		return NULL;
	Py_DECREF(r);
	Py_RETURN_FALSE;
}

PyObject *tdpy_exit_close(PyObject *self, PyObject *args)
{
	return exit_calling(self, "close");
}

PyObject *tdpy_exit_release(PyObject *self, PyObject *args)
{
	return exit_calling(self, "release");
}
