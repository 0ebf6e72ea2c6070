/* SPDX-License-Identifier: MIT */
/*
 * Watch events in the binding: the Event type and the client's queue of
 * them (ClientObject.pending), which poll() takes whole and each Watch
 * takes its own events from, with its bound (Client(event_limit=N),
 * Client.event_limit), which is each watch's, and the overflow Events
 * that count what the bound or a want of memory dropped, here or in
 * libtensord.
 *
 * pending holds Events in arrival order. Each open watch has its share
 * of it (struct tdpy_watchq, its Watch's, linked from
 * ClientObject.watches): at most event_limit Events of its own, not
 * counting its overflow Event. An event that comes while its watch's
 * share is full, or finds no memory, is dropped and counted for its
 * watch in an Event("overflowed", "", count, watch_id): made in pending
 * at its watch's first drop and counting on while nobody took it
 * (tdpy_watchq.overflow), so there is at most one per watch. Who takes
 * the watch's events takes it: its Watch or poll(). So a watch nobody
 * reads drops only its own events, and pending holds at most (open
 * watches) x (event_limit + 1) Events, and the two below.
 *
 * An event of a watch that is not open (its Watch was closed) is
 * dropped where it is delivered, uncounted: closing a Watch unlinks it
 * and takes its Events out of pending at once, with the GIL held, so
 * that none comes out afterwards, whoever delivers events meanwhile.
 *
 * A loss no watch can be named for (libtensord's own OVERFLOWED event,
 * watch_id 0: its queue, bounded to the watches' room and 64 more,
 * dropped during another call, before anyone saw whose; or an overflow
 * Event that found no memory itself) may have been any watch's. It
 * goes to every Watch open then, each counting what it has seen of
 * lost_any, and to poll() as one overflow Event of watch_id 0 in
 * pending (ClientObject.lost_event; counted in lost_unqueued while
 * there is no memory for that one either).
 *
 * A reconnect (TD_CLIENT_RECONNECT) is one Event("reconnected", "", n,
 * 0) for poll(), outside the bound too (ClientObject.reconnected).
 *
 * Events come here by td_client_process() (tdpy_events_process): from
 * poll(), Watch.next() and close(), and, with a bound and a watch open,
 * after every call on the client (drain()), so that they do not pile up
 * in libtensord's queue between two poll()s.
 */
#include "tdpy.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/epoll.h>

/* libtensord's read of one td_client_process() (its LOOP_BATCH) */
#define TDPY_EVENT_SLACK 64u

static PyTypeObject event_type;
/* the Event types, one str each, shared by every Event */
static PyObject *type_published, *type_deleted, *type_overflowed,
	*type_reconnected, *type_unknown;

static PyStructSequence_Field event_fields[] = {
	{"type", "'published', 'deleted', 'overflowed' or 'reconnected'"},
	{"name", "tensor name ('' for 'overflowed')"},
	{"version", "version published or removed; for 'overflowed', how "
		    "many events were dropped; for 'reconnected', how many "
		    "watches were made again"},
	{"watch_id", "the watch that matched (for 'overflowed', the watch "
		     "whose events were dropped; 0 in poll(): any watch "
		     "open then)"},
	{NULL},
};
static PyStructSequence_Desc event_desc = {
	"tensord.Event",
	"Event(type, name, version, watch_id): a watch event. type "
	"'overflowed': version events of watch_id were dropped (the "
	"client's event_limit, which bounds each watch's queued events, or "
	"no memory); look again (stat, ls).",
	event_fields, 4};

static PyObject *event_make(PyObject *type, PyObject *name,
			    uint64_t version, uint64_t watch_id)
{
	PyObject *e = name ? PyStructSequence_New(&event_type) : NULL;

	if (!e) {
		Py_XDECREF(name);
		return NULL;
	}
	Py_INCREF(type);
	PyStructSequence_SET_ITEM(e, 0, type);
	PyStructSequence_SET_ITEM(e, 1, name);
	PyStructSequence_SET_ITEM(e, 2, PyLong_FromUnsignedLongLong(version));
	PyStructSequence_SET_ITEM(e, 3, PyLong_FromUnsignedLongLong(watch_id));
	if (!PyStructSequence_GET_ITEM(e, 2) ||
	    !PyStructSequence_GET_ITEM(e, 3)) {
		Py_DECREF(e);
		return NULL;
	}
	return e;
}

static PyObject *event_new(const struct td_event *ev)
{
	PyObject *type = ev->type == TD_EVENT_TYPE_PUBLISHED ? type_published
			 : ev->type == TD_EVENT_TYPE_DELETED ? type_deleted
							     : type_unknown;

	return event_make(type, PyUnicode_DecodeUTF8(ev->name,
			  (Py_ssize_t)strlen(ev->name), "replace"),
			  ev->version, ev->watch_id);
}

static PyObject *overflow_new(uint64_t n, uint64_t watch_id)
{
	return event_make(type_overflowed, PyUnicode_FromString(""), n,
			  watch_id);
}

static uint64_t event_u64(PyObject *e, int i)
{
	return PyLong_AsUnsignedLongLong(PyStructSequence_GET_ITEM(e, i));
}

/*
 * n more dropped in the overflow Event of q's watch (NULL: the one of
 * watch_id 0), made in pending if need be: 0, or -1 (no memory; no
 * exception left) with nothing changed. It counts on in place:
 * immutable to Python, it is still the binding's own until taken, when
 * q->overflow (self->lost_event) lets it go.
 */
static int overflow_add(ClientObject *self, struct tdpy_watchq *q,
			uint64_t n)
{
	PyObject **slot = q ? &q->overflow : &self->lost_event, *o, *v;

	if (!*slot) {
		/* making it may run Python code (a collection), which may
		 * close q's watch, or make this Event itself */
		o = overflow_new(n, q ? q->id : 0);
		if (!o) {
			PyErr_Clear();
			return -1;
		}
		if (q && !q->linked) {
			Py_DECREF(o); /* closed: nobody may be told */
			return 0;
		}
		if (!*slot) {
			if (PyList_Append(self->pending, o) < 0) {
				Py_DECREF(o);
				PyErr_Clear();
				return -1;
			}
			*slot = o; /* its own reference */
			return 0;
		}
		Py_DECREF(o);
	}
	o = *slot;
	v = PyLong_FromUnsignedLongLong(event_u64(o, 2) + n);
	if (!v) {
		PyErr_Clear();
		return -1;
	}
	Py_DECREF(PyStructSequence_GET_ITEM(o, 2));
	PyStructSequence_SET_ITEM(o, 2, v);
	return 0;
}

/* n events of q's watch (NULL: of no watch known) dropped: counted,
 * never lost, whatever memory there is (the GIL held) */
static void dropped(ClientObject *self, struct tdpy_watchq *q, uint64_t n)
{
	if (q && overflow_add(self, q, n) == 0)
		return;
	self->lost_any += n;
	n += self->lost_unqueued;
	self->lost_unqueued = overflow_add(self, NULL, n) ? n : 0;
}

/*
 * TD_CLIENT_RECONNECT ($TENSORD_RECONNECT=1) connected again, with n
 * watches made again: one Event('reconnected', '', n, 0) in pending for
 * poll(), outside the bound (no Watch takes it: counted, reconnects
 * would fill the bound for good and drop every watch's events) and
 * telling the latest reconnect while nobody took it, so that pending
 * stays bounded however often the daemon restarts. Without memory for
 * it, the application is not told (its watches go on all the same).
 */
static void reconnected(ClientObject *self, uint64_t n)
{
	PyObject *e = self->reconnected, *v;

	if (e) {
		v = PyLong_FromUnsignedLongLong(n);
		if (v) {
			Py_DECREF(PyStructSequence_GET_ITEM(e, 2));
			PyStructSequence_SET_ITEM(e, 2, v);
		}
	} else if ((e = event_make(type_reconnected, PyUnicode_FromString(""),
				   n, 0))) {
		if (PyList_Append(self->pending, e) == 0)
			self->reconnected = e;
		else
			Py_DECREF(e);
	}
	PyErr_Clear();
}

/* The open watch of id, NULL if none (closed, or never the binding's) */
static struct tdpy_watchq *watch_find(ClientObject *self, uint64_t id)
{
	struct tdpy_watchq *q = self->watches;

	while (q && q->id != id)
		q = q->next;
	return q;
}

/*
 * td_client_process() delivers watch events here (the GIL is not held
 * during it): each joins self->pending while its watch has room there
 * (event_limit of its own), else is dropped and counted for it; one of
 * a watch no longer open is dropped, uncounted: its Watch was closed
 * and nobody may get it. libtensord's own OVERFLOWED events are counted
 * for no watch known.
 *
 * The watch is looked up after the Event is made: making it may run
 * Python code (a garbage collection, whose finalizers may close that
 * very watch), and an Event kept for a watch closed meanwhile would
 * come out after its close.
 */
void tdpy_on_event(struct td_client *c, const struct td_event *ev,
		   void *ud)
{
	ClientObject *self = ud;
	PyGILState_STATE g = PyGILState_Ensure();
	struct tdpy_watchq *q;
	PyObject *e = NULL;

	if (ev->type == TD_EVENT_TYPE_OVERFLOWED)
		dropped(self, NULL, ev->version);
	else if (ev->type == TD_EVENT_TYPE_RECONNECTED)
		reconnected(self, ev->version);
	else if (!watch_find(self, ev->watch_id))
		; /* closed: its events go with it */
	else {
		e = event_new(ev);
		PyErr_Clear();
		q = watch_find(self, ev->watch_id);
		if (!q)
			;
		else if (self->event_limit && q->queued >= self->event_limit)
			dropped(self, q, 1);
		else if (!e || PyList_Append(self->pending, e) < 0) {
			PyErr_Clear();
			dropped(self, q, 1);
		} else
			q->queued++;
	}
	Py_XDECREF(e);
	PyGILState_Release(g);
	(void)c;
}

bool tdpy_events_waiting(ClientObject *self)
{
	return (self->pending && PyList_GET_SIZE(self->pending)) ||
	       self->lost_unqueued;
}

void tdpy_client_unwake(ClientObject *self)
{
	uint64_t n;

	if (tdpy_evfd_ours(self) && !tdpy_events_waiting(self) &&
	    read(self->evfd, &n, sizeof(n)) < 0) {
		/* EAGAIN: it was not signalled */
	}
}

/*
 * td_client_process() as the only caller of the client's at the time
 * (GIL released). Two threads' calls at once (Watch.next() in each, or
 * poll()) each took events from libtensord's queue in order, then waited
 * for the GIL to put them in pending: the later one could get there
 * first, and a watch's events came out of order.
 */
static int process_in_order(ClientObject *self, struct td_client *c,
			    struct td_error *e)
{
	int rc;

	pthread_mutex_lock(&self->deliver);
	rc = td_client_process(c, e);
	pthread_mutex_unlock(&self->deliver);
	return rc;
}

/*
 * Everything libtensord has for this client, without waiting: its one
 * piece of event logic, td_client_process(), with the GIL released.
 * Events go to self->pending (tdpy_on_event); fileno() is woken while
 * any are there.
 * rc >= 0, or -1 with the exception set.
 */
static int process_now(ClientObject *self, const char *what)
{
	struct td_error e = {0};
	struct td_client *c = tdpy_client_enter(self);
	int rc;

	if (!c)
		return -1;
	self->handing++; /* no drain() from its own leave */
	TDPY_CALL(self, rc, process_in_order(self, c, &e));
	self->handing--;
	if (tdpy_events_waiting(self))
		tdpy_client_wake(self);
	if (rc < 0) {
		tdpy_raise(rc, &e, what);
		return -1;
	}
	return rc;
}

int tdpy_events_process(ClientObject *self, const char *what)
{
	/*
	 * Another thread's call is in flight: td_client_process() would
	 * wait for libtensord's lock, which that call holds until its reply
	 * comes (a daemon stopped: for ever). The events it reads meanwhile
	 * stay queued in libtensord, handed over when it returns or between
	 * the slices of its wait (hand_over).
	 */
	if (tdpy_client_in_flight(self)) {
		self->want_hand_over = true;
		return 0;
	}
	return process_now(self, what);
}

/*
 * Between two slices of a wait (tdpy_wait_sliced) that is the only call
 * in flight, while a poll() left libtensord's fd out of fileno() for it:
 * that poll()'s hand-over, done by the waiting thread, whose call does
 * not hold libtensord then; the fd goes back into fileno() (readable if
 * more is there, and the loop's next poll() leaves it out again while
 * the wait goes on).
 */
static void hand_over(ClientObject *self)
{
	PyObject *type, *value, *tb;

	self->want_hand_over = false;
	PyErr_Fetch(&type, &value, &tb);
	if (process_now(self, "events") < 0)
		PyErr_Clear(); /* the loop's poll() raises it */
	PyErr_Restore(type, value, tb);
	if (self->cfd_parked &&
	    (tdpy_client_epoll(self, EPOLL_CTL_ADD, self->cfd) == 0 ||
	     errno == EEXIST))
		self->cfd_parked = false;
}

/*
 * After each call on the client (tdpy_client_leave), with a bound and
 * watches open: what libtensord queued during the call is handed here
 * at once, where each watch's bound applies, rather than piling up in
 * libtensord's queue until the next poll() or Watch.next(), where past
 * (open watches) x event_limit + 64 it would be dropped for every
 * watch. Raises nothing, and keeps the call's exception, if any.
 */
static void drain(ClientObject *self)
{
	PyObject *type, *value, *tb;

	if (self->handing || !self->watch_count || !self->event_limit)
		return;
	PyErr_Fetch(&type, &value, &tb);
	if (tdpy_events_process(self, "events") < 0)
		PyErr_Clear(); /* the next call raises it again */
	PyErr_Restore(type, value, tb);
}

/* Every watch's share of pending let go: pending was taken or is gone */
static void shares_clear(ClientObject *self)
{
	for (struct tdpy_watchq *q = self->watches; q; q = q->next) {
		q->queued = 0;
		Py_CLEAR(q->overflow);
	}
	Py_CLEAR(self->lost_event);
	Py_CLEAR(self->reconnected);
}

int tdpy_events_reset(ClientObject *self)
{
	struct tdpy_watchq *q;

	shares_clear(self);
	/* the Watches of an earlier connection stay, apart */
	while ((q = self->watches)) {
		self->watches = q->next;
		q->next = NULL;
		q->linked = false;
	}
	/* atomic: tdpy_events_c_sync reads it without the GIL */
	__atomic_store_n(&self->watch_count, 0, __ATOMIC_RELAXED);
	Py_XSETREF(self->pending, PyList_New(0));
	self->lost_unqueued = 0; /* lost_any goes on: Watches compare it */
	return self->pending ? 0 : -1;
}

void tdpy_events_free(ClientObject *self)
{
	/* (no Watch is left: each holds its client) */
	shares_clear(self);
	Py_CLEAR(self->pending);
}

/* Every Event in pending, which starts anew; NULL with an exception */
PyObject *tdpy_events_take_all(ClientObject *self)
{
	PyObject *r, *fresh = PyList_New(0);

	if (!fresh)
		return NULL;
	if (self->lost_unqueued &&
	    overflow_add(self, NULL, self->lost_unqueued) == 0)
		self->lost_unqueued = 0;
	r = self->pending;
	self->pending = fresh;
	shares_clear(self); /* theirs are the caller's now */
	return r;
}

/* Item i out of list l, its reference the caller's; in place, with no
 * memory asked for, so that it cannot fail */
static PyObject *list_cut(PyObject *l, Py_ssize_t i)
{
	PyListObject *lo = (PyListObject *)l;
	PyObject *it = lo->ob_item[i];
	Py_ssize_t n = Py_SIZE(l);

	memmove(&lo->ob_item[i], &lo->ob_item[i + 1],
		(size_t)(n - i - 1) * sizeof(PyObject *));
	Py_SET_SIZE(lo, n - 1);
	return it;
}

void tdpy_events_watch_open(ClientObject *self, struct tdpy_watchq *q,
			    uint64_t id)
{
	*q = (struct tdpy_watchq){.next = self->watches, .id = id,
				  .linked = true,
				  /* losses before it were not its */
				  .lost_seen = self->lost_any};
	self->watches = q;
	__atomic_add_fetch(&self->watch_count, 1, __ATOMIC_RELAXED);
}

/*
 * q's first Event out of pending, NULL if none (no exception): first
 * what was lost for no watch known since q->lost_seen, which may have
 * been its own.
 */
PyObject *tdpy_events_take(ClientObject *self, struct tdpy_watchq *q)
{
	PyObject *pending = self->pending, *it;

	if (!q->linked)
		return NULL;
	if (self->lost_any != q->lost_seen) {
		it = overflow_new(self->lost_any - q->lost_seen, q->id);
		if (it && !q->linked) { /* closed meanwhile (a collection) */
			Py_DECREF(it);
			return NULL;
		}
		if (it) {
			q->lost_seen = self->lost_any;
			return it;
		}
		PyErr_Clear(); /* given once there is memory */
	}
	for (Py_ssize_t i = 0; i < PyList_GET_SIZE(pending); i++) {
		it = PyList_GET_ITEM(pending, i);
		if (event_u64(it, 3) != q->id) /* (ids start at 1) */
			continue;
		list_cut(pending, i);
		if (it == q->overflow)
			Py_CLEAR(q->overflow); /* pending's is the caller's */
		else
			q->queued--;
		return it;
	}
	return NULL;
}

/*
 * q's watch was closed: unlinked (the handler drops its events from now
 * on) and its Events (its overflow Event too) out of pending, whose room
 * they held. Nothing here asks for memory: once it returns, no Event of
 * the watch is anywhere but where someone took it before.
 */
void tdpy_events_forget(ClientObject *self, struct tdpy_watchq *q)
{
	struct tdpy_watchq **pp = &self->watches;
	PyObject *pending = self->pending, *it;

	if (!q->linked)
		return;
	while (*pp && *pp != q)
		pp = &(*pp)->next;
	if (*pp)
		*pp = q->next;
	q->next = NULL;
	q->linked = false;
	__atomic_sub_fetch(&self->watch_count, 1, __ATOMIC_RELAXED);
	for (Py_ssize_t i = 0; pending && i < PyList_GET_SIZE(pending);) {
		it = PyList_GET_ITEM(pending, i);
		if (event_u64(it, 3) == q->id)
			Py_DECREF(list_cut(pending, i));
		else
			i++;
	}
	q->queued = 0;
	Py_CLEAR(q->overflow);
}

/* ---- Client.event_limit ---- */

PyObject *tdpy_client_get_event_limit(ClientObject *self, void *unused)
{
	return PyLong_FromUnsignedLong(self->event_limit);
}

int tdpy_conv_event_limit(PyObject *o, void *out)
{
	PyObject *n = tdpy_index(o);
	unsigned long v;

	if (!n) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_TypeError,
					"event_limit must be an int");
		return 0;
	}
	v = PyLong_AsUnsignedLong(n); /* OverflowError: < 0 */
	Py_DECREF(n);
	if (v == (unsigned long)-1 && PyErr_Occurred())
		return 0;
	if (v > UINT_MAX) {
		PyErr_SetString(PyExc_OverflowError, "event_limit is over "
				"2**32-1 (0 is no bound)");
		return 0;
	}
	*(unsigned *)out = (unsigned)v;
	return 1;
}

/*
 * libtensord's bound for the binding's: its queue holds the events that
 * come during another call (until a td_client_process() hands them
 * here), and those one process() reads (up to 64 messages at a time)
 * before it hands them here. It keeps what every open watch may keep
 * here, and that burst: libtensord drops (for no watch known) only past
 * watches x max + 64 at once.
 */
static unsigned c_limit(unsigned max, unsigned watches)
{
	uint64_t n = (uint64_t)max * watches + TDPY_EVENT_SLACK;

	if (!max)
		return 0; /* no bound here, none there */
	return n > UINT_MAX ? UINT_MAX : (unsigned)n;
}

/*
 * The GIL released and deliver held (so that the last one to set it
 * read the last count), the client entered: watch_count and
 * event_limit change only with the GIL, hence the atomic loads.
 */
void tdpy_events_c_sync(ClientObject *self, struct td_client *c)
{
	unsigned max = __atomic_load_n(&self->event_limit, __ATOMIC_RELAXED);
	unsigned n = __atomic_load_n(&self->watch_count, __ATOMIC_RELAXED);

	(void)td_client_set_event_limit(c, c_limit(max, n)); /* c is set */
}

/* The bound, here and in libtensord; 0 or -1 with an exception */
int tdpy_events_limit(ClientObject *self, unsigned max)
{
	struct td_client *c = tdpy_client_enter(self);

	if (!c)
		return -1;
	__atomic_store_n(&self->event_limit, max, __ATOMIC_RELAXED);
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&self->deliver);
	tdpy_events_c_sync(self, c);
	pthread_mutex_unlock(&self->deliver);
	Py_END_ALLOW_THREADS
	tdpy_client_leave(self);
	return 0;
}

int tdpy_client_set_event_limit(ClientObject *self, PyObject *v, void *u)
{
	unsigned max;

	if (!v) {
		PyErr_SetString(PyExc_AttributeError,
				"event_limit cannot be deleted (0: no bound)");
		return -1;
	}
	if (!tdpy_conv_event_limit(v, &max))
		return -1;
	return tdpy_events_limit(self, max);
}

int tdpy_events_init(PyObject *m)
{
	type_published = PyUnicode_InternFromString("published");
	type_deleted = PyUnicode_InternFromString("deleted");
	type_overflowed = PyUnicode_InternFromString("overflowed");
	type_reconnected = PyUnicode_InternFromString("reconnected");
	type_unknown = PyUnicode_InternFromString("unknown");
	if (!type_published || !type_deleted || !type_overflowed ||
	    !type_reconnected || !type_unknown ||
	    PyStructSequence_InitType2(&event_type, &event_desc) < 0)
		return -1;
	tdpy_client_left = drain;
	tdpy_client_hand_over = hand_over;
	Py_INCREF(&event_type);
	if (PyModule_AddObject(m, "Event", (PyObject *)&event_type) < 0) {
		Py_DECREF(&event_type);
		return -1;
	}
	return 0;
}
