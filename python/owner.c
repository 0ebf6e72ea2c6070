/* SPDX-License-Identifier: MIT */
/*
 * Owners, the memory behind arrays: a lease, a loan, a ring slot, a
 * subscriber's view, or one plane of a lease or loan; and the dtype and
 * shape rules every file converts with. What an Owner must ask the file
 * that made it (a ring's slot, a follow's hold) goes through
 * tdpy_owner_hooks, which ring.c and follow.c fill at init.
 *
 * The pages behind a lease's views are the binding's own mapping of the
 * plane's file (maps.c: why, and its cache); loans and ring slots have
 * theirs (tensor.c, ring.c).
 */
#include "tdpy.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- dtypes, shapes ---- */

static const struct {
	uint32_t td;
	int npy;
} dtype_table[] = {
	{TD_TENSOR_U8, NPY_UINT8},    {TD_TENSOR_I8, NPY_INT8},
	{TD_TENSOR_U16, NPY_UINT16},  {TD_TENSOR_I16, NPY_INT16},
	{TD_TENSOR_U32, NPY_UINT32},  {TD_TENSOR_I32, NPY_INT32},
	{TD_TENSOR_U64, NPY_UINT64},  {TD_TENSOR_I64, NPY_INT64},
	{TD_TENSOR_F16, NPY_FLOAT16}, {TD_TENSOR_F32, NPY_FLOAT32},
	{TD_TENSOR_F64, NPY_FLOAT64},
};
#define DTYPE_COUNT (sizeof(dtype_table) / sizeof(dtype_table[0]))

PyArray_Descr *tdpy_descr_of(uint32_t dtype)
{
	unsigned size = td_tensor_dtype_size(dtype);
	PyArray_Descr *d;

	for (size_t i = 0; i < DTYPE_COUNT; i++)
		if (dtype_table[i].td == dtype)
			return PyArray_DescrFromType(dtype_table[i].npy);
	if (!size) {
		PyErr_Format(tdpy_error, "unknown dtype code %u", dtype);
		return NULL;
	}
	/* a dtype libtensord knows and numpy lacks (bfloat16, ...): raw
	 * bytes of the right width, never a wrong numeric type; the
	 * array's .dtype_name says what they are */
	d = PyArray_DescrNewFromType(NPY_VOID);
	if (d)
		d->elsize = (int)size;
	return d;
}

int tdpy_dtype_of(const PyArray_Descr *d)
{
	PyObject *n;

	for (size_t i = 0; i < DTYPE_COUNT; i++) {
		PyArray_Descr *t = PyArray_DescrFromType(dtype_table[i].npy);
		bool same = t->kind == d->kind && t->elsize == d->elsize;

		Py_DECREF(t);
		if (same && (d->kind == 'u' || d->kind == 'i' ||
			     d->kind == 'f'))
			return (int)dtype_table[i].td;
	}
	/* named as numpy names it (float128 for np.longdouble), not by
	 * its kind and byte count, which read as a blob name ('f16') */
	n = PyObject_Str((PyObject *)d);
	if (!n)
		return -1;
	PyErr_Format(PyExc_TypeError, "tensord has no dtype for numpy's "
		     "%U%s: the blob has no dtype code for it; use u8..u64, "
		     "i8..i64, f16, f32 or f64", n,
		     d->type_num == NPY_LONGDOUBLE ? " (np.longdouble)" :
		     d->type_num == NPY_CLONGDOUBLE ? " (np.clongdouble)" : "");
	Py_DECREF(n);
	return -1;
}

int tdpy_conv_dtype(PyObject *o, void *out)
{
	PyArray_Descr *d = NULL;
	int code;

	if (PyUnicode_Check(o)) {
		const char *s = PyUnicode_AsUTF8(o);

		if (!s)
			return 0;
		code = td_tensor_dtype_from_name(s);
		if (code >= 0) {
			*(uint32_t *)out = (uint32_t)code;
			return 1;
		}
	}
	if (!PyArray_DescrConverter2(o, &d))
		return 0;
	if (!d) {
		PyErr_SetString(PyExc_TypeError, "dtype must not be None");
		return 0;
	}
	/* the array handed back is the tensor's bytes, which are
	 * little-endian (blob spec), this machine's order: a big-endian
	 * dtype asked for would be given as another dtype than asked, and
	 * bytes written as big-endian ones would be read swapped */
	if (d->elsize > 1 && !PyArray_ISNBO(d->byteorder)) {
		PyArray_Descr *le = PyArray_DescrNewByteorder(d, NPY_LITTLE);
		PyObject *n = PyObject_Str((PyObject *)d);
		PyObject *l = le ? PyObject_GetAttrString((PyObject *)le, "str")
				 : NULL;

		if (n && l)
			PyErr_Format(PyExc_ValueError, "dtype %U is big-endian:"
				     " tensord tensors are little-endian (the "
				     "blob spec; this machine's byte order): "
				     "ask for %U", n, l);
		Py_XDECREF(n);
		Py_XDECREF(l);
		Py_XDECREF(le);
		Py_DECREF(d);
		return 0;
	}
	code = tdpy_dtype_of(d);
	Py_DECREF(d);
	if (code < 0)
		return 0;
	*(uint32_t *)out = (uint32_t)code;
	return 1;
}

/* A sequence of at most TDPY_MAX_DIMS ints >= 0 (what: "dimension" or
 * "stride", for the errors). */
static int ints_parse(PyObject *o, npy_intp *out, int *n, const char *what)
{
	PyArray_Dims dims = {NULL, 0};

	if (!PyArray_IntpConverter(o, &dims))
		return -1;
	if (dims.len > TDPY_MAX_DIMS) {
		PyErr_Format(PyExc_ValueError, "%d %ss, at most %d", dims.len,
			     what, TDPY_MAX_DIMS);
		goto fail;
	}
	for (int i = 0; i < dims.len; i++) {
		if (dims.ptr[i] < 0) {
			PyErr_Format(PyExc_ValueError, "negative %s %zd at "
				     "index %d (%ss must be >= 0)", what,
				     (Py_ssize_t)dims.ptr[i], i, what);
			goto fail;
		}
		out[i] = dims.ptr[i];
	}
	*n = dims.len;
	PyDimMem_FREE(dims.ptr);
	return 0;
fail:
	PyDimMem_FREE(dims.ptr);
	return -1;
}

int tdpy_shape_parse(PyObject *o, npy_intp *shape, int *ndim)
{
	return ints_parse(o, shape, ndim, "dimension");
}

int tdpy_strides_parse(PyObject *o, npy_intp *strides, int *n)
{
	return ints_parse(o, strides, n, "stride");
}

int tdpy_dense(int ndim, const npy_intp *shape, npy_intp itemsize,
	       npy_intp *strides, uint64_t *bytes)
{
	uint64_t n = (uint64_t)itemsize;

	for (int i = ndim - 1; i >= 0; i--) {
		strides[i] = (npy_intp)n;
		if (shape[i] && __builtin_mul_overflow(n, (uint64_t)shape[i],
						       &n))
			return -1;
		if (!shape[i])
			n = 0;
	}
	if (n > (uint64_t)NPY_MAX_INTP)
		return -1;
	/* a zero dimension makes 0 bytes; strides stay well formed */
	for (int i = 0; i < ndim; i++)
		if (!shape[i])
			n = 0;
	*bytes = n;
	return 0;
}

int tdpy_span(int ndim, const npy_intp *shape, const npy_intp *strides,
	      npy_intp itemsize, uint64_t *span)
{
	uint64_t end = (uint64_t)itemsize;

	for (int i = 0; i < ndim; i++) {
		uint64_t step;

		if (!shape[i]) {
			*span = 0;
			return 0;
		}
		if (strides[i] < 0) {
			PyErr_SetString(PyExc_ValueError,
					"negative strides are not supported");
			return -1;
		}
		if (__builtin_mul_overflow((uint64_t)shape[i] - 1,
					   (uint64_t)strides[i], &step) ||
		    __builtin_add_overflow(end, step, &end))
			goto big;
	}
	if (end > (uint64_t)NPY_MAX_INTP)
		goto big;
	*span = end;
	return 0;
big:
	PyErr_SetString(PyExc_ValueError, "layout spans more than 2^63 bytes");
	return -1;
}

/* ---- Owner ---- */

struct tdpy_owner_hooks tdpy_owner_hooks;

OwnerObject *tdpy_owner_new(enum owner_kind kind, PyObject *parent)
{
	OwnerObject *o = PyObject_New(OwnerObject, &tdpy_owner_type);

	if (!o)
		return NULL;
	memset((char *)o + sizeof(PyObject), 0,
	       sizeof(*o) - sizeof(PyObject));
	o->kind = kind;
	Py_INCREF(parent);
	o->parent = parent;
	/* a lease's or a loan's parent is its Client */
	if (kind == OWNER_LEASE || kind == OWNER_LOAN)
		o->conn = ((ClientObject *)parent)->conn;
	return o;
}

OwnerObject *tdpy_owner_root(OwnerObject *o)
{
	return o->kind == OWNER_PLANE ? (OwnerObject *)o->parent : o;
}

bool tdpy_owner_writable(OwnerObject *o)
{
	return o->writable && tdpy_owner_root(o)->writable;
}

/* Deferred (tdpy_client_defer): a lease's or loan's end asked for by a
 * signal handler inside a call of its client, once that call is out */
static void lease_end_run(struct tdpy_deferred *d, struct td_client *h)
{
	(void)h;
	td_tensor_release_nowait(d->p);
	if (d->ref) /* its Follow */
		tdpy_owner_hooks.follow_releasing(d->ref, -1);
}

static void loan_end_run(struct tdpy_deferred *d, struct td_client *h)
{
	(void)h;
	td_alloc_free(d->p);
}

/* The client whose handle o (a root holding a lease or loan: its parent
 * is that Client) has it of, if that handle's lock is this thread's now
 * (tdpy_interrupted) */
static ClientObject *client_locked(const OwnerObject *o)
{
	ClientObject *cl = (ClientObject *)o->parent;

	return (o->kind == OWNER_LEASE || o->kind == OWNER_LOAN) &&
		       tdpy_client_locked_here(cl)
		       ? cl
		       : NULL;
}

/* Its end after that call: libtensord's lock is this thread's (no
 * exception raised: a dying owner's release raises none) */
static void release_later(ClientObject *cl, OwnerObject *o,
			  struct td_tensor *t, struct td_alloc *a)
{
	PyObject *type, *value, *tb;

	PyErr_Fetch(&type, &value, &tb);
	if ((t && tdpy_client_defer(cl, lease_end_run, t, 0, o->follow) < 0) ||
	    (a && tdpy_client_defer(cl, loan_end_run, a, 0, NULL) < 0))
		/* no memory for it: left to the connection's end. The hook
		 * is told o's type, not o: a dying owner (owner_dealloc) has
		 * no references left, and the hook's own (taken and dropped)
		 * would free it a second time. */
		PyErr_WriteUnraisable((PyObject *)Py_TYPE(o));
	PyErr_Restore(type, value, tb);
}

/* End what the owner holds in libtensord (lease, unpublished loan). */
void tdpy_owner_release(OwnerObject *plane_or_root)
{
	OwnerObject *o = tdpy_owner_root(plane_or_root);
	struct td_tensor *t = o->t;
	struct td_alloc *a = o->a;
	ClientObject *cl = (t || a) ? client_locked(o) : NULL;

	o->t = NULL;
	o->a = NULL;
	/*
	 * The Follow's pointer to o (not a reference) goes first, before the
	 * GIL does: o may be dying (owner_dealloc), and a next() in another
	 * thread meanwhile must not find it there.
	 */
	if (o->follow)
		tdpy_owner_hooks.follow_let_go(o->follow, o);
	if (o->follow && t)
		tdpy_owner_hooks.follow_releasing(o->follow, 1);
	if (cl) {
		release_later(cl, o, t, a);
	} else if (t || a) {
		bool kept = tdpy_intr_kept();

		/* no wait for the daemon's answer: it ends the lease before
		 * it serves this client's next request (a round trip less);
		 * a follow's hold is one store to its row */
		Py_BEGIN_ALLOW_THREADS
		td_tensor_release_nowait(t);
		td_alloc_free(a);
		if (o->follow && t)
			tdpy_owner_hooks.follow_releasing(o->follow, -1);
		Py_END_ALLOW_THREADS
		/* a signal handler's exception in a send the socket's full
		 * buffer held up (td_client_set_interrupt_ex): it ends no
		 * call */
		if (!kept)
			tdpy_intr_redeliver((PyObject *)o);
	}
}

static void owner_dealloc(OwnerObject *o)
{
	if (o->weakrefs)
		PyObject_ClearWeakRefs((PyObject *)o);
	if (o->kind != OWNER_PLANE) /* a plane's lease is its parent's */
		tdpy_owner_release(o);
	if (o->loan_map)
		tdpy_map_put(o->loan_map); /* no view left: the next loan's */
	else if (o->map)
		munmap(o->map, o->map_len);
	tdpy_map_put(o->cache);
	PyMem_Free(o->heap);
	if (o->kind == OWNER_VIEW)
		tdpy_owner_hooks.view_gone(o->parent);
	if (o->kind == OWNER_SLOT)
		tdpy_owner_hooks.slot_gone(o->parent);
	Py_XDECREF(o->parent);
	Py_XDECREF(o->name);
	Py_XDECREF(o->metadata);
	Py_XDECREF(o->format);
	Py_XDECREF(o->follow);
	for (uint32_t i = 0; i < TDPY_MAX_PLANES; i++)
		Py_XDECREF(o->plane_refs[i]);
	PyObject_Free(o);
}

static const char *buffer_format(uint32_t dtype)
{
	switch (dtype) {
	case TD_TENSOR_U8: return "B";
	case TD_TENSOR_I8: return "b";
	case TD_TENSOR_U16: return "H";
	case TD_TENSOR_I16: return "h";
	case TD_TENSOR_U32: return "I";
	case TD_TENSOR_I32: return "i";
	case TD_TENSOR_U64: return "Q";
	case TD_TENSOR_I64: return "q";
	case TD_TENSOR_F16: return "e";
	case TD_TENSOR_F32: return "f";
	case TD_TENSOR_F64: return "d";
	}
	return NULL;
}

/*
 * Which tensor a refusal is about, as the binding's other errors say it:
 * a lease's or a loan's name and version (a plane's index), a ring's
 * name for its slots and views. Appended to a BufferError raised on the
 * way (ring.c's hook's too), keeping its type and its own text first;
 * what: "DLPack export", "buffer".
 */
void tdpy_owner_name_refusal(OwnerObject *o, const char *what)
{
	OwnerObject *r = tdpy_owner_root(o);
	PyObject *type, *value, *tb, *msg;
	const char *n;
	char who[TD_NAME_MAX + 96];

	if (!PyErr_ExceptionMatches(PyExc_BufferError))
		return;
	PyErr_Fetch(&type, &value, &tb);
	n = r->name ? PyUnicode_AsUTF8(r->name) : NULL;
	if (!n) {
		PyErr_Clear();
		n = "?";
	}
	if (r->kind == OWNER_VIEW)
		snprintf(who, sizeof(who), "ring \"%s\" view version %llu",
			 n, (unsigned long long)r->version);
	else if (r->kind == OWNER_SLOT)
		snprintf(who, sizeof(who), "a slot of ring \"%s\" (from "
			 "acquire())", n);
	else if (r->kind == OWNER_LOAN && !r->version)
		snprintf(who, sizeof(who), "\"%s\" (an alloc() loan, %s)", n,
			 r->a ? "not published" : "published");
	else
		snprintf(who, sizeof(who), "\"%s\" version %llu", n,
			 (unsigned long long)r->version);
	if (o->kind == OWNER_PLANE)
		snprintf(who + strlen(who), sizeof(who) - strlen(who),
			 " plane %u", o->plane);
	msg = value ? PyUnicode_FromFormat("%S (%s of %s)", value, what,
					   who)
		    : PyUnicode_FromFormat("no %s of %s", what, who);
	if (!msg) {
		PyErr_Restore(type, value, tb);
		return;
	}
	Py_XDECREF(value);
	Py_XDECREF(tb);
	PyErr_SetObject(type, msg);
	Py_DECREF(type);
	Py_DECREF(msg);
}

/* The buffer protocol over the whole tensor: read-only unless writable. */
static int owner_getbuffer_unnamed(OwnerObject *o, Py_buffer *view,
				   int flags)
{
	const char *fmt = buffer_format(o->dtype);
	unsigned isz = td_tensor_dtype_size(o->dtype);

	if (o->plane_count > 1) {
		PyErr_SetString(PyExc_BufferError, "a tensor of several "
				"planes: use the buffer of each plane");
		return -1;
	}
	if ((flags & PyBUF_WRITABLE) && !tdpy_owner_writable(o)) {
		PyErr_SetString(PyExc_BufferError,
				"a tensord view is read-only");
		return -1;
	}
	if (!fmt) {
		/* raw bytes of a dtype the struct module cannot name */
		fmt = "B";
		if (isz != 1 && (flags & PyBUF_FORMAT)) {
			PyErr_SetString(PyExc_BufferError, "dtype has no "
					"buffer-protocol format");
			return -1;
		}
	}
	if (!(flags & PyBUF_STRIDES)) {
		npy_intp dense[TDPY_MAX_DIMS];
		uint64_t n;

		if (tdpy_dense(o->ndim, o->shape, isz, dense, &n) < 0 ||
		    memcmp(dense, o->strides, sizeof(npy_intp) * o->ndim)) {
			PyErr_SetString(PyExc_BufferError,
					"tensor is not contiguous");
			return -1;
		}
	}
	view->buf = o->data;
	view->obj = (PyObject *)o;
	Py_INCREF(o);
	view->len = isz;
	for (int i = 0; i < o->ndim; i++)
		view->len *= o->shape[i];
	view->readonly = !tdpy_owner_writable(o);
	view->itemsize = isz;
	view->format = (flags & PyBUF_FORMAT) ? (char *)fmt : NULL;
	/* without PyBUF_ND (PyBUF_SIMPLE: hashlib, zlib) the buffer is one
	 * run of len bytes, no shape: ndim 1 as PyBuffer_FillInfo gives it
	 * (hashlib refuses an ndim over 1, which numpy's arrays never say) */
	view->ndim = (flags & PyBUF_ND) ? o->ndim : 1;
	view->shape = (flags & PyBUF_ND) ? (Py_ssize_t *)o->shape : NULL;
	view->strides = (flags & PyBUF_STRIDES) ? (Py_ssize_t *)o->strides
						: NULL;
	view->suboffsets = NULL;
	view->internal = NULL;
	o->exports++;
	return 0;
}

/* Its refusals name the tensor, as the DLPack export's do. */
static int owner_getbuffer(OwnerObject *o, Py_buffer *view, int flags)
{
	int rc = owner_getbuffer_unnamed(o, view, flags);

	if (rc < 0)
		tdpy_owner_name_refusal(o, "buffer");
	return rc;
}

static void owner_releasebuffer(OwnerObject *o, Py_buffer *view)
{
	o->exports--;
}

static PyBufferProcs owner_as_buffer = {
	.bf_getbuffer = (getbufferproc)owner_getbuffer,
	.bf_releasebuffer = (releasebufferproc)owner_releasebuffer,
};

/* __array_interface__ (version 3): numpy and others map it without copy. */
static PyObject *owner_array_interface(OwnerObject *o, void *unused)
{
	PyArray_Descr *d = tdpy_descr_of(o->dtype);
	PyObject *shape = NULL, *strides = NULL, *typestr = NULL, *res = NULL;

	if (!d)
		return NULL;
	if (o->plane_count > 1) {
		Py_DECREF(d);
		PyErr_SetString(PyExc_AttributeError, "a tensor of several "
				"planes has an __array_interface__ per plane");
		return NULL;
	}
	shape = PyTuple_New(o->ndim);
	strides = PyTuple_New(o->ndim);
	if (!shape || !strides)
		goto out;
	for (int i = 0; i < o->ndim; i++) {
		PyTuple_SET_ITEM(shape, i, PyLong_FromSsize_t(o->shape[i]));
		PyTuple_SET_ITEM(strides, i,
				 PyLong_FromSsize_t(o->strides[i]));
	}
	typestr = PyObject_GetAttrString((PyObject *)d, "str");
	if (!typestr)
		goto out;
	res = Py_BuildValue("{s:O,s:O,s:O,s:(nO),s:i}", "shape", shape,
			    "strides", strides, "typestr", typestr, "data",
			    (Py_ssize_t)(uintptr_t)o->data,
			    tdpy_owner_writable(o) ? Py_False : Py_True,
			    "version", 3);
out:
	Py_DECREF(d);
	Py_XDECREF(shape);
	Py_XDECREF(strides);
	Py_XDECREF(typestr);
	return res;
}

/*
 * Client.close() ends the client's leases and loans in the daemon (and a
 * follow's holds), while their td_tensor and td_alloc stay (libtensord
 * keeps them mapped until released): views stay readable, but nothing
 * is held any more. So is a lease of an earlier connection of a client
 * connected again.
 */
bool tdpy_owner_held(OwnerObject *r)
{
	ClientObject *cl = (ClientObject *)r->parent;

	if (r->kind == OWNER_SLOT)
		return tdpy_owner_hooks.slot_held(r);
	if (r->kind == OWNER_VIEW)
		return tdpy_owner_hooks.view_held(r);
	if (!(r->kind == OWNER_LEASE && r->t) &&
	    !(r->kind == OWNER_LOAN && r->a))
		return false;
	return cl->c && cl->conn == r->conn;
}

/*
 * The fd of the buffer behind the tensor (borrowed: valid while held).
 * Not once the client closed: libtensord keeps the tensor's fd open
 * until its release, but nothing is held any more and the fd is one
 * the caller must not rely on.
 */
static PyObject *owner_fileno(OwnerObject *o, PyObject *unused)
{
	OwnerObject *r = tdpy_owner_root(o);
	int fd = -1;

	if (r->kind == OWNER_LEASE && tdpy_owner_held(r))
		fd = td_tensor_plane_fd(r->t, o->plane);
	else if (r->kind == OWNER_LOAN && tdpy_owner_held(r))
		fd = td_alloc_fd(r->a, 0);
	if (fd < 0) {
		PyErr_SetString(PyExc_ValueError, "no buffer fd: released, "
				"published, its client closed, or a ring "
				"slot");
		return NULL;
	}
	return PyLong_FromLong(fd);
}

PyObject *tdpy_owner_do_release(OwnerObject *o)
{
	if (o->kind == OWNER_VIEW) {
		if (tdpy_owner_hooks.view_release(o->parent, o->version) < 0)
			return NULL;
	} else if (tdpy_owner_hooks.follow_exported(tdpy_owner_root(o)) < 0) {
		return NULL;
	} else
		tdpy_owner_release(o);
	Py_RETURN_NONE;
}

static PyObject *owner_release_m(OwnerObject *o, PyObject *unused)
{
	return tdpy_owner_do_release(o);
}

static PyObject *get_held(OwnerObject *o, void *unused)
{
	return PyBool_FromLong(tdpy_owner_held(tdpy_owner_root(o)));
}

static PyObject *get_dtype_name(OwnerObject *o, void *unused)
{
	const char *n = td_tensor_dtype_name(o->dtype);

	return PyUnicode_FromString(n ? n : "?");
}

/* A plane's version and metadata are its root's (publish sets them). */
static PyObject *get_version(OwnerObject *o, void *unused)
{
	o = tdpy_owner_root(o);
	return PyLong_FromUnsignedLongLong(o->version);
}

static PyObject *get_name(OwnerObject *o, void *unused)
{
	PyObject *n = o->name ? o->name : Py_None;

	Py_INCREF(n);
	return n;
}

static PyObject *get_metadata(OwnerObject *o, void *unused)
{
	o = tdpy_owner_root(o);
	if (!o->metadata)
		return PyBytes_FromStringAndSize("", 0);
	Py_INCREF(o->metadata);
	return o->metadata;
}

static PyMethodDef owner_methods[] = {
	{"release", (PyCFunction)owner_release_m, METH_NOARGS,
	 "End the lease (or give an unpublished loan up) now. Views stay "
	 "mapped and never fault; see the binding's documentation."},
	{"fileno", (PyCFunction)owner_fileno, METH_NOARGS,
	 "The fd of the buffer (borrowed, valid while held)."},
	{NULL},
};

static PyGetSetDef owner_getset[] = {
	{"__array_interface__", (getter)owner_array_interface, NULL, NULL, NULL},
	{"version", (getter)get_version, NULL, "version number, 0 if none", NULL},
	{"name", (getter)get_name, NULL, "tensor or ring name", NULL},
	{"metadata", (getter)get_metadata, NULL, "user metadata bytes", NULL},
	{"dtype_name", (getter)get_dtype_name, NULL, "tensord dtype name", NULL},
	{"held", (getter)get_held, NULL, "whether the lease/loan is held", NULL},
	{NULL},
};

PyTypeObject tdpy_owner_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "tensord.Lease",
	.tp_doc = "The memory behind tensord arrays: a lease, a loan or a "
		  "ring slot.",
	.tp_basicsize = sizeof(OwnerObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_dealloc = (destructor)owner_dealloc,
	.tp_weaklistoffset = offsetof(OwnerObject, weakrefs),
	.tp_as_buffer = &owner_as_buffer,
	.tp_methods = owner_methods,
	.tp_getset = owner_getset,
};

int tdpy_loan_open(ClientObject *self, OwnerObject *o, uint64_t size)
{
	struct td_error e = {0};
	struct td_client *c = tdpy_client_enter(self);
	const char *name;
	int rc;

	if (!c)
		return -1;
	/* publish() uses o->name: a recyclable loan is named for it, so its
	 * buffers stay recycled when readers that may not read every name
	 * this uid may write mapped them (docs/fastpath.md, "Across names") */
	name = o->alloc_flags && o->name ? PyUnicode_AsUTF8(o->name) : NULL;
	/* a name publish() would refuse is refused now, before the user
	 * fills a loan that the refusal would take */
	if (o->name && !name) {
		const char *n = PyUnicode_AsUTF8(o->name);

		rc = n ? td_name_check(n, &e) : -EINVAL;
		if (rc < 0) {
			if (n)
				tdpy_raise(rc, &e, "alloc");
			return -1;
		}
	}
	TDPY_CALL(self, rc, td_client_alloc_named(c, name, 1, &size,
						  o->alloc_flags, &o->a, &e));
	if (rc < 0) {
		tdpy_raise(rc, &e, "alloc");
		return -1;
	}
	/* our own shared mapping: libtensord unmaps its own at publish,
	 * while views of this one must stay valid after (publish turns it
	 * copy-on-write, tdpy_loan_leave); alloc(private=False)'s is
	 * cached (maps.c): its buffer comes back to this client */
	o->size = size;
	if (!size)
		return 0;
	if (o->keep_shared) {
		rc = tdpy_map_loan(self, td_alloc_fd(o->a, 0), size,
				   &o->loan_map, &o->map);
		if (rc < 0) {
			errno = -rc;
			PyErr_SetFromErrno(PyExc_OSError);
			return -1;
		}
	} else {
		o->map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED,
			      td_alloc_fd(o->a, 0), 0);
		if (o->map == MAP_FAILED) {
			o->map = NULL;
			PyErr_SetFromErrno(PyExc_OSError);
			return -1;
		}
		/* not into a child of fork(): its writable mapping would
		 * fail the publish's write seal (libclient/produce.c) */
		(void)madvise(o->map, size, MADV_DONTFORK);
	}
	o->map_len = size;
	o->data = o->map;
	return 0;
}

int tdpy_loan_leave(OwnerObject *o)
{
	if (o->keep_shared || !o->map)
		return 0;
	if (mmap(o->map, o->map_len, PROT_READ | PROT_WRITE,
		 MAP_FIXED | MAP_PRIVATE, td_alloc_fd(o->a, 0), 0) ==
	    MAP_FAILED) {
		PyErr_SetFromErrno(PyExc_OSError);
		return -1;
	}
	return 0;
}

/* numpy.lib.stride_tricks.DummyArray: the holder as_strided() (and so
 * sliding_window_view(), subok=True) puts between a view and its base;
 * its .base is that base. Found at init, NULL if numpy lacks it. */
static PyObject *dummy_array_type;

/* The tensor owner obj's chain of bases ends at, or NULL (memory of its
 * own, or of another object); sets no exception. */
OwnerObject *tdpy_owner_at_base(PyObject *obj)
{
	PyObject *b = obj;
	int holders = 0; /* DummyArrays passed: a cycle of them ends */

	for (;;) {
		if (b && PyArray_Check(b)) {
			b = PyArray_BASE((PyArrayObject *)b);
		} else if (b && dummy_array_type && holders++ < 64 &&
			   (PyObject *)Py_TYPE(b) == dummy_array_type) {
			PyObject *n = PyObject_GetAttrString(b, "base");

			if (!n) {
				PyErr_Clear();
				return NULL;
			}
			Py_DECREF(n); /* b's attribute keeps it */
			b = n;
		} else {
			break;
		}
	}
	return b && Py_TYPE(b) == &tdpy_owner_type ? (OwnerObject *)b : NULL;
}

OwnerObject *tdpy_owner_of(PyObject *obj)
{
	OwnerObject *o = tdpy_owner_at_base(obj);

	if (!o)
		PyErr_SetString(PyExc_TypeError,
				"not a view of a tensord tensor");
	return o;
}

int tdpy_owner_init(PyObject *m)
{
	PyObject *st;

	if (PyType_Ready(&tdpy_owner_type) < 0)
		return -1;
	/* DummyArray is optional: without it, as_strided()'s views with
	 * subok=True are plain ndarrays */
	st = PyImport_ImportModule("numpy.lib.stride_tricks");
	if (st) {
		Py_XSETREF(dummy_array_type,
			   PyObject_GetAttrString(st, "DummyArray"));
		Py_DECREF(st);
	}
	PyErr_Clear();
	Py_INCREF(&tdpy_owner_type);
	return PyModule_AddObject(m, "Lease", (PyObject *)&tdpy_owner_type);
}
