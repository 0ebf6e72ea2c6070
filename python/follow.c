/* SPDX-License-Identifier: MIT */
/*
 * tensord.Follow: following a name (libtensord's td_client_follow,
 * docs/fastpath.md "Following a name"). Each next() is a tensor as get()
 * gives (tensor.c's tdpy_lease_array), taken from the daemon's shared
 * memory with no message once the stream is warm.
 *
 * The hold: libtensord lets a follow hold one tensor, which must be
 * released before the next td_follow_next(). Like a Subscription, next()
 * gives the held one back first (its views stay mapped: the binding's
 * own mapping, maps.c), and refuses (EBUSY) while a DLPack export of it
 * lives, because such an export reads the buffer the hold protects.
 * Otherwise the hold lasts as long as the tensor's Lease (any view of it)
 * or until release(); `held` below points at that Lease, which clears it
 * when it ends (tdpy_follow_let_go).
 *
 * That Lease's end in another thread gives the tensor back to libtensord
 * with the GIL released, after it cleared `held`: a next() or poll()
 * meanwhile would find libtensord's hold still taken (EBUSY), so they
 * wait for it (`releasing`, tdpy_follow_releasing).
 */
#include "tdpy.h"

#include <errno.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

typedef struct {
	PyObject_HEAD
	ClientObject *client;
	struct td_follow *f; /* NULL once closed */
	PyObject *name;
	OwnerObject *held;   /* the Lease of the tensor last given while it
			      * holds (not a reference: it clears this) */
	uint64_t last;       /* version last given, 0 if none */
	struct td_tensor *fenced; /* taken, its fence not signalled in a
				   * next(): the next one waits on it */
	int fenced_fd;       /* its fence, in the client's epoll set while it
			      * waits in poll() mode; -1 none */
	bool busy;           /* next() waiting with the GIL released */
	unsigned forks;      /* tdpy_busy_forked() */
	int efd;             /* poll() mode: td_follow_fd, in the client's
			      * epoll set (Client.fileno()); -1 before */
	_Atomic uint32_t releasing; /* Leases of it giving their tensor
				     * back with the GIL released, and
				     * RELEASING_WAITED (a futex word: its
				     * count's 0 wakes waiters, if any) */
	PyObject *weakrefs;
} FollowObject;

/* In `releasing`: a thread sleeps on the word (released_wait), so the
 * last release wakes it. Without one, a release makes no syscall. */
#define RELEASING_WAITED 0x80000000u

PyObject *tdpy_client_follow(ClientObject *self, PyObject *args)
{
	struct td_error e = {0};
	struct td_client *c;
	FollowObject *fo;
	const char *name;
	int rc;

	if (!PyArg_ParseTuple(args, "O&", tdpy_conv_name, &name))
		return NULL;
	fo = PyObject_New(FollowObject, &tdpy_follow_type);
	if (!fo)
		return NULL;
	memset((char *)fo + sizeof(PyObject), 0,
	       sizeof(*fo) - sizeof(PyObject));
	Py_INCREF(self);
	fo->client = self;
	fo->efd = -1;
	fo->fenced_fd = -1;
	fo->forks = tdpy_forks;
	fo->name = PyUnicode_FromString(name);
	c = fo->name ? tdpy_client_enter(self) : NULL;
	if (!c) {
		Py_DECREF(fo);
		return NULL;
	}
	TDPY_CALL(self, rc, td_client_follow(c, name, &fo->f, &e));
	if (rc < 0) {
		Py_DECREF(fo);
		return tdpy_raise(rc, &e, "follow");
	}
	return (PyObject *)fo;
}

static void tdpy_follow_hold(PyObject *obj, OwnerObject *o)
{
	((FollowObject *)obj)->held = o;
}

static void tdpy_follow_let_go(PyObject *obj, OwnerObject *o)
{
	FollowObject *fo = (FollowObject *)obj;

	if (fo->held == o)
		fo->held = NULL;
}

static void tdpy_follow_releasing(PyObject *obj, int delta)
{
	FollowObject *fo = (FollowObject *)obj;
	uint32_t n;

	if (delta > 0) {
		atomic_fetch_add(&fo->releasing, 1);
		return;
	}
	n = atomic_fetch_sub(&fo->releasing, 1);
	/* the last one out wakes the sleepers, only when there are: a
	 * FUTEX_WAKE per handoff cost every follow a syscall. A waiter
	 * that set the flag after this count reached 0 finds its
	 * compare-exchange failing and looks again (released_wait). */
	if (n == (1 | RELEASING_WAITED)) {
		atomic_fetch_and(&fo->releasing, ~RELEASING_WAITED);
		syscall(SYS_futex, &fo->releasing, FUTEX_WAKE_PRIVATE, INT32_MAX,
			NULL, NULL, 0);
	}
}

/* GIL released: until no Lease of fo gives its tensor back (libtensord's
 * hold taken only as long as its lock is: no timeout). */
static void released_wait(FollowObject *fo)
{
	uint32_t n;

	while ((n = atomic_load(&fo->releasing)) & ~RELEASING_WAITED) {
		/* say so before sleeping, on the very value seen: a release
		 * meanwhile changes the word, and the exchange fails */
		if (!(n & RELEASING_WAITED) &&
		    !atomic_compare_exchange_strong(&fo->releasing, &n,
						    n | RELEASING_WAITED))
			continue;
		syscall(SYS_futex, &fo->releasing, FUTEX_WAIT_PRIVATE,
			n | RELEASING_WAITED, NULL, NULL, 0);
	}
}

static int tdpy_follow_exported(OwnerObject *root)
{
	struct td_error e = {.code = -EBUSY};

	/* the client closed (or connected anew): the daemon ended the
	 * follow and its hold, and nothing holds the version any more;
	 * the call answers as it does without an export */
	if (!root->follow || !root->dl_exports || !tdpy_owner_held(root))
		return 0;
	snprintf(e.reason, sizeof(e.reason), "the followed tensor (version "
		 "%llu) is exported through DLPack (%u tensors alive); it "
		 "stays held until they are gone (del them)",
		 (unsigned long long)root->version, root->dl_exports);
	tdpy_raise(-EBUSY, &e, "follow");
	return -1;
}

static FollowObject *follow_usable(FollowObject *fo)
{
	/* a thread of the parent may have been giving one back */
	if (fo->forks != tdpy_forks)
		atomic_store(&fo->releasing, 0);
	tdpy_busy_forked(&fo->busy, &fo->forks);
	if (!fo->f) {
		PyErr_SetString(PyExc_ValueError, "the follow is closed");
		return NULL;
	}
	if (fo->busy)
		return (FollowObject *)tdpy_busy_error();
	if (tdpy_client_reentered(fo->client) < 0)
		return NULL;
	tdpy_client_flush(fo->client); /* a lease given back meanwhile */
	return fo;
}

/*
 * Usable, then busy, with the held tensor given back (its views stay
 * mapped): 0, or -1 (not busy) when closed, busy, or while a DLPack
 * export holds it (EBUSY). Busy first: the release lets the GIL go, and
 * another thread must not take a tensor meanwhile.
 */
static int give_back(FollowObject *fo)
{
	OwnerObject *o = fo->held;

	if (!follow_usable(fo))
		return -1;
	if (o && tdpy_follow_exported(o) < 0)
		return -1;
	fo->busy = true;
	if (o) {
		/* held meanwhile: the release lets the GIL go, and another
		 * thread may drop the last view of o then */
		Py_INCREF(o);
		tdpy_owner_release(o); /* clears fo->held */
		Py_DECREF(o);
	}
	return 0;
}

struct next_arg {
	FollowObject *fo;
	struct td_tensor **t;
	struct td_error *e;
};

static int next_slice(void *arg, int slice_ms)
{
	struct next_arg *n = arg;

	released_wait(n->fo);
	return td_follow_next(n->fo->f, slice_ms, n->t, n->e);
}

/*
 * td_follow_next() with the GIL released, a slice at a time
 * (tdpy_wait_sliced). 0 and *t, -ETIMEDOUT (ms passed; also for ms 0,
 * where libtensord says -EAGAIN: the binding's one exception for "none
 * came in time", tensord.Timeout), -EINTR with the handler's exception
 * set, or -errno.
 */
static int wait_next(FollowObject *fo, int ms, struct td_tensor **t,
		     struct td_error *e)
{
	struct next_arg n = {fo, t, e};
	int rc = tdpy_wait_sliced(ms, next_slice, &n, NULL);

	if (rc == -ETIMEDOUT && !fo->last) /* none given yet */
		snprintf(e->reason, sizeof(e->reason),
			 "no version of \"%s\" within %d ms",
			 PyUnicode_AsUTF8(fo->name), ms);
	else if (rc == -ETIMEDOUT)
		snprintf(e->reason, sizeof(e->reason),
			 "no version of \"%s\" newer than %llu within %d ms",
			 PyUnicode_AsUTF8(fo->name),
			 (unsigned long long)fo->last, ms);
	return rc;
}

/* The taken tensor whose fence did not signal, out of the epoll set. */
static struct td_tensor *fenced_take(FollowObject *fo)
{
	struct td_tensor *t = fo->fenced;

	if (fo->fenced_fd >= 0)
		(void)tdpy_client_epoll(fo->client, EPOLL_CTL_DEL,
					fo->fenced_fd);
	fo->fenced_fd = -1;
	fo->fenced = NULL;
	return t;
}

/*
 * t waits for its fence, kept for the next next() or poll(). In poll()
 * mode its fence fd joins Client.fileno()'s epoll set, so the loop wakes
 * when it signals (every kind polls readable then: an eventfd, a
 * sync_file, the timerfd tensord fires); where it cannot join, the
 * follow's timerfd looks again in a millisecond.
 */
static void fenced_keep(FollowObject *fo, struct td_tensor *t)
{
	int fd = td_tensor_fence_fd(t);

	fo->fenced = t;
	if (fo->efd < 0)
		return;
	if (fd >= 0 && tdpy_client_epoll(fo->client, EPOLL_CTL_ADD, fd) == 0) {
		fo->fenced_fd = fd;
		return;
	}
	(void)timerfd_settime(fo->efd, 0,
			      &(struct itimerspec){.it_value = {0, 1000000}},
			      NULL);
}

static PyObject *follow_wait(FollowObject *fo, int ms)
{
	int64_t start = tdpy_mono_ms(); /* the timeout's, fence included */
	struct td_tensor *t = NULL;
	struct td_error e = {0};
	int rc;

	if (give_back(fo) < 0)
		return NULL;
	t = fenced_take(fo);
	rc = t ? 0 : wait_next(fo, ms, &t, &e);
	/* given only once its fence signalled; until then it stays taken,
	 * and the next next() waits on it again (not on a newer one) */
	if (rc == 0) {
		rc = tdpy_fence_wait(NULL, t, PyUnicode_AsUTF8(fo->name), ms,
				     start, &e);
		if (rc < 0)
			fenced_keep(fo, t);
	}
	fo->busy = false;
	/* a sleep in td_follow_next() disarms the poll() waiter: wake
	 * fileno() so that the loop's next poll() arms it again */
	if (fo->efd >= 0)
		(void)timerfd_settime(fo->efd, 0,
				      &(struct itimerspec){.it_value = {0, 1}},
				      NULL);
	/* a handler's exception: raised between slices, or kept by one
	 * that ended a slice's request to a daemon late to answer */
	if (rc == -EINTR && tdpy_intr_take())
		return NULL;
	if (rc < 0)
		return tdpy_raise(rc, &e, "next");
	fo->last = td_tensor_version(t);
	return tdpy_lease_array(fo->client, t, fo->name, (PyObject *)fo);
}

static PyObject *follow_next_m(FollowObject *fo, PyObject *args,
			       PyObject *kw)
{
	int ms;

	if (!tdpy_timeout_arg(args, kw, &ms))
		return NULL;
	return follow_wait(fo, ms);
}

/* poll() mode: the follow's timerfd joins Client.fileno(). */
static int follow_start(FollowObject *fo)
{
	int fd;

	if (fo->efd >= 0)
		return 0;
	if (fo->client->epfd < 0) {
		PyErr_SetString(PyExc_ValueError, "the client is closed");
		return -1;
	}
	fo->busy = true;
	Py_BEGIN_ALLOW_THREADS
	fd = td_follow_fd(fo->f); /* one FOLLOW_WAKE round trip, once */
	Py_END_ALLOW_THREADS
	fo->busy = false;
	if (fd < 0) {
		tdpy_raise(fd, NULL, "poll: the follow's timerfd");
		return -1;
	}
	if (tdpy_client_epoll(fo->client, EPOLL_CTL_ADD, fd) < 0) {
		PyErr_SetFromErrno(PyExc_OSError);
		return -1;
	}
	fo->efd = fd;
	return 0;
}

/*
 * Without waiting: give the held tensor back, take the next or None. In
 * an event loop: Client.fileno() polls readable when this may have
 * something (the daemon fires the follow's timerfd at a change of the
 * name while it waits by fd).
 */
static PyObject *follow_poll_m(FollowObject *fo, PyObject *unused)
{
	struct td_tensor *t = NULL;
	struct td_error e = {0};
	int rc;

	if (!follow_usable(fo) || follow_start(fo) < 0 || give_back(fo) < 0)
		return NULL;
	t = fenced_take(fo);
	if (!t && (atomic_load(&fo->releasing) & ~RELEASING_WAITED)) {
		/* the one given last is still going back in another thread:
		 * none now, and fileno() looks again in a millisecond */
		fo->busy = false;
		(void)timerfd_settime(fo->efd, 0, &(struct itimerspec){
			.it_value = {0, 1000000}}, NULL);
		Py_RETURN_NONE;
	}
	if (!t) { /* it takes the client's lock, may ask the daemon */
		Py_BEGIN_ALLOW_THREADS
		rc = td_follow_poll(fo->f, &t, &e);
		Py_END_ALLOW_THREADS
	} else {
		rc = 0;
	}
	if (rc == 0 &&
	    tdpy_fence_wait(NULL, t, PyUnicode_AsUTF8(fo->name), 0, -1,
			    &e) < 0) {
		/* fileno() wakes when the fence signals (fenced_keep) */
		fenced_keep(fo, t);
		rc = -EAGAIN;
	}
	fo->busy = false;
	if (rc == -EAGAIN)
		Py_RETURN_NONE;
	if (rc < 0)
		return tdpy_raise(rc, &e, "poll");
	fo->last = td_tensor_version(t);
	return tdpy_lease_array(fo->client, t, fo->name, (PyObject *)fo);
}

/* for t in follow: each next version, for ever (errors raise). */
static PyObject *follow_iternext(FollowObject *fo)
{
	return follow_wait(fo, -1);
}

static PyObject *follow_release_m(FollowObject *fo, PyObject *unused)
{
	struct td_tensor *t;

	if (give_back(fo) < 0)
		return NULL;
	/* one taken whose fence did not signal in time goes back too */
	t = fenced_take(fo);
	if (t)
		tdpy_tensor_release(t);
	fo->busy = false;
	Py_RETURN_NONE;
}

/* Deferred (tdpy_client_defer): a follow's close asked for by a signal
 * handler inside a call of its client, once that call is out */
static void tensor_end_run(struct tdpy_deferred *d, struct td_client *h)
{
	(void)h;
	td_tensor_release(d->p);
}

static void follow_close_run(struct tdpy_deferred *d, struct td_client *h)
{
	(void)h;
	td_follow_close(d->p);
}

static void follow_close_later(FollowObject *fo, struct td_tensor *t,
			       struct td_follow *f)
{
	PyObject *type, *value, *tb;

	PyErr_Fetch(&type, &value, &tb);
	if ((t && tdpy_client_defer(fo->client, tensor_end_run, t, 0, NULL) <
			  0) ||
	    (f && tdpy_client_defer(fo->client, follow_close_run, f, 0, NULL) <
			  0))
		/* left to its close. The hook is told fo's type, not fo: a
		 * dealloc's fo has no references left, and the hook's own
		 * (taken and dropped) would free it a second time. */
		PyErr_WriteUnraisable((PyObject *)Py_TYPE(fo));
	PyErr_Restore(type, value, tb);
}

/* libtensord defers the end while a tensor it gave is held: that
 * tensor's release ends it. */
static void follow_really_close(FollowObject *fo)
{
	struct td_follow *f = fo->f;
	struct td_tensor *t;
	bool kept = tdpy_intr_kept();

	if (fo->efd >= 0)
		(void)tdpy_client_epoll(fo->client, EPOLL_CTL_DEL, fo->efd);
	t = fenced_take(fo); /* before the epoll set may go */
	fo->efd = -1; /* td_follow_close() closes it */
	fo->f = NULL;
	if ((t || f) && tdpy_client_locked_here(fo->client)) {
		follow_close_later(fo, t, f);
		return;
	}
	Py_BEGIN_ALLOW_THREADS
	td_tensor_release(t);
	if (f)
		td_follow_close(f);
	Py_END_ALLOW_THREADS
	/* a signal handler's exception in their waits: it ends no call */
	if (!kept)
		tdpy_intr_redeliver((PyObject *)fo);
}

static PyObject *follow_close(FollowObject *fo, PyObject *unused)
{
	tdpy_busy_forked(&fo->busy, &fo->forks);
	if (fo->busy)
		return tdpy_busy_error();
	follow_really_close(fo);
	Py_RETURN_NONE;
}

static void follow_dealloc(FollowObject *fo)
{
	/* every Lease it gave holds a reference: none is left */
	if (fo->weakrefs)
		PyObject_ClearWeakRefs((PyObject *)fo);
	follow_really_close(fo);
	Py_XDECREF(fo->client);
	Py_XDECREF(fo->name);
	PyObject_Free(fo);
}

static PyObject *follow_get_name(FollowObject *fo, void *unused)
{
	Py_INCREF(fo->name);
	return fo->name;
}

static PyObject *follow_get_closed(FollowObject *fo, void *unused)
{
	return PyBool_FromLong(!fo->f);
}

static PyMethodDef follow_methods[] = {
	{"next", (PyCFunction)(void (*)(void))follow_next_m,
	 METH_VARARGS | METH_KEYWORDS,
	 "next(timeout=None) -> the newest version newer than the last one "
	 "given, as get() gives it (gives the held one back first); "
	 "tensord.Timeout if none came (timeout=0: do not wait)"},
	{"poll", (PyCFunction)follow_poll_m, METH_NOARGS,
	 "Without waiting: the next version or None (gives the held one "
	 "back first); Client.fileno() wakes when there may be one"},
	{"release", (PyCFunction)follow_release_m, METH_NOARGS,
	 "Give the tensor last given back now (its views stay readable)."},
	{"close", (PyCFunction)follow_close, METH_NOARGS,
	 "Stop following (the end waits for a tensor still held)."},
	{"__enter__", tdpy_enter, METH_NOARGS, NULL},
	{"__exit__", tdpy_exit_close, METH_VARARGS, NULL},
	{NULL},
};

static PyGetSetDef follow_getset[] = {
	{"name", (getter)follow_get_name, NULL, "the followed name", NULL},
	{"closed", (getter)follow_get_closed, NULL,
	 "whether close() was called", NULL},
	{NULL},
};

PyTypeObject tdpy_follow_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "tensord.Follow",
	.tp_doc = "Following a name (Client.follow): each new version without "
		  "a message to the daemon; iterating gives each next one.",
	.tp_basicsize = sizeof(FollowObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_dealloc = (destructor)follow_dealloc,
	.tp_weaklistoffset = offsetof(FollowObject, weakrefs),
	.tp_iter = PyObject_SelfIter,
	.tp_iternext = (iternextfunc)follow_iternext,
	.tp_methods = follow_methods,
	.tp_getset = follow_getset,
};

int tdpy_follow_init(PyObject *m)
{
	tdpy_owner_hooks.follow_hold = tdpy_follow_hold;
	tdpy_owner_hooks.follow_let_go = tdpy_follow_let_go;
	tdpy_owner_hooks.follow_releasing = tdpy_follow_releasing;
	tdpy_owner_hooks.follow_exported = tdpy_follow_exported;
	if (PyType_Ready(&tdpy_follow_type) < 0)
		return -1;
	Py_INCREF(&tdpy_follow_type);
	return PyModule_AddObject(m, "Follow", (PyObject *)&tdpy_follow_type);
}
