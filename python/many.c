/* SPDX-License-Identifier: MIT */
/*
 * Client.get_many(): the latest version of several names leased at one
 * instant, at once or once the first name has a newer version
 * (td_client_get_many, td_client_get_many_newer; docs/python.md). Its
 * arrays are tensor.c's (tdpy_lease_array).
 */
#include "tdpy.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* get_many's tensors t[n] as a tuple of Arrays (each consumed). */
static PyObject *many_tuple(ClientObject *self, struct td_tensor **t,
			    const char **names, Py_ssize_t n)
{
	PyObject *out = PyTuple_New(n);

	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *name_o = out ? PyUnicode_FromString(names[i]) : NULL;
		PyObject *a = name_o ? tdpy_lease_array(self, t[i], name_o,
							NULL)
				     : NULL;

		if (!name_o)
			tdpy_tensor_release(t[i]);
		Py_XDECREF(name_o);
		if (!a)
			Py_CLEAR(out);
		else
			PyTuple_SET_ITEM(out, i, a);
	}
	return out;
}

/* One slice of a get_many() that waits (tdpy_wait_sliced). */
struct many_arg {
	struct td_client *c;
	const char *const *names;
	uint32_t n;
	uint64_t after;
	struct td_tensor **t;
	struct td_error *e;
	bool asked;             /* the first request, which does not wait */
	bool seen[TD_MANY_MAX]; /* names a STAT found since */
};

/*
 * A DELETE of one of the names ends a GET_MANY parked in the daemon, but
 * one that falls between two slices finds no request to end, and the
 * next slice would park as if the name had never been there. So before
 * each slice that waits, every name is looked at (STAT): one found
 * before and gone now ends the call as the daemon would have. The first
 * request does not wait, so a call answered at once costs no STAT, and
 * what it found (nothing newer) holds at the first look too: the call's
 * wait begins there. -ENOENT with the reason, else 0.
 */
static int many_gone(struct many_arg *g)
{
	for (uint32_t i = 0; i < g->n; i++) {
		struct td_entry en = {0};
		int rc = td_client_stat(g->c, g->names[i], &en, NULL);

		td_entry_fini(&en);
		if (rc == 0) {
			g->seen[i] = true;
		} else if (rc == -ENOENT && g->seen[i]) {
			g->e->code = -ENOENT;
			snprintf(g->e->reason, sizeof(g->e->reason),
				 "GET_MANY element %u (\"%s\"): deleted while "
				 "the request waited: nothing leased",
				 i, g->names[i]);
			return -ENOENT;
		}
		/* any other refusal is the GET_MANY's to give */
	}
	return 0;
}

static int many_slice(void *arg, int slice_ms)
{
	struct many_arg *g = arg;
	int rc;

	if (!g->asked) {
		g->asked = true;
		rc = td_client_get_many_newer(g->c, g->n, g->names, g->after,
					      0, g->t, g->e);
		if (rc != -ETIMEDOUT || slice_ms == 0)
			return rc;
	}
	rc = many_gone(g);
	if (rc < 0)
		return rc;
	return td_client_get_many_newer(g->c, g->n, g->names, g->after,
					slice_ms, g->t, g->e);
}

/*
 * Each tensor once its fence signalled (tdpy_fence_wait), within what is
 * left of the call's timeout of ms begun at start (-1: no limit): it
 * bounds the wait for the versions and their fences together. The
 * fences were waited for without a limit, and a fence that never
 * signalled (its producer died before signalling) held
 * get_many(timeout=) for ever; then with the whole timeout again.
 */
static int many_fences(ClientObject *self, struct td_tensor **t,
		       const char **names, Py_ssize_t n, int ms,
		       int64_t start, struct td_error *e)
{
	int rc = 0;

	for (Py_ssize_t i = 0; rc == 0 && i < n; i++)
		rc = tdpy_fence_wait(self, t[i], names[i], ms, start, e);
	return rc;
}

/*
 * get_many(names, newer=None, timeout=None) -> tuple of read-only
 * Arrays: the latest version of each name, leased at one instant
 * (td_client_get_many): versions a td_client_publish_many() made are got
 * together or not at all. With newer (or timeout) it first waits until
 * names[0] has a version newer than `newer` (0 when only timeout is
 * given: any), a slice at a time (td_client_get_many_newer). Each array
 * is handed out once its fence (if any) signalled, all within timeout
 * (many_fences).
 */
PyObject *tdpy_client_get_many(ClientObject *self, PyObject *args,
			       PyObject *kw)
{
	static char *kwlist[] = {"names", "newer", "timeout", NULL};
	PyObject *names_o, *newer = Py_None, *to = Py_None;
	const char *names[TD_MANY_MAX];
	struct td_tensor *t[TD_MANY_MAX] = {0};
	struct td_error e = {0};
	struct td_client *c;
	PyObject *seq, *out = NULL;
	uint64_t after = 0;
	Py_ssize_t n;
	int64_t start = tdpy_mono_ms(); /* the timeout's, fences included */
	int ms = -1, rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO", kwlist, &names_o,
					 &newer, &to))
		return NULL;
	if (!tdpy_conv_timeout(to, &ms))
		return NULL;
	if (newer != Py_None && !tdpy_conv_version(newer, &after))
		return NULL;
	/* a str is a sequence too: of one-letter names, which a call
	 * meant as get_many(name) must not quietly ask for */
	if (PyUnicode_Check(names_o) || PyBytes_Check(names_o) ||
	    PyByteArray_Check(names_o)) {
		PyErr_Format(PyExc_TypeError, "get_many() takes a sequence "
			     "of names, not one %.100s: get_many([name])",
			     Py_TYPE(names_o)->tp_name);
		return NULL;
	}
	seq = PySequence_Fast(names_o, "get_many() takes a sequence of names");
	if (!seq)
		return NULL;
	n = PySequence_Fast_GET_SIZE(seq);
	if (n < 1 || n > TD_MANY_MAX) {
		PyErr_Format(PyExc_ValueError, "get_many() takes 1 to %d "
			     "names, not %zd", TD_MANY_MAX, n);
		goto out;
	}
	for (Py_ssize_t i = 0; i < n; i++)
		if (!tdpy_conv_name(PySequence_Fast_GET_ITEM(seq, i),
				    &names[i]))
			goto out;
	c = tdpy_client_enter(self);
	if (!c)
		goto out;
	if (newer != Py_None || to != Py_None) {
		struct many_arg g = {c, names, (uint32_t)n, after, t, &e,
				     .asked = false};

		rc = tdpy_wait_sliced(ms, many_slice, &g, self);
		if (rc == -ETIMEDOUT)
			snprintf(e.reason, sizeof(e.reason),
				 "GET_MANY: no version of \"%s\" newer than "
				 "%llu within %d ms: nothing leased",
				 names[0], (unsigned long long)after, ms);
	} else {
		Py_BEGIN_ALLOW_THREADS
		rc = td_client_get_many(c, (uint32_t)n, names, t, &e);
		Py_END_ALLOW_THREADS
	}
	if (rc == 0)
		rc = many_fences(self, t, names, n, ms, start, &e);
	for (Py_ssize_t i = 0; rc < 0 && i < n; i++)
		if (t[i])
			tdpy_tensor_release(t[i]);
	tdpy_client_leave(self);
	if (rc == -EINTR && tdpy_intr_take())
		goto out; /* a signal handler's exception */
	if (rc < 0)
		tdpy_raise(rc, &e, "get_many");
	else
		out = many_tuple(self, t, names, n);
out:
	Py_DECREF(seq);
	return out;
}
