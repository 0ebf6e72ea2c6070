/* SPDX-License-Identifier: MIT */
/*
 * Watch events in the binding: the Event type and the client's queue of
 * them (ClientObject.pending), which poll() takes whole and each Watch
 * takes its own events from, with its bound (Client(event_limit=N),
 * Client.event_limit) and the overflow Events that count what the bound
 * or a want of memory dropped, here or in libtensord.
 *
 * pending holds Events in arrival order, at most event_limit of them
 * that are not overflow Events (`queued`). An event that comes while it
 * is full, or finds no memory, is dropped and counted for its watch in
 * an Event("overflowed", "", count, watch_id): made in pending at its
 * watch's first drop and counting on while nobody took it, so there is
 * at most one per watch and pending stays bounded whatever comes
 * (ClientObject.overflows finds it by watch id). Who
 * takes the watch's events takes it: its Watch or poll().
 *
 * A loss no watch can be named for (libtensord's own OVERFLOWED event,
 * watch_id 0: its queue, bounded to the same limit, dropped during
 * another call, before anyone saw whose; or an overflow Event that
 * found no memory itself) may have been any watch's. It goes to every
 * Watch open then, each counting what it has seen of lost_any, and to
 * poll() as one overflow Event of watch_id 0 in pending (counted in
 * lost_unqueued while there is no memory for that one either).
 *
 * A reconnect (TD_CLIENT_RECONNECT) is one Event("reconnected", "", n,
 * 0) for poll(), outside the bound too (ClientObject.reconnected).
 */
#include "tdpy.h"

#include <limits.h>
#include <string.h>

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
	"client's event_limit, or no memory); look again (stat, ls).",
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

static bool is_overflow(PyObject *e)
{
	return PyStructSequence_GET_ITEM(e, 0) == type_overflowed;
}

/* Counted against event_limit: a watch's event, not the binding's own
 * (overflow, reconnected), which stay outside the bound */
static bool counted(PyObject *e)
{
	return !is_overflow(e) &&
	       PyStructSequence_GET_ITEM(e, 0) != type_reconnected;
}

static uint64_t event_u64(PyObject *e, int i)
{
	return PyLong_AsUnsignedLongLong(PyStructSequence_GET_ITEM(e, i));
}

/*
 * n more dropped in watch_id's overflow Event in pending, made if need
 * be; 0, or -1 (no memory; no exception left) with nothing changed. The
 * Event is found through self->overflows (a drop costs no walk of
 * pending) and counts on in place: immutable to Python, it is still the
 * binding's own until taken, when it leaves self->overflows.
 */
static int overflow_add(ClientObject *self, uint64_t watch_id, uint64_t n)
{
	PyObject *key = PyLong_FromUnsignedLongLong(watch_id), *o = NULL, *v;
	int rc = -1;

	if (key) /* o borrowed */
		o = PyDict_GetItemWithError(self->overflows, key);
	if (o) {
		v = PyLong_FromUnsignedLongLong(event_u64(o, 2) + n);
		if (v) {
			Py_DECREF(PyStructSequence_GET_ITEM(o, 2));
			PyStructSequence_SET_ITEM(o, 2, v);
			rc = 0;
		}
	} else if (key && !PyErr_Occurred() &&
		   (o = overflow_new(n, watch_id))) {
		if (PyDict_SetItem(self->overflows, key, o) == 0) {
			if (PyList_Append(self->pending, o) == 0)
				rc = 0;
			else
				PyDict_DelItem(self->overflows, key);
		}
		Py_DECREF(o);
	}
	Py_XDECREF(key);
	if (rc < 0)
		PyErr_Clear();
	return rc;
}

/* n events of watch_id (0: of no watch known) dropped: counted, never
 * lost, whatever memory there is (the GIL held) */
static void dropped(ClientObject *self, uint64_t watch_id, uint64_t n)
{
	if (watch_id && overflow_add(self, watch_id, n) == 0)
		return;
	self->lost_any += n;
	n += self->lost_unqueued;
	self->lost_unqueued = overflow_add(self, 0, n) ? n : 0;
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

/*
 * td_client_process() delivers watch events here (the GIL is not held
 * during it): they join self->pending, where poll() and each Watch take
 * them, or are dropped and counted (the limit, no memory); libtensord's
 * own OVERFLOWED events are counted likewise.
 */
void tdpy_on_event(struct td_client *c, const struct td_event *ev,
		   void *ud)
{
	ClientObject *self = ud;
	PyGILState_STATE g = PyGILState_Ensure();
	PyObject *e = NULL;

	if (ev->type == TD_EVENT_TYPE_OVERFLOWED)
		dropped(self, ev->watch_id, ev->version);
	else if (ev->type == TD_EVENT_TYPE_RECONNECTED)
		reconnected(self, ev->version);
	else if (self->event_limit && self->queued >= self->event_limit)
		dropped(self, ev->watch_id, 1);
	else if (!(e = event_new(ev)) || PyList_Append(self->pending, e) < 0) {
		PyErr_Clear();
		dropped(self, ev->watch_id, 1);
	} else
		self->queued++;
	Py_XDECREF(e);
	PyGILState_Release(g);
	(void)c;
}

bool tdpy_events_waiting(ClientObject *self)
{
	return (self->pending && PyList_GET_SIZE(self->pending)) ||
	       self->lost_unqueued;
}

int tdpy_events_reset(ClientObject *self)
{
	Py_XSETREF(self->pending, PyList_New(0));
	Py_XSETREF(self->overflows, PyDict_New());
	self->queued = 0;
	Py_CLEAR(self->reconnected);
	self->lost_unqueued = 0; /* lost_any goes on: Watches compare it */
	return self->pending && self->overflows ? 0 : -1;
}

void tdpy_events_free(ClientObject *self)
{
	Py_CLEAR(self->pending);
	Py_CLEAR(self->overflows);
	Py_CLEAR(self->reconnected);
}

/* Every Event in pending, which starts anew; NULL with an exception */
PyObject *tdpy_events_take_all(ClientObject *self)
{
	PyObject *r, *fresh = PyList_New(0);

	if (!fresh)
		return NULL;
	if (self->lost_unqueued && overflow_add(self, 0, self->lost_unqueued)
				   == 0)
		self->lost_unqueued = 0;
	r = self->pending;
	self->pending = fresh;
	self->queued = 0;
	Py_CLEAR(self->reconnected);
	PyDict_Clear(self->overflows); /* theirs are the caller's now */
	return r;
}

/*
 * Watch id's first Event out of pending, NULL if none (no exception):
 * first what was lost for no watch known since *seen (the client's
 * lost_any the Watch saw), which may have been its own.
 */
PyObject *tdpy_events_take(ClientObject *self, uint64_t id, uint64_t *seen)
{
	PyObject *pending = self->pending, *it;

	if (self->lost_any != *seen) {
		it = overflow_new(self->lost_any - *seen, id);
		if (it) {
			*seen = self->lost_any;
			return it;
		}
		PyErr_Clear(); /* given once there is memory */
	}
	for (Py_ssize_t i = 0; i < PyList_GET_SIZE(pending); i++) {
		it = PyList_GET_ITEM(pending, i);
		if (event_u64(it, 3) != id)
			continue;
		Py_INCREF(it);
		if (PySequence_DelItem(pending, i) < 0) {
			Py_DECREF(it);
			PyErr_Clear();
			return NULL;
		}
		if (is_overflow(it) &&
		    PyDict_DelItem(self->overflows,
				   PyStructSequence_GET_ITEM(it, 3)) < 0)
			PyErr_Clear(); /* (it was there) */
		self->queued -= counted(it);
		return it;
	}
	return NULL;
}

/* Watch id was closed: its Events (and its overflow Event) leave
 * pending, whose room they held; kept where there is no memory for the
 * new list (no exception left) */
void tdpy_events_forget(ClientObject *self, uint64_t id)
{
	PyObject *kept = PyList_New(0), *it;
	unsigned queued = 0;

	for (Py_ssize_t i = 0;
	     kept && self->pending && i < PyList_GET_SIZE(self->pending);
	     i++) {
		it = PyList_GET_ITEM(self->pending, i);
		if (event_u64(it, 3) == id)
			continue;
		queued += counted(it);
		if (PyList_Append(kept, it) < 0)
			Py_CLEAR(kept);
	}
	if (!kept || !self->pending) {
		Py_XDECREF(kept);
		PyErr_Clear();
		return;
	}
	/* its overflow Event leaves overflows by its own key (no memory
	 * needed): a later watch of the same id starts anew */
	for (Py_ssize_t i = 0; i < PyList_GET_SIZE(self->pending); i++) {
		it = PyList_GET_ITEM(self->pending, i);
		if (is_overflow(it) && event_u64(it, 3) == id &&
		    PyDict_DelItem(self->overflows,
				   PyStructSequence_GET_ITEM(it, 3)) < 0)
			PyErr_Clear();
	}
	Py_SETREF(self->pending, kept);
	self->queued = queued;
}

/* ---- Client.event_limit ---- */

PyObject *tdpy_client_get_event_limit(ClientObject *self, void *unused)
{
	return PyLong_FromUnsignedLong(self->event_limit);
}

int tdpy_conv_event_limit(PyObject *o, void *out)
{
	unsigned long v;

	if (!PyLong_Check(o)) {
		PyErr_SetString(PyExc_TypeError, "event_limit must be an int");
		return 0;
	}
	v = PyLong_AsUnsignedLong(o); /* OverflowError: < 0 */
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
 * libtensord's bound for a client's bound of max: its queue holds the
 * events that come during another call, and those one process() reads
 * (up to 64 messages at a time) before it hands them here. With that
 * room over max, what it reads while pending has room reaches the
 * binding, which can count a drop for its watch; libtensord drops (for
 * no watch known) only past max + 64 during another call.
 */
unsigned tdpy_events_c_limit(unsigned max)
{
	return !max ? 0 : max > UINT_MAX - TDPY_EVENT_SLACK
			      ? UINT_MAX : max + TDPY_EVENT_SLACK;
}

/* The bound, here and in libtensord; 0 or -1 with an exception */
int tdpy_events_limit(ClientObject *self, unsigned max)
{
	struct td_client *c = tdpy_client_enter(self);
	int rc;

	if (!c)
		return -1;
	TDPY_CALL(self, rc,
		  td_client_set_event_limit(c, tdpy_events_c_limit(max)));
	if (rc < 0) {
		tdpy_raise(rc, NULL, "event_limit");
		return -1;
	}
	self->event_limit = max;
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
	Py_INCREF(&event_type);
	if (PyModule_AddObject(m, "Event", (PyObject *)&event_type) < 0) {
		Py_DECREF(&event_type);
		return -1;
	}
	return 0;
}
