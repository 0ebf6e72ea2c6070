/* SPDX-License-Identifier: MIT */
/*
 * Owners (the memory behind arrays) and tensord.Array, the ndarray
 * subclass every tensor comes back as (DLPack export: dlexport.c).
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

/* Data pointer of zero-byte arrays: numpy allocates when given NULL. */
static char zero_size_data[1];

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
	if (Py_TYPE(parent) == &tdpy_client_type)
		o->conn = ((ClientObject *)parent)->conn;
	return o;
}

OwnerObject *tdpy_owner_root(OwnerObject *o)
{
	return o->kind == OWNER_PLANE ? (OwnerObject *)o->parent : o;
}

/* End what the owner holds in libtensord (lease, unpublished loan). */
void tdpy_owner_release(OwnerObject *plane_or_root)
{
	OwnerObject *o = tdpy_owner_root(plane_or_root);
	struct td_tensor *t = o->t;
	struct td_alloc *a = o->a;

	o->t = NULL;
	o->a = NULL;
	if (t || a) {
		/* no wait for the daemon's answer: it ends the lease before
		 * it serves this client's next request (a round trip less);
		 * a follow's hold is one store to its row */
		Py_BEGIN_ALLOW_THREADS
		td_tensor_release_nowait(t);
		td_alloc_free(a);
		Py_END_ALLOW_THREADS
	}
	if (o->follow)
		tdpy_follow_let_go(o->follow, o);
}

static void owner_dealloc(OwnerObject *o)
{
	if (o->kind != OWNER_PLANE) /* a plane's lease is its parent's */
		tdpy_owner_release(o);
	if (o->map)
		munmap(o->map, o->map_len);
	tdpy_map_put(o->cache);
	PyMem_Free(o->heap);
	if (o->kind == OWNER_VIEW)
		tdpy_sub_view_gone(o->parent);
	if (o->kind == OWNER_SLOT)
		tdpy_ring_view_gone(o->parent);
	Py_XDECREF(o->parent);
	Py_XDECREF(o->name);
	Py_XDECREF(o->metadata);
	Py_XDECREF(o->format);
	Py_XDECREF(o->follow);
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

/* The buffer protocol over the whole tensor: read-only unless writable. */
static int owner_getbuffer(OwnerObject *o, Py_buffer *view, int flags)
{
	const char *fmt = buffer_format(o->dtype);
	unsigned isz = td_tensor_dtype_size(o->dtype);

	if (o->plane_count > 1) {
		PyErr_SetString(PyExc_BufferError, "a tensor of several "
				"planes: use the buffer of each plane");
		return -1;
	}
	if ((flags & PyBUF_WRITABLE) && !o->writable) {
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
	view->readonly = !o->writable;
	view->itemsize = isz;
	view->format = (flags & PyBUF_FORMAT) ? (char *)fmt : NULL;
	view->ndim = o->ndim;
	view->shape = (flags & PyBUF_ND) ? (Py_ssize_t *)o->shape : NULL;
	view->strides = (flags & PyBUF_STRIDES) ? (Py_ssize_t *)o->strides
						: NULL;
	view->suboffsets = NULL;
	view->internal = NULL;
	o->exports++;
	return 0;
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
			    o->writable ? Py_False : Py_True, "version", 3);
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
		return tdpy_ring_slot_held(r);
	if (r->kind == OWNER_VIEW)
		return tdpy_sub_view_held(r);
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

static PyObject *owner_do_release(OwnerObject *o)
{
	if (o->kind == OWNER_VIEW) {
		if (tdpy_sub_view_release(o->parent, o->version) < 0)
			return NULL;
	} else if (tdpy_follow_exported(tdpy_owner_root(o)) < 0) {
		return NULL;
	} else
		tdpy_owner_release(o);
	Py_RETURN_NONE;
}

static PyObject *owner_release_m(OwnerObject *o, PyObject *unused)
{
	return owner_do_release(o);
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
	.tp_as_buffer = &owner_as_buffer,
	.tp_methods = owner_methods,
	.tp_getset = owner_getset,
};

PyObject *tdpy_owner_array(OwnerObject *o)
{
	PyArray_Descr *d = tdpy_descr_of(o->dtype);
	PyObject *arr;

	if (!d) {
		Py_DECREF(o);
		return NULL;
	}
	/* steals d */
	arr = PyArray_NewFromDescr(&tdpy_array_type, d, o->ndim, o->shape,
				   o->strides,
				   o->size ? o->data : zero_size_data,
				   o->writable ? NPY_ARRAY_WRITEABLE : 0,
				   NULL);
	if (!arr) {
		Py_DECREF(o);
		return NULL;
	}
	if (PyArray_SetBaseObject((PyArrayObject *)arr, (PyObject *)o) < 0) {
		Py_DECREF(arr);
		return NULL;
	}
	return arr;
}

/* numpy.lib.stride_tricks.DummyArray: the holder as_strided() (and so
 * sliding_window_view(), subok=True) puts between a view and its base;
 * its .base is that base. Found at init, NULL if numpy lacks it. */
static PyObject *dummy_array_type;

/* The tensor owner obj's chain of bases ends at, or NULL (memory of its
 * own, or of another object); sets no exception. */
static OwnerObject *owner_at_base(PyObject *obj)
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
	OwnerObject *o = owner_at_base(obj);

	if (!o)
		PyErr_SetString(PyExc_TypeError,
				"not a view of a tensord tensor");
	return o;
}

/* ---- tensord.Array ---- */

static PyObject *array_owner_attr(PyObject *self, void *name)
{
	OwnerObject *o = tdpy_owner_of(self);

	if (!o)
		return NULL;
	return PyObject_GetAttrString((PyObject *)o, name);
}

static PyObject *array_lease(PyObject *self, void *unused)
{
	OwnerObject *o = tdpy_owner_of(self);

	Py_XINCREF(o);
	return (PyObject *)o;
}

static PyObject *array_release(PyObject *self, PyObject *unused)
{
	OwnerObject *o = tdpy_owner_of(self);

	return o ? owner_do_release(o) : NULL;
}

/*
 * The rule every result follows: a tensord.Array if and only if its
 * memory is a view of a tensor's pages (its chain of array bases ends at
 * a tensord.Lease), a plain ndarray when it has memory of its own.
 *
 * numpy makes every array of this type it creates (views and copies:
 * astype, flatten, take, fancy indexing, ...) through
 * PyArray_NewFromDescr, which sets the new array's base, then calls the
 * type's __array_finalize__: here a capsule of this C function, so no
 * Python call on the zero-copy path. A new array that owns its memory
 * (or whose bases end elsewhere) becomes a plain ndarray there, before
 * anyone but its maker holds it: the two types have the same layout and
 * are static (no reference to the type to move), so only the type
 * pointer changes. One with data given and no base yet is ours
 * (tdpy_owner_array sets the Lease right after) or a view numpy gives
 * its base after creating it: left as it is.
 *
 * Only the exact type is changed: a Python subclass of tensord.Array may
 * have another layout (a __dict__) and holds a reference to its type.
 */
static bool can_retype; /* set at init: the layouts agree */

static int array_finalize(PyArrayObject *self, PyObject *obj)
{
	(void)obj;
	if (Py_TYPE(self) != &tdpy_array_type || !can_retype)
		return 0;
	if (!PyArray_CHKFLAGS(self, NPY_ARRAY_OWNDATA) &&
	    (!PyArray_BASE(self) || owner_at_base((PyObject *)self)))
		return 0;
	Py_SET_TYPE(self, &PyArray_Type);
	return 0;
}

/*
 * tensord.Array.__array_finalize__: numpy looks it up on the type and
 * calls the C function of a capsule it finds there; numpy's own Python
 * code (as_strided, broadcast_to with subok=True) and subclasses call
 * it on an array as a method. So a descriptor: on the type, the
 * capsule; on an array, a method that does nothing (what was to be done
 * was done when numpy made the array, before anyone else held it).
 */
static PyObject *finalize_capsule;

static PyObject *finalize_method(PyObject *self, PyObject *obj)
{
	(void)self;
	(void)obj;
	Py_RETURN_NONE;
}

static PyMethodDef finalize_method_def = {
	"__array_finalize__", finalize_method, METH_O,
	"Does nothing: numpy calls the C function of the capsule "
	"tensord.Array.__array_finalize__ when it makes an array."};

static PyObject *finalize_get(PyObject *d, PyObject *inst, PyObject *type)
{
	(void)d;
	(void)type;
	if (!inst || inst == Py_None) {
		Py_INCREF(finalize_capsule);
		return finalize_capsule;
	}
	return PyCFunction_New(&finalize_method_def, inst);
}

static PyTypeObject finalize_descr_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "tensord._ArrayFinalize",
	.tp_basicsize = sizeof(PyObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_descr_get = finalize_get,
};

/* arr (stolen) as the rule wants it: a view of a tensor's pages as a
 * tensord.Array (numpy hands __array_wrap__ plain-ndarray views, from
 * squeeze() for one), memory of its own as a plain ndarray (0-d, when
 * scalar: a numpy scalar, as a plain ndarray's ufunc or reduction
 * gives). */
static PyObject *by_rule(PyObject *arr, bool scalar)
{
	PyObject *v = arr;

	if (owner_at_base(arr)) { /* a view of a tensor's pages */
		if (PyObject_TypeCheck(arr, &tdpy_array_type))
			return arr;
		v = PyArray_View((PyArrayObject *)arr, NULL, &tdpy_array_type);
		Py_DECREF(arr);
		return v;
	}
	if (Py_TYPE(arr) == &tdpy_array_type) {
		v = PyArray_View((PyArrayObject *)arr, NULL, &PyArray_Type);
		Py_DECREF(arr);
	}
	if (v && scalar && PyArray_NDIM((PyArrayObject *)v) == 0)
		return PyArray_Return((PyArrayObject *)v);
	return v;
}

/* Results of ufuncs and reductions, and views numpy makes as plain
 * ndarrays and hands over to be made of this type: by the rule. */
static PyObject *array_wrap(PyObject *self, PyObject *args)
{
	PyObject *arr, *ctx = NULL, *scalar = NULL;

	(void)self;
	if (!PyArg_ParseTuple(args, "O!|OO", &PyArray_Type, &arr, &ctx,
			      &scalar))
		return NULL;
	Py_INCREF(arr);
	return by_rule(arr, true);
}

/* pickle: as the plain ndarray it holds the values of, so what is
 * unpickled owns its memory and is a plain ndarray (there is no lease
 * to pickle) */
static PyObject *array_reduce_as_plain(PyObject *self, PyObject *args,
				       const char *how)
{
	PyObject *v = PyArray_View((PyArrayObject *)self, NULL, &PyArray_Type);
	PyObject *m, *r;

	if (!v)
		return NULL;
	m = PyObject_GetAttrString(v, how);
	r = m ? PyObject_Call(m, args, NULL) : NULL;
	Py_XDECREF(m);
	Py_DECREF(v);
	return r;
}

static PyObject *array_reduce(PyObject *self, PyObject *args)
{
	return array_reduce_as_plain(self, args, "__reduce__");
}

static PyObject *array_reduce_ex(PyObject *self, PyObject *args)
{
	return array_reduce_as_plain(self, args, "__reduce_ex__");
}

/*
 * numpy's *_like functions make an array of the prototype's type over
 * memory of its own (subok=True by default): a tensord.Array with no
 * lease behind it, whose .version and release() could only raise. They
 * give a plain ndarray here, as copies do (subok forced to False, given
 * positionally or not); every other function is ndarray's.
 */
static const struct {
	const char *name;
	Py_ssize_t subok_at; /* subok's position */
} like_table[] = {
	{"empty_like", 3}, {"zeros_like", 3}, {"ones_like", 3},
	{"full_like", 4},
};
#define LIKE_COUNT (sizeof(like_table) / sizeof(like_table[0]))
static PyObject *like_funcs[LIKE_COUNT]; /* numpy's, found at import */
static PyObject *ndarray_array_function; /* ndarray.__array_function__ */

/* args and kw of a *_like call, subok set to False (new references). */
static int like_plain(PyObject **args, PyObject **kw, Py_ssize_t at)
{
	Py_ssize_t n = PyTuple_GET_SIZE(*args);
	PyObject *a, *k;

	if (n > at) {
		a = PyTuple_New(n);
		for (Py_ssize_t i = 0; a && i < n; i++) {
			PyObject *v = i == at ? Py_False
					      : PyTuple_GET_ITEM(*args, i);

			Py_INCREF(v);
			PyTuple_SET_ITEM(a, i, v);
		}
		k = PyDict_Copy(*kw);
	} else {
		a = *args;
		Py_INCREF(a);
		k = PyDict_Copy(*kw);
		if (k && PyDict_SetItemString(k, "subok", Py_False) < 0)
			Py_CLEAR(k);
	}
	if (!a || !k) {
		Py_XDECREF(a);
		Py_XDECREF(k);
		return -1;
	}
	*args = a;
	*kw = k;
	return 0;
}

/*
 * numpy functions that make a plain-ndarray view of their argument on
 * purpose (subok=False, their default: the caller asked for the base
 * class), whose results stay as numpy makes them.
 */
static const char *const base_table[] = {
	"broadcast_to", "lib.stride_tricks.sliding_window_view", "asfarray",
};
#define BASE_COUNT (sizeof(base_table) / sizeof(base_table[0]))
static PyObject *base_funcs[BASE_COUNT];

/*
 * A function's result r (stolen) by the rule: some make a plain-ndarray
 * view of a tensor's pages without being asked for the base class (a
 * transposing np.einsum): a tensord.Array view. Not when r is one of
 * the arguments (out=, or an input given back): the caller's object is
 * given back as it is. Lists and tuples are left as they are.
 */
static PyObject *function_result(PyObject *func, PyObject *r,
				 PyObject *fargs, PyObject *fkw)
{
	PyObject *out;

	if (!r || Py_TYPE(r) != &PyArray_Type || !owner_at_base(r))
		return r;
	for (size_t i = 0; i < BASE_COUNT; i++)
		if (func == base_funcs[i])
			return r;
	for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fargs); i++)
		if (PyTuple_GET_ITEM(fargs, i) == r)
			return r;
	out = PyDict_GetItemString(fkw, "out");
	if (out == r || (out && PyTuple_Check(out) &&
			 PySequence_Contains(out, r) == 1))
		return r;
	return by_rule(r, false);
}

static PyObject *array_function(PyObject *self, PyObject *args)
{
	PyObject *func, *types, *fargs, *fkw, *r;
	Py_ssize_t at = -1;

	if (!PyArg_ParseTuple(args, "OOO!O!:__array_function__", &func,
			      &types, &PyTuple_Type, &fargs, &PyDict_Type,
			      &fkw))
		return NULL;
	for (size_t i = 0; i < LIKE_COUNT; i++)
		if (func == like_funcs[i])
			at = like_table[i].subok_at;
	if (at < 0) {
		r = PyObject_CallFunctionObjArgs(ndarray_array_function, self,
						 func, types, fargs, fkw,
						 NULL);
		return function_result(func, r, fargs, fkw);
	}
	if (like_plain(&fargs, &fkw, at) < 0)
		return NULL;
	r = PyObject_CallFunctionObjArgs(ndarray_array_function, self, func,
					 types, fargs, fkw, NULL);
	Py_DECREF(fargs);
	Py_DECREF(fkw);
	return r;
}

static PyMethodDef array_methods[] = {
	{"__reduce__", array_reduce, METH_VARARGS, NULL},
	{"__reduce_ex__", array_reduce_ex, METH_VARARGS, NULL},
	{"__dlpack__", (PyCFunction)(void (*)(void))tdpy_array_dlpack,
	 METH_VARARGS | METH_KEYWORDS,
	 "DLPack 0.x capsule sharing the pages (copy-on-write for a "
	 "read-only lease)."},
	{"__dlpack_device__", tdpy_array_dlpack_device, METH_NOARGS,
	 "(kDLCPU, 0)"},
	{"release", array_release, METH_NOARGS,
	 "End the lease now (also ends it for every other view)."},
	{"__enter__", tdpy_enter, METH_NOARGS, NULL},
	{"__exit__", tdpy_exit_release, METH_VARARGS, NULL},
	{"__array_wrap__", array_wrap, METH_VARARGS, NULL},
	{"__array_function__", array_function, METH_VARARGS, NULL},
	{NULL},
};

static PyGetSetDef array_getset[] = {
	{"version", array_owner_attr, NULL, "version of the tensor",
	 "version"},
	{"metadata", array_owner_attr, NULL, "user metadata bytes",
	 "metadata"},
	{"dtype_name", array_owner_attr, NULL, "tensord dtype name",
	 "dtype_name"},
	{"name", array_owner_attr, NULL, "tensor or ring name", "name"},
	{"lease", array_lease, NULL, "the tensord.Lease behind this view",
	 NULL},
	{NULL},
};

PyTypeObject tdpy_array_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "tensord.Array",
	.tp_doc = "A numpy array over tensord's pages: .version, .metadata, "
		  ".release(), DLPack export.",
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_methods = array_methods,
	.tp_getset = array_getset,
};

/* numpy's *_like functions, the functions of base_table and
 * ndarray.__array_function__ (kept for the module's life). */
static int like_init(void)
{
	PyObject *np;

	if (ndarray_array_function)
		return 0; /* a second import of the module */
	np = PyImport_ImportModule("numpy");
	if (!np)
		return -1;
	for (size_t i = 0; i < LIKE_COUNT; i++) {
		like_funcs[i] = PyObject_GetAttrString(np, like_table[i].name);
		if (!like_funcs[i]) {
			Py_DECREF(np);
			return -1;
		}
	}
	for (size_t i = 0; i < BASE_COUNT; i++) {
		/* a dotted path below numpy; one numpy lacks matches nothing */
		PyObject *f = np, *g;
		char path[64], *save = NULL;

		Py_INCREF(f);
		snprintf(path, sizeof(path), "%s", base_table[i]);
		for (char *w = strtok_r(path, ".", &save); f && w;
		     w = strtok_r(NULL, ".", &save)) {
			g = PyObject_GetAttrString(f, w);
			Py_DECREF(f);
			f = g;
		}
		if (!f)
			PyErr_Clear();
		base_funcs[i] = f;
	}
	Py_DECREF(np);
	ndarray_array_function = PyObject_GetAttrString(
		(PyObject *)&PyArray_Type, "__array_function__");
	return ndarray_array_function ? 0 : -1;
}

/*
 * __array_finalize__ (the descriptor above, over a capsule of
 * array_finalize), and whether an Array may become a plain ndarray in
 * place: same size, same GC flag, no __dict__ or weakref slot of its
 * own, the same tp_free, both static types.
 */
static int finalize_init(void)
{
	PyTypeObject *t = &tdpy_array_type, *b = &PyArray_Type;
	PyObject *d, *st;
	int rc;

	can_retype = t->tp_basicsize == b->tp_basicsize &&
		     t->tp_itemsize == b->tp_itemsize &&
		     t->tp_dictoffset == b->tp_dictoffset &&
		     t->tp_weaklistoffset == b->tp_weaklistoffset &&
		     t->tp_free == b->tp_free &&
		     !((t->tp_flags ^ b->tp_flags) & Py_TPFLAGS_HAVE_GC) &&
		     !(t->tp_flags & Py_TPFLAGS_HEAPTYPE) &&
		     !(b->tp_flags & Py_TPFLAGS_HEAPTYPE);
	if (!finalize_capsule) {
		finalize_capsule = PyCapsule_New((void *)array_finalize, NULL,
						 NULL);
		if (!finalize_capsule || PyType_Ready(&finalize_descr_type) < 0)
			return -1;
	}
	d = PyObject_New(PyObject, &finalize_descr_type);
	if (!d)
		return -1;
	rc = PyDict_SetItemString(t->tp_dict, "__array_finalize__", d);
	Py_DECREF(d);
	PyType_Modified(t);
	if (rc < 0)
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
	return 0;
}

int tdpy_array_init(PyObject *m)
{
	tdpy_array_type.tp_base = &PyArray_Type;
	tdpy_array_type.tp_basicsize = PyArray_Type.tp_basicsize;
	if (PyType_Ready(&tdpy_owner_type) < 0 ||
	    PyType_Ready(&tdpy_array_type) < 0 || finalize_init() < 0 ||
	    like_init() < 0)
		return -1;
	Py_INCREF(&tdpy_owner_type);
	Py_INCREF(&tdpy_array_type);
	if (PyModule_AddObject(m, "Lease", (PyObject *)&tdpy_owner_type) < 0 ||
	    PyModule_AddObject(m, "Array", (PyObject *)&tdpy_array_type) < 0)
		return -1;
	return 0;
}
