/* SPDX-License-Identifier: MIT */
/*
 * The Client methods that hand tensors over: put (a copy into a new
 * plane), alloc and publish (a plane the daemon made, written in place),
 * get (a lease, read-only, no copy). The arrays and their owners are
 * array.c's; every call that may wait on the daemon releases the GIL.
 */
#include "tdpy.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Fill the shape/strides of p from an owner-like layout. */
struct layout {
	uint64_t shape[TDPY_MAX_DIMS];
	int64_t strides[TDPY_MAX_DIMS];
};

static void layout_fill(struct layout *l, struct td_publish *p, int ndim,
			const npy_intp *shape, const npy_intp *strides)
{
	for (int i = 0; i < ndim; i++) {
		l->shape[i] = (uint64_t)shape[i];
		if (strides)
			l->strides[i] = strides[i];
	}
	p->ndim = (uint32_t)ndim;
	p->shape = l->shape;
	p->strides = strides ? l->strides : NULL;
}

static bool array_like(PyObject *o)
{
	return PyArray_Check(o) || PyObject_CheckBuffer(o) ||
	       PyObject_HasAttrString(o, "__array_interface__") ||
	       PyObject_HasAttrString(o, "__array_struct__") ||
	       PyObject_HasAttrString(o, "__array__");
}

/* What put() copies from: obj as numpy takes it, but bytes as the buffer
 * it is (u8, as a bytearray), where numpy makes one string scalar of
 * them (dtype S<n>), which has no blob dtype. */
static PyObject *array_from(PyObject *obj)
{
	PyObject *mv, *a;

	if (!PyBytes_Check(obj))
		return PyArray_FromAny(obj, NULL, 0, 0, 0, NULL);
	mv = PyMemoryView_FromObject(obj);
	a = mv ? PyArray_FromAny(mv, NULL, 0, 0, 0, NULL) : NULL;
	Py_XDECREF(mv);
	return a;
}

/*
 * put()'s own refusals of its array and metadata (a dtype with no blob
 * code, too many dimensions, torch's refusal to give numpy a tensor that
 * requires grad, ...) say which tensor: a loop publishing a model's
 * state_dict learns which entry it was. The exception keeps its type,
 * the original as its __cause__.
 */
static void put_names(const char *name)
{
	PyObject *type, *value, *tb, *msg, *exc = NULL;

	PyErr_Fetch(&type, &value, &tb);
	PyErr_NormalizeException(&type, &value, &tb);
	if (!value)
		goto keep;
	if (tb)
		PyException_SetTraceback(value, tb);
	msg = PyUnicode_FromFormat("put(\"%s\"): %S", name, value);
	exc = msg ? PyObject_CallOneArg(type, msg) : NULL;
	Py_XDECREF(msg);
	if (!exc || !PyExceptionInstance_Check(exc)) {
		/* a type that takes no one message: the original as it was */
		PyErr_Clear();
		Py_XDECREF(exc);
		goto keep;
	}
	PyException_SetCause(exc, value); /* steals value */
	Py_XDECREF(tb);
	PyErr_SetObject(type, exc);
	Py_DECREF(type);
	Py_DECREF(exc);
	return;
keep:
	PyErr_Restore(type, value, tb);
}

/*
 * if_version=None|int of put() and publish(): the publish's condition
 * (TD_PUBLISH_IF: only while the name's current version is it, 0 while
 * it has none). 0, or -1 with the exception set.
 */
static int if_version_set(PyObject *obj, struct td_publish *p)
{
	unsigned long long v;
	PyObject *n;

	if (!obj || obj == Py_None)
		return 0;
	/* an integer as every version argument takes it (a version kept
	 * in a numpy array is an np.uint64, which is no int) */
	n = tdpy_index(obj);
	if (!n) {
		if (!PyErr_Occurred())
			PyErr_Format(PyExc_TypeError, "if_version must be None "
				     "or an int, not %.100s",
				     Py_TYPE(obj)->tp_name);
		return -1;
	}
	v = PyLong_AsUnsignedLongLong(n);
	Py_DECREF(n);
	if (v == (unsigned long long)-1 && PyErr_Occurred()) {
		PyErr_Clear();
		PyErr_SetString(PyExc_ValueError,
				"if_version must be a version: 0 to 2**64-1");
		return -1;
	}
	p->flags |= TD_PUBLISH_IF;
	p->if_version = v;
	return 0;
}

/*
 * put(name, array, metadata=None, pin=False, stream=False,
 * if_version=None): copy into a
 * loan, publish. stream: the loan is the name's stream loan
 * (TD_ALLOC_STREAM, named), whose buffers libtensord keeps mapped: a loop
 * of puts copies into warm pages and its followers map nothing new. The
 * version is then recyclable (not write-sealed); only this call writes
 * the loan, before its publish.
 */
PyObject *tdpy_client_put(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"name", "array", "metadata", "pin", "stream",
				 "if_version", NULL};
	const char *name;
	PyObject *obj, *meta = NULL, *src = NULL, *dst, *ifv = NULL;
	PyArray_Descr *d;
	struct td_publish p = {0};
	struct td_error e = {0};
	struct td_alloc *a = NULL;
	struct td_client *c;
	struct layout l;
	Py_buffer mb;
	uint64_t size, version = 0;
	int pin = 0, stream = 0, code, rc;
	char what[TD_NAME_MAX + 32];

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&O|Opp$O", kwlist,
					 tdpy_conv_name, &name, &obj, &meta,
					 &pin, &stream, &ifv) ||
	    if_version_set(ifv, &p) < 0)
		return NULL;
	if (!array_like(obj))
		return PyErr_Format(PyExc_TypeError, "put(\"%s\") needs an "
				    "array (numpy, buffer protocol or "
				    "__array_interface__), not %.100s", name,
				    Py_TYPE(obj)->tp_name);
	src = array_from(obj);
	if (!src)
		goto refused;
	if (PyArray_NDIM((PyArrayObject *)src) > TDPY_MAX_DIMS) {
		PyErr_Format(PyExc_ValueError, "at most %d dimensions, not %d",
			     TDPY_MAX_DIMS, PyArray_NDIM((PyArrayObject *)src));
		goto refused;
	}
	code = tdpy_dtype_of(PyArray_DESCR((PyArrayObject *)src));
	if (code < 0)
		goto refused;
	size = (uint64_t)PyArray_NBYTES((PyArrayObject *)src);
	if (tdpy_meta_get(meta, &mb) < 0)
		goto refused;
	c = tdpy_client_enter(self);
	if (!c) {
		PyBuffer_Release(&mb);
		goto fail;
	}
	TDPY_CALL(self, rc, td_client_alloc_named(c, stream ? name : NULL, 1,
						  &size,
						  stream ? TD_ALLOC_STREAM : 0,
						  &a, &e));
	if (rc < 0) {
		PyBuffer_Release(&mb);
		snprintf(what, sizeof(what), "put(\"%s\"): alloc", name);
		tdpy_raise(rc, &e, what);
		goto fail;
	}
	/* one copy, C order, native byte order, into the loan's pages */
	d = tdpy_descr_of((uint32_t)code);
	dst = d ? PyArray_NewFromDescr(&PyArray_Type, d,
				       PyArray_NDIM((PyArrayObject *)src),
				       PyArray_DIMS((PyArrayObject *)src),
				       NULL,
				       size ? td_alloc_data(a, 0) : &p,
				       NPY_ARRAY_CARRAY, NULL)
		: NULL;
	if (!dst || PyArray_CopyInto((PyArrayObject *)dst,
				     (PyArrayObject *)src) < 0) {
		Py_XDECREF(dst);
		tdpy_alloc_free(a);
		PyBuffer_Release(&mb);
		goto fail;
	}
	Py_DECREF(dst);
	p.name = name;
	p.dtype = (uint32_t)code;
	p.flags |= pin ? TD_PUBLISH_PIN : 0;
	p.meta = mb.buf;
	p.meta_len = (size_t)mb.len;
	layout_fill(&l, &p, PyArray_NDIM((PyArrayObject *)src),
		    PyArray_DIMS((PyArrayObject *)src), NULL);
	c = tdpy_client_enter(self);
	if (!c) {
		tdpy_alloc_free(a);
		PyBuffer_Release(&mb);
		goto fail;
	}
	TDPY_CALL(self, rc, td_client_publish_alloc(c, a, &p, &version, &e));
	PyBuffer_Release(&mb);
	Py_DECREF(src);
	if (rc < 0) {
		snprintf(what, sizeof(what), "put(\"%s\")", name);
		return tdpy_raise(rc, &e, what);
	}
	return PyLong_FromUnsignedLongLong(version);
refused:
	put_names(name);
fail:
	Py_XDECREF(src);
	return NULL;
}

/*
 * The format known and the shape its grid (blob spec 11.4: rgb8 [H, W,
 * 3], mono8 [H, W]), checked here as the daemon checks them at publish:
 * a refusal there came after the user filled the loan, which it took
 * with it (a typo such as format="RGB8" cost a whole frame, refused as
 * ENOSYS). The planes of a format with several are checked again, one
 * by one, by tdpy_alloc_planes().
 */
static int format_fits(const OwnerObject *o, const char *f)
{
	uint64_t shape[TDPY_MAX_DIMS];
	struct td_plane_layout l;
	int rc;

	for (int k = 0; k < o->ndim; k++)
		shape[k] = (uint64_t)o->shape[k];
	rc = td_format_plane_layout(f, o->dtype, (uint32_t)o->ndim, shape, 0,
				    o->row_pitch, &l);
	/* "" and names of 64 bytes or more are EINVAL there: no format
	 * either, not a grid that does not fit one */
	if (!*f || strnlen(f, 64) == 64)
		rc = -ENOTSUP;
	if (rc == -ENOTSUP)
		PyErr_Format(PyExc_ValueError, "unknown image format \"%.64s\": "
			     "tensord knows rgb8, rgba8, bgra8, mono8, YUYV, "
			     "VYUY, NV12, NV16, NV24, rgb8_planar and "
			     "rgba8_planar (blob spec 11.4; case matters)", f);
	else if (rc < 0)
		PyErr_Format(PyExc_ValueError, "shape, dtype and row pitch do "
			     "not fit format %.64s (%s): its grid is [H, W, 3] "
			     "(rgb8), [H, W, 4] (rgba8, bgra8), [H, W, 2] "
			     "(YUYV, VYUY), [H, W] (mono8, NV12, NV16, NV24) "
			     "or [3 or 4, H, W] (rgb8_planar, rgba8_planar), "
			     "the row pitch at least a row", f, strerror(-rc));
	return rc < 0 ? -1 : 0;
}

/*
 * An image format (format="rgb8") publishes a row pitch as the plane's
 * stride, the way cameras describe it, instead of blob strides: then the
 * strides must be dense C order but for the row dimension's (dimension
 * 1 of a planar [C, H, W] grid, whose planes are H rows apart, else 0).
 */
/*
 * Why tdpy_dense() refused o's shape: its bytes, or (a zero dimension
 * makes 0 bytes) a C-order stride past 2**63 - 1, which no numpy array
 * holds (numpy refuses np.empty((0, 2**62), np.float32) alike) and no
 * blob stride (an i64) carries.
 */
static void dense_refused(const OwnerObject *o, npy_intp isz)
{
	uint64_t n = (uint64_t)isz;
	bool empty = false;

	for (int i = 0; i < o->ndim; i++)
		empty |= o->shape[i] == 0;
	for (int i = o->ndim - 1; empty && i > 0; i--) {
		if (!o->shape[i])
			continue; /* numpy skips it: no overflow of its own */
		if (__builtin_mul_overflow(n, (uint64_t)o->shape[i], &n) ||
		    n > (uint64_t)NPY_MAX_INTP) {
			PyErr_Format(PyExc_ValueError, "shape: the C-order "
				     "stride of dimension %d (%s, %zd-byte "
				     "elements) is over 2**63 - 1 bytes, the "
				     "limit of numpy's and the blob's strides "
				     "(though the tensor has no element)",
				     i - 1, td_tensor_dtype_name(o->dtype),
				     (Py_ssize_t)isz);
			return;
		}
	}
	PyErr_SetString(PyExc_ValueError, "tensor too big: its bytes are "
			"over 2**63 - 1");
}

static int loan_format(OwnerObject *o, PyObject *format, npy_intp isz)
{
	npy_intp want[TDPY_MAX_DIMS];
	const char *f;
	Py_ssize_t len;
	int row;

	if (!PyUnicode_Check(format)) {
		PyErr_SetString(PyExc_TypeError, "format must be a str");
		return -1;
	}
	f = PyUnicode_AsUTF8AndSize(format, &len);
	if (!f)
		return -1;
	/* as C reads it, "rgb8\0x" would be rgb8: a layout asked for by
	 * what was not said */
	if ((size_t)len != strlen(f)) {
		PyErr_SetString(PyExc_ValueError, "format must not hold NUL");
		return -1;
	}
	if (o->ndim < 2) {
		PyErr_SetString(PyExc_ValueError,
				"an image format needs 2 or more dimensions");
		return -1;
	}
	row = td_format_plane_count(f) > 1 && o->ndim == 3 ? 1 : 0;
	if (o->explicit_strides) {
		want[o->ndim - 1] = isz;
		for (int k = o->ndim - 2; k >= 0; k--)
			want[k] = k == row ? o->strides[row]
					   : want[k + 1] * o->shape[k + 1];
		if (memcmp(want, o->strides, sizeof(npy_intp) * o->ndim)) {
			PyErr_SetString(PyExc_ValueError, "with a format only "
					"the row pitch (the first stride; the "
					"second of a planar grid) may be "
					"padded");
			return -1;
		}
		o->row_pitch = (uint64_t)o->strides[row];
		o->explicit_strides = false;
	}
	if (format_fits(o, f) < 0)
		return -1;
	Py_INCREF(format);
	o->format = format;
	return 0;
}

/*
 * alloc(name, shape, dtype, strides=None, format=None, recycle=False,
 * stream=False, private=True): a writable Array over a loan (recycle:
 * TD_ALLOC_RECYCLE, a buffer of an earlier version of this client's when
 * one is free; stream: TD_ALLOC_STREAM, which also has the next loan
 * lent by the publish, so a warm stream's alloc sends nothing; private
 * False, with either: publish() leaves the pages shared and makes the
 * array read-only instead, and the loan's mapping is cached, maps.c).
 */
PyObject *tdpy_client_alloc(ClientObject *self, PyObject *args,
			    PyObject *kw)
{
	static char *kwlist[] = {"name", "shape", "dtype", "strides", "format",
				 "recycle", "stream", "private", NULL};
	PyObject *shape_o, *strides_o = Py_None, *format = Py_None;
	OwnerObject *o;
	const char *n;
	uint32_t dtype;
	uint64_t size;
	npy_intp isz;
	int nst, recycle = 0, stream = 0, priv = 1;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&OO&|OOppp", kwlist,
					 tdpy_conv_name, &n, &shape_o,
					 tdpy_conv_dtype, &dtype, &strides_o,
					 &format, &recycle, &stream, &priv))
		return NULL;
	if (!priv && !recycle && !stream) {
		/* a plain loan is write-sealed at publish: no writable
		 * shared mapping may stay */
		PyErr_SetString(PyExc_ValueError, "alloc(private=False) "
				"takes recycle=True or stream=True");
		return NULL;
	}
	o = tdpy_owner_new(OWNER_LOAN, (PyObject *)self);
	if (!o)
		return NULL;
	o->alloc_flags = stream ? TD_ALLOC_STREAM :
			 recycle ? TD_ALLOC_RECYCLE : 0;
	o->keep_shared = !priv;
	o->dtype = dtype;
	o->writable = true;
	o->name = PyUnicode_FromString(n);
	isz = td_tensor_dtype_size(dtype);
	if (!o->name || tdpy_shape_parse(shape_o, o->shape, &o->ndim) < 0)
		goto fail;
	if (strides_o == Py_None) {
		if (tdpy_dense(o->ndim, o->shape, isz, o->strides, &size) < 0) {
			dense_refused(o, isz);
			goto fail;
		}
	} else {
		if (tdpy_strides_parse(strides_o, o->strides, &nst) < 0)
			goto fail;
		if (nst != o->ndim) {
			PyErr_SetString(PyExc_ValueError,
					"strides and shape differ in length");
			goto fail;
		}
		if (tdpy_span(o->ndim, o->shape, o->strides, isz, &size) < 0)
			goto fail;
		o->explicit_strides = true;
	}
	if (format != Py_None && loan_format(o, format, isz) < 0)
		goto fail;
	if (o->format && td_format_plane_count(PyUnicode_AsUTF8(o->format)) > 1)
		return tdpy_alloc_planes(self, o);
	if (tdpy_loan_open(self, o, size) < 0)
		goto fail;
	return tdpy_owner_array(o);
fail:
	Py_DECREF(o);
	return NULL;
}

/* a and the arrays it views, up to the loan's owner, read-only */
static void read_only_chain(PyObject *a)
{
	for (; a && PyArray_Check(a); a = PyArray_BASE((PyArrayObject *)a))
		PyArray_CLEARFLAGS((PyArrayObject *)a, NPY_ARRAY_WRITEABLE);
}

/* The array publish() was given, or each array of the Planes, read-only
 * from now on (alloc(private=False): its pages stay shared), and the
 * arrays it views: publish(w[:]) turns w read-only too; so are the
 * other planes' arrays when publish() was given one of them. The owner
 * o is, so that none of them can be made writable again. */
static void read_only(OwnerObject *o, PyObject *given)
{
	PyObject *seq;

	o->writable = false;
	for (uint32_t i = 0; i < TDPY_MAX_PLANES; i++)
		if (o->plane_refs[i])
			read_only_chain(PyWeakref_GetObject(o->plane_refs[i]));
	if (PyArray_Check(given)) {
		read_only_chain(given);
		return;
	}
	seq = PySequence_Fast(given, "");
	if (!seq) {
		PyErr_Clear();
		return;
	}
	for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
		PyObject *a = PySequence_Fast_GET_ITEM(seq, i);

		read_only_chain(a);
	}
	Py_DECREF(seq);
}

/* The root loan of publish()'s argument (an alloc() array, a Planes or
 * one of its arrays), not yet published: NULL with a ValueError. */
static OwnerObject *loan_of(ClientObject *self, PyObject *arr,
			    const char *what)
{
	OwnerObject *o;

	if (PyObject_TypeCheck(arr, &tdpy_planes_type))
		arr = PyObject_GetAttrString(arr, "lease");
	else
		Py_INCREF(arr);
	o = arr ? tdpy_owner_of(arr) : NULL;
	Py_XDECREF(arr); /* a Planes or an array keeps its root alive */
	if (!o)
		return NULL;
	o = tdpy_owner_root(o);
	if (o->kind != OWNER_LOAN || o->parent != (PyObject *)self) {
		PyErr_Format(PyExc_ValueError, "%s takes an array from this "
			     "client's alloc()", what);
		return NULL;
	}
	if (!o->a) {
		PyErr_Format(PyExc_ValueError, "%s: this loan was already "
			     "published or released", what);
		return NULL;
	}
	return o;
}

/* The td_publish of loan o (its name, layout, planes), with metadata
 * mb and the pin flag; f lives as long as the publish call. */
struct pub_fill {
	struct td_publish p;
	struct layout l;
	struct td_plane planes[TDPY_MAX_PLANES];
};

static void pub_fill(struct pub_fill *f, OwnerObject *o, const Py_buffer *mb,
		     int pin)
{
	memset(f, 0, sizeof(*f));
	f->p.name = PyUnicode_AsUTF8(o->name);
	f->p.dtype = o->dtype;
	f->p.flags = pin ? TD_PUBLISH_PIN : 0;
	f->p.meta = mb->buf;
	f->p.meta_len = (size_t)mb->len;
	layout_fill(&f->l, &f->p, o->ndim, o->shape,
		    o->explicit_strides ? o->strides : NULL);
	if (o->format)
		f->p.format = PyUnicode_AsUTF8(o->format);
	for (uint32_t i = 0; i < o->plane_count; i++)
		f->planes[i] = (struct td_plane){.offset = o->plane_off[i],
						 .stride = o->row_pitch,
						 .size = o->plane_size[i]};
	if (!o->plane_count && o->row_pitch) {
		f->planes[0].stride = o->row_pitch;
		f->planes[0].size = o->size;
	}
	if (o->plane_count || o->row_pitch) {
		f->p.plane_count = o->plane_count ? o->plane_count : 1;
		f->p.planes = f->planes;
	}
}

/* After the publish of o (rc its result, given publish()'s argument):
 * published or refused, the loan is gone, and a refused one's buffer
 * may be lent again, which the array must not write either. */
static void pub_done(OwnerObject *o, PyObject *given, int rc,
		     const Py_buffer *mb, uint64_t version)
{
	if (rc >= 0 && mb->len)
		o->metadata = PyBytes_FromStringAndSize(mb->buf, mb->len);
	if (o->keep_shared)
		read_only(o, given);
	if (rc >= 0)
		o->version = version;
}

/*
 * publish(array, metadata=None, pin=False, wait=True, if_version=None):
 * publish an alloc()'s loan. wait=False does not wait for the daemon's answer
 * (td_client_publish_alloc_nowait): returns None, and a failure raises
 * from this client's next alloc(), put() or publish(). A producer that
 * goes on to wait for its consumer is not woken by the reply meanwhile.
 */
PyObject *tdpy_client_publish(ClientObject *self, PyObject *args,
			      PyObject *kw)
{
	static char *kwlist[] = {"array", "metadata", "pin", "wait",
				 "if_version", NULL};
	PyObject *given, *meta = NULL, *ifv = NULL;
	struct td_publish cond = {0};
	struct pub_fill f;
	struct td_error e = {0};
	struct td_client *c;
	struct td_alloc *a;
	OwnerObject *o;
	Py_buffer mb;
	uint64_t version = 0;
	int pin = 0, wait = 1, rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|Opp$O", kwlist, &given,
					 &meta, &pin, &wait, &ifv) ||
	    if_version_set(ifv, &cond) < 0)
		return NULL;
	o = loan_of(self, given, "publish()");
	if (!o || tdpy_meta_get(meta, &mb) < 0)
		return NULL;
	c = tdpy_client_enter(self);
	if (!c) {
		PyBuffer_Release(&mb);
		return NULL;
	}
	/* The daemon write-seals a plain loan's buffer, which needs every
	 * writable shared mapping gone, and writes after publish must
	 * reach no reader. Views of ours must not fault afterwards: their
	 * range becomes a private (copy-on-write) mapping of the same
	 * pages, where a later write lands in a private page. */
	if (tdpy_loan_leave(o) < 0) {
		tdpy_client_leave(self);
		PyBuffer_Release(&mb);
		return NULL;
	}
	pub_fill(&f, o, &mb, pin);
	f.p.flags |= cond.flags;
	f.p.if_version = cond.if_version;
	a = o->a;
	o->a = NULL; /* consumed on success and on failure */
	if (wait)
		TDPY_CALL(self, rc,
			  td_client_publish_alloc(c, a, &f.p, &version, &e));
	else
		TDPY_CALL(self, rc,
			  td_client_publish_alloc_nowait(c, a, &f.p, &e));
	pub_done(o, given, rc, &mb, version);
	PyBuffer_Release(&mb);
	if (rc < 0)
		return tdpy_raise(rc, &e, "publish");
	if (!wait)
		Py_RETURN_NONE; /* its version is not known here */
	return PyLong_FromUnsignedLongLong(version);
}

/* publish_many's request: per element its argument, loan, metadata and
 * td_publish. */
struct many_pub {
	PyObject *given[TD_MANY_MAX];
	OwnerObject *o[TD_MANY_MAX];
	struct td_alloc *a[TD_MANY_MAX];
	Py_buffer mb[TD_MANY_MAX];
	struct pub_fill f[TD_MANY_MAX];
	struct td_publish p[TD_MANY_MAX];
	uint64_t versions[TD_MANY_MAX];
	Py_ssize_t n;
};

/* Each element's loan and metadata into q (borrowed from seq and
 * metas): -1 with the exception set, nothing consumed. */
static int many_parse(ClientObject *self, struct many_pub *q, PyObject *seq,
		      PyObject *metas)
{
	char what[64];

	if (metas && PySequence_Fast_GET_SIZE(metas) != q->n) {
		PyErr_Format(PyExc_ValueError, "publish_many() takes one "
			     "metadata per array: %zd arrays, %zd metadata",
			     q->n, PySequence_Fast_GET_SIZE(metas));
		return -1;
	}
	for (Py_ssize_t i = 0; i < q->n; i++) {
		q->given[i] = PySequence_Fast_GET_ITEM(seq, i);
		snprintf(what, sizeof(what), "publish_many() element %zd", i);
		q->o[i] = loan_of(self, q->given[i], what);
		if (!q->o[i] ||
		    tdpy_meta_get(metas ? PySequence_Fast_GET_ITEM(metas, i)
					: NULL,
				  &q->mb[i]) < 0)
			return -1;
	}
	return 0;
}

/* The versions of a publish_many, as a tuple. */
static PyObject *many_versions(const struct many_pub *q)
{
	PyObject *out = PyTuple_New(q->n);

	for (Py_ssize_t i = 0; out && i < q->n; i++) {
		PyObject *v = PyLong_FromUnsignedLongLong(q->versions[i]);

		if (!v)
			Py_CLEAR(out);
		else
			PyTuple_SET_ITEM(out, i, v);
	}
	return out;
}

/* publish_many's call of td_client_publish_many on q's loans, which it
 * consumes: its result, the versions and each owner done. */
static int many_call(ClientObject *self, struct many_pub *q, int pin,
		     struct td_error *e)
{
	struct td_client *c = tdpy_client_enter(self);
	int rc;

	if (!c)
		return 1; /* the exception set, nothing consumed */
	for (Py_ssize_t i = 0; i < q->n; i++)
		if (tdpy_loan_leave(q->o[i]) < 0) {
			tdpy_client_leave(self);
			return 1;
		}
	for (Py_ssize_t i = 0; i < q->n; i++) {
		pub_fill(&q->f[i], q->o[i], &q->mb[i], pin);
		q->p[i] = q->f[i].p; /* its pointers into f, which stays */
		q->a[i] = q->o[i]->a;
		q->o[i]->a = NULL; /* consumed on success and on failure */
	}
	TDPY_CALL(self, rc,
		  td_client_publish_many(c, (uint32_t)q->n, q->a, q->p,
					 q->versions, e));
	for (Py_ssize_t i = 0; i < q->n; i++)
		pub_done(q->o[i], q->given[i], rc, &q->mb[i], q->versions[i]);
	return rc;
}

/*
 * publish_many(arrays, metadata=None, pin=False) -> tuple of versions:
 * the alloc()s' loans published as one step (td_client_publish_many): no
 * reader sees some of them and not the others. metadata: None or one
 * per array. All or none; every loan is consumed either way, as C's.
 */
PyObject *tdpy_client_publish_many(ClientObject *self, PyObject *args,
				   PyObject *kw)
{
	static char *kwlist[] = {"arrays", "metadata", "pin", NULL};
	PyObject *arrs, *meta = Py_None, *seq, *metas = NULL, *out = NULL;
	struct td_error e = {0};
	struct many_pub *q;
	int pin = 0, rc = 1;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|Op", kwlist, &arrs,
					 &meta, &pin))
		return NULL;
	/* one array or Planes is a sequence too: of its rows or planes,
	 * all the same loan, which the daemon would refuse as a loan given
	 * twice after consuming it (an array of objects may hold arrays) */
	if ((PyArray_Check(arrs) &&
	     PyArray_DESCR((PyArrayObject *)arrs)->type_num != NPY_OBJECT) ||
	    PyObject_TypeCheck(arrs, &tdpy_planes_type)) {
		PyErr_Format(PyExc_TypeError, "publish_many() takes a sequence "
			     "of alloc() arrays, not one %.100s: "
			     "publish_many([a])", Py_TYPE(arrs)->tp_name);
		return NULL;
	}
	/* nor is one metadata (a str, bytes) one per array */
	if (PyUnicode_Check(meta) || PyBytes_Check(meta) ||
	    PyByteArray_Check(meta) || PyMemoryView_Check(meta)) {
		PyErr_Format(PyExc_TypeError, "publish_many()'s metadata is "
			     "None or a sequence, one per array, not one "
			     "%.100s: metadata=[m]", Py_TYPE(meta)->tp_name);
		return NULL;
	}
	seq = PySequence_Fast(arrs, "publish_many() takes a sequence of "
				    "alloc() arrays");
	if (!seq)
		return NULL;
	if (meta != Py_None)
		metas = PySequence_Fast(meta, "publish_many()'s metadata is "
					      "None or a sequence, one per "
					      "array");
	q = PyMem_Calloc(1, sizeof(*q));
	if (!q)
		PyErr_NoMemory();
	else
		q->n = PySequence_Fast_GET_SIZE(seq);
	if (q && (q->n < 1 || q->n > TD_MANY_MAX))
		PyErr_Format(PyExc_ValueError, "publish_many() takes 1 to %d "
			     "arrays, not %zd", TD_MANY_MAX, q->n);
	else if (q && (meta == Py_None || metas) &&
		 many_parse(self, q, seq, metas) == 0)
		rc = many_call(self, q, pin, &e);
	if (rc < 0)
		tdpy_raise(rc, &e, "publish_many");
	else if (rc == 0)
		out = many_versions(q);
	for (Py_ssize_t i = 0; q && i < q->n; i++)
		PyBuffer_Release(&q->mb[i]);
	PyMem_Free(q);
	Py_XDECREF(metas);
	Py_DECREF(seq);
	return out;
}

static int raise_int(int rc, const char *what)
{
	tdpy_raise(rc, NULL, what);
	return -1;
}

/*
 * The blob allows a negative stride (a flipped axis) but says nowhere
 * where its first element lies, so no array can be placed over it (the
 * daemon's Zarr store refuses it too): a tensord.Error naming the
 * tensor, not the ValueError a wrong argument gets.
 */
static int negative_stride(OwnerObject *o, const int64_t *st)
{
	struct td_error e = {0};

	for (int k = 0; k < o->ndim; k++) {
		if (st[k] >= 0)
			continue;
		snprintf(e.reason, sizeof(e.reason), "\"%s\" version %llu has "
			 "a negative stride (%lld bytes, dimension %d), which "
			 "the binding cannot lay out",
			 o->name ? PyUnicode_AsUTF8(o->name) : "?",
			 (unsigned long long)o->version, (long long)st[k], k);
		tdpy_raise(-EOPNOTSUPP, &e, "get");
		return -1;
	}
	return 0;
}

/*
 * Shape and strides of plane i of t into o. A plane of a multi-plane
 * image has the rows the blob spec gives it (td_format_plane_layout:
 * NV12's Y and interleaved UV, one channel per plane of a planar
 * format). A single-plane image is packed rows at the plane's stride,
 * its blob strides unused (the blob spec's plane_need); otherwise the
 * blob's strides, or dense C order when it has none.
 */
static int lease_layout(OwnerObject *o, struct td_tensor *t, uint32_t i)
{
	const char *fmt = td_tensor_string(t, TD_TENSOR_FORMAT);
	npy_intp isz = td_tensor_dtype_size(o->dtype);
	const uint64_t *shape = td_tensor_shape(t);
	uint32_t ndim = td_tensor_ndim(t), nst = 0;
	struct td_plane_layout l;
	const int64_t *st;
	uint64_t span;
	int rc;

	if (ndim > TDPY_MAX_DIMS)
		return raise_int(-EPROTO, "get: too many dimensions");
	for (uint32_t k = 0; k < ndim; k++)
		if (shape[k] > (uint64_t)NPY_MAX_INTP)
			return raise_int(-EOVERFLOW, "get: dimension");
	o->size = td_tensor_plane_size(t, i);
	if (fmt[0] && td_tensor_plane_count(t) > 1) {
		rc = td_format_plane_layout(fmt, o->dtype, ndim, shape, i,
					    td_tensor_plane_stride(t, i), &l);
		if (rc < 0 || l.need > o->size)
			return raise_int(rc < 0 ? rc : -EPROTO, "get: plane layout");
		o->ndim = (int)l.ndim;
		for (int k = 0; k < o->ndim; k++) {
			o->shape[k] = (npy_intp)l.shape[k];
			o->strides[k] = (npy_intp)l.strides[k];
		}
		return 0;
	}
	o->ndim = (int)ndim;
	for (int k = 0; k < o->ndim; k++)
		o->shape[k] = (npy_intp)shape[k];
	st = td_tensor_strides(t, &nst);
	if (tdpy_dense(o->ndim, o->shape, isz, o->strides, &span) < 0)
		return raise_int(-EOVERFLOW, "get: tensor size");
	if (fmt[0]) {
		if (td_tensor_plane_stride(t, i) && o->ndim >= 1)
			o->strides[0] = (npy_intp)td_tensor_plane_stride(t, i);
	} else if (st) {
		for (int k = 0; k < o->ndim; k++)
			o->strides[k] = (npy_intp)st[k];
		if (span && negative_stride(o, st) < 0)
			return -1;
	}
	if (tdpy_span(o->ndim, o->shape, o->strides, isz, &span) < 0)
		return -1;
	if (span > o->size)
		return raise_int(-EPROTO, "get: layout larger than its plane");
	return 0;
}

/* Point o at plane i of t: the binding's own mapping of its pages (no
 * copy; maps.c), or a private copy of an inline plane libtensord
 * already copied. */
static int lease_map(OwnerObject *o, struct td_tensor *t, uint32_t i)
{
	const void *data = td_tensor_plane_data(t, i);
	struct td_error e = {0};
	int rc;

	/* a tiled or compressed plane is no array (blob spec §6.1) */
	if (td_tensor_plane_modifier(t, i)) {
		snprintf(e.reason, sizeof(e.reason),
			 "plane %u carries DRM format modifier 0x%llx (a "
			 "tiled or compressed layout), not readable as an "
			 "array",
			 i, (unsigned long long)td_tensor_plane_modifier(t, i));
		tdpy_raise(-ENOTSUP, &e, "get");
		return -1;
	}
	if (o->size && td_tensor_plane_fd(t, i) < 0) {
		o->heap = PyMem_Malloc(o->size);
		if (!o->heap) {
			PyErr_NoMemory();
			return -1;
		}
		memcpy(o->heap, data, o->size);
		o->data = o->heap;
	} else if (o->size) {
		o->file_off = td_tensor_plane_offset(t, i);
		rc = tdpy_map_get((ClientObject *)tdpy_owner_root(o)->parent,
				  td_tensor_plane_fd(t, i), o->file_off,
				  o->size, &o->cache, &o->data);
		if (rc < 0)
			return raise_int(rc, "get: map");
	}
	return 0;
}

/* A tensord.Planes: one read-only Array per plane, sharing o's lease. */
static PyObject *lease_planes(OwnerObject *o, struct td_tensor *t)
{
	uint32_t n = td_tensor_plane_count(t);
	PyObject *arrays, *r;

	if (n > TDPY_MAX_PLANES) {
		Py_DECREF(o);
		return tdpy_raise(-EPROTO, NULL, "get: too many planes");
	}
	o->plane_count = n;
	arrays = PyTuple_New(n);
	for (uint32_t i = 0; arrays && i < n; i++) {
		OwnerObject *p = tdpy_plane_owner(o, i);
		PyObject *a = NULL;

		if (p && lease_layout(p, t, i) == 0 && lease_map(p, t, i) == 0)
			a = tdpy_owner_array(p);
		else
			Py_XDECREF(p);
		if (!a)
			Py_CLEAR(arrays);
		else
			PyTuple_SET_ITEM(arrays, i, a);
	}
	r = arrays ? tdpy_planes_new(o, arrays,
				     td_tensor_string(t, TD_TENSOR_FORMAT))
		   : NULL;
	Py_DECREF(o);
	return r;
}

/* A read-only Array over a tensor got from the daemon or a follow (t is
 * consumed) named name (a str, borrowed: a Follow's own, not one made
 * per tensor); a tensord.Planes for a tensor of several planes. */
PyObject *tdpy_lease_array(ClientObject *self, struct td_tensor *t,
			   PyObject *name, PyObject *follow)
{
	OwnerObject *o = tdpy_owner_new(OWNER_LEASE, (PyObject *)self);
	const void *meta;
	size_t mlen;

	if (!o) {
		tdpy_tensor_release(t);
		return NULL;
	}
	o->t = t;
	if (follow) {
		/* the Follow's hold is this owner's until it is released */
		Py_INCREF(follow);
		o->follow = follow;
		tdpy_owner_hooks.follow_hold(follow, o);
	}
	o->version = td_tensor_version(t);
	o->dtype = td_tensor_dtype(t);
	Py_INCREF(name);
	o->name = name;
	meta = td_tensor_meta(t, &mlen);
	o->metadata = PyBytes_FromStringAndSize(meta, (Py_ssize_t)mlen);
	if (!o->metadata)
		goto fail;
	if (!td_tensor_dtype_size(o->dtype)) {
		tdpy_raise(-EPROTO, NULL, "get: unknown dtype");
		goto fail;
	}
	if (td_tensor_plane_count(t) > 1)
		return lease_planes(o, t);
	if (lease_layout(o, t, 0) < 0 || lease_map(o, t, 0) < 0)
		goto fail;
	return tdpy_owner_array(o);
fail:
	Py_DECREF(o);
	return NULL;
}

/* One slice of a get() that waits (tdpy_wait_sliced). */
struct get_arg {
	struct td_client *c;
	const char *name;
	uint64_t after;
	bool appearing; /* get(name, timeout=s): the latest, or the first */
	struct td_tensor **t;
	struct td_error *e;
};

static int get_slice(void *arg, int slice_ms)
{
	struct get_arg *g = arg;
	int rc = -ENOENT;

	if (g->appearing)
		rc = td_client_get(g->c, g->name, g->t, g->e);
	if (rc == -ENOENT && (!g->appearing || slice_ms != 0))
		rc = td_client_get_newer(g->c, g->name, g->after, slice_ms,
					 g->t, g->e);
	return rc;
}

/* Whether name is a ring's (a get() of one waits for its first slot). */
static bool is_ring(struct td_client *c, const char *name)
{
	struct td_entry en = {0};
	struct td_error e = {0};
	int rc;

	Py_BEGIN_ALLOW_THREADS
	rc = td_client_stat(c, name, &en, &e);
	Py_END_ALLOW_THREADS
	rc = rc == 0 && (en.flags & TD_ENTRY_RING);
	td_entry_fini(&en);
	return rc;
}

/*
 * get(name, newer_than=v) or get(name, timeout=s) waiting up to ms (-1:
 * no limit), a slice at a time so that a signal handler ends it (-EINTR
 * with its exception set).
 */
static int get_waiting(ClientObject *self, struct get_arg *g, int ms)
{
	int rc = tdpy_wait_sliced(ms, get_slice, g, self);

	/* (get(name, timeout=0) of a name with none is -ENOENT, at once) */
	if (rc == -ETIMEDOUT && g->appearing) /* no newer_than= given */
		snprintf(g->e->reason, sizeof(g->e->reason),
			 "no %s \"%s\" appeared within %d ms",
			 is_ring(g->c, g->name) ? "version of ring"
						: "tensor named",
			 g->name, ms);
	else if (rc == -ETIMEDOUT)
		snprintf(g->e->reason, sizeof(g->e->reason),
			 "no version of \"%s\" newer than %llu within %d ms",
			 g->name, (unsigned long long)g->after, ms);
	return rc;
}

static int fence_slice(void *arg, int slice_ms)
{
	return td_tensor_fence_wait(arg, slice_ms);
}

int tdpy_fence_wait(ClientObject *cl, struct td_tensor *t, const char *name,
		    int ms, int64_t start, struct td_error *e)
{
	int rc;

	/*
	 * An array is only ever handed out whole: a GPU producer publishes
	 * before its queue has written the bytes, and Python has no other
	 * place to wait for them.
	 */
	if (!td_tensor_has_fence(t))
		return 0;
	rc = tdpy_wait_sliced(tdpy_left_ms(ms, start), fence_slice, t, cl);
	if (rc == -ETIMEDOUT)
		snprintf(e->reason, sizeof(e->reason),
			 "the fence of \"%s\" version %llu did not signal "
			 "within %d ms (its producer is still writing, or "
			 "died before signalling)",
			 name, (unsigned long long)td_tensor_version(t), ms);
	else if (rc == -ECONNRESET)
		snprintf(e->reason, sizeof(e->reason),
			 "the fence of \"%s\" version %llu cannot signal any "
			 "more: the connection that leased it is gone (tensord "
			 "exited, or the client was closed)",
			 name, (unsigned long long)td_tensor_version(t));
	else if (rc < 0 && rc != -EINTR)
		(void)td_fence_wait(td_tensor_fence_fd(t), 0, e);
	return rc;
}

PyObject *tdpy_client_get(ClientObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"name", "version", "newer_than", "timeout",
				 NULL};
	PyObject *ver = Py_None, *newer = Py_None, *to = Py_None;
	PyObject *name_o, *arr;
	struct td_error e = {0};
	struct td_tensor *t = NULL;
	struct td_client *c;
	uint64_t v = 0;
	const char *name;
	int64_t start = tdpy_mono_ms(); /* the timeout's, fence included */
	int ms = -1, rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|OOO", kwlist,
					 tdpy_conv_name, &name, &ver, &newer,
					 &to))
		return NULL;
	if (ver != Py_None && newer != Py_None) {
		PyErr_SetString(PyExc_TypeError,
				"give version or newer_than, not both");
		return NULL;
	}
	if (!tdpy_conv_timeout(to, &ms))
		return NULL;
	if (ver != Py_None || newer != Py_None) {
		if (!tdpy_conv_version(ver != Py_None ? ver : newer, &v))
			return NULL;
	}
	c = tdpy_client_enter(self);
	if (!c)
		return NULL;
	if (ver != Py_None) {
		Py_BEGIN_ALLOW_THREADS
		rc = td_client_get_version(c, name, v, &t, &e);
		Py_END_ALLOW_THREADS
	} else if (newer != Py_None || to != Py_None) {
		struct get_arg g = {c, name, v, newer == Py_None, &t, &e};

		rc = get_waiting(self, &g, ms);
	} else {
		Py_BEGIN_ALLOW_THREADS
		rc = td_client_get(c, name, &t, &e);
		Py_END_ALLOW_THREADS
	}
	/* the same timeout bounds the wait for its fence: what is left */
	if (rc == 0) {
		rc = tdpy_fence_wait(self, t, name, ms, start, &e);
		if (rc < 0)
			tdpy_tensor_release(t);
	}
	tdpy_client_leave(self);
	if (rc == -EINTR && tdpy_intr_take())
		return NULL; /* a signal handler's exception */
	if (rc < 0)
		return tdpy_raise(rc, &e, "get");
	name_o = PyUnicode_FromString(name);
	if (!name_o) {
		tdpy_tensor_release(t);
		return NULL;
	}
	arr = tdpy_lease_array(self, t, name_o, NULL);
	Py_DECREF(name_o);
	return arr;
}
