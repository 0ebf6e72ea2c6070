/* SPDX-License-Identifier: MIT */
/*
 * tensord.Planes: a tensor of several planes (NV12 and the other planar
 * image formats of the blob spec) as a sequence of arrays, one per plane,
 * each with the rows the blob spec gives that plane
 * (td_format_plane_layout). One ndarray cannot describe planes that lie
 * in different places; a sequence of views of one lease can.
 *
 * Every plane array's owner (OWNER_PLANE) holds a reference to the root
 * owner (the lease of get(), the loan of alloc()), so the lease lasts
 * as long as any plane view; the Planes object is one more such holder.
 */
#include "tdpy.h"

#include <errno.h>
#include <string.h>

typedef struct {
	PyObject_HEAD
	OwnerObject *root; /* LEASE or LOAN */
	PyObject *arrays;  /* tuple of tensord.Array, one per plane */
	PyObject *format;  /* str */
	PyObject *weakrefs;
} PlanesObject;

OwnerObject *tdpy_plane_owner(OwnerObject *root, uint32_t i)
{
	OwnerObject *p = tdpy_owner_new(OWNER_PLANE, (PyObject *)root);

	if (!p)
		return NULL;
	p->plane = i;
	p->dtype = root->dtype;
	p->version = root->version;
	p->writable = root->writable;
	p->name = root->name;
	Py_XINCREF(p->name);
	return p;
}

PyObject *tdpy_planes_new(OwnerObject *root, PyObject *arrays,
			  const char *format)
{
	PlanesObject *p = PyObject_New(PlanesObject, &tdpy_planes_type);

	if (!p) {
		Py_DECREF(arrays);
		return NULL;
	}
	p->weakrefs = NULL;
	Py_INCREF(root);
	p->root = root;
	p->arrays = arrays;
	p->format = PyUnicode_FromString(format);
	if (!p->format) {
		Py_DECREF(p);
		return NULL;
	}
	return (PyObject *)p;
}

/*
 * alloc() of a format with several planes: one buffer holding the planes
 * one after the other as the blob spec lays an image out (NV12: Y at 0
 * with stride * H bytes, UV right after), each plane's rows row_pitch
 * apart (0: packed). o has shape, dtype, format and row_pitch set.
 */
PyObject *tdpy_alloc_planes(ClientObject *self, OwnerObject *o)
{
	const char *fmt = PyUnicode_AsUTF8(o->format);
	uint32_t n = td_format_plane_count(fmt);
	struct td_plane_layout l[TDPY_MAX_PLANES];
	uint64_t shape[TDPY_MAX_DIMS], size = 0;
	PyObject *arrays;
	int rc;

	for (int k = 0; k < o->ndim; k++)
		shape[k] = (uint64_t)o->shape[k];
	for (uint32_t i = 0; i < n && i < TDPY_MAX_PLANES; i++) {
		uint64_t bytes;

		rc = td_format_plane_layout(fmt, o->dtype, (uint32_t)o->ndim,
					    shape, i, o->row_pitch, &l[i]);
		if (rc < 0 || __builtin_mul_overflow(l[i].shape[0],
						     l[i].stride, &bytes) ||
		    __builtin_add_overflow(size, bytes, &size)) {
			PyErr_Format(PyExc_ValueError, "shape, dtype and row "
				     "pitch do not fit format %s (%s)", fmt,
				     strerror(rc < 0 ? -rc : EOVERFLOW));
			goto fail;
		}
		o->plane_off[i] = size - bytes;
		o->plane_size[i] = bytes;
	}
	if (n > TDPY_MAX_PLANES || size > (uint64_t)NPY_MAX_INTP) {
		PyErr_SetString(PyExc_ValueError, "too many planes or bytes");
		goto fail;
	}
	o->plane_count = n;
	o->size = size;
	o->row_pitch = l[0].stride; /* the same for every plane */
	if (tdpy_loan_open(self, o, size) < 0)
		goto fail;
	arrays = PyTuple_New(n);
	for (uint32_t i = 0; arrays && i < n; i++) {
		OwnerObject *p = tdpy_plane_owner(o, i);
		PyObject *a;

		if (!p) {
			Py_CLEAR(arrays);
			break;
		}
		p->ndim = (int)l[i].ndim;
		for (int k = 0; k < p->ndim; k++) {
			p->shape[k] = (npy_intp)l[i].shape[k];
			p->strides[k] = (npy_intp)l[i].strides[k];
		}
		p->size = o->plane_size[i];
		p->data = (char *)o->map + o->plane_off[i];
		a = tdpy_owner_array(p);
		if (a && o->keep_shared &&
		    !(o->plane_refs[i] = PyWeakref_NewRef(a, NULL)))
			Py_CLEAR(a);
		if (!a)
			Py_CLEAR(arrays);
		else
			PyTuple_SET_ITEM(arrays, i, a);
	}
	if (!arrays)
		goto fail;
	{
		PyObject *r = tdpy_planes_new(o, arrays, fmt);

		Py_DECREF(o);
		return r;
	}
fail:
	Py_DECREF(o);
	return NULL;
}

/* ---- the type ---- */

static void planes_dealloc(PlanesObject *p)
{
	if (p->weakrefs)
		PyObject_ClearWeakRefs((PyObject *)p);
	Py_XDECREF(p->arrays);
	Py_XDECREF(p->format);
	Py_XDECREF(p->root);
	PyObject_Free(p);
}

static Py_ssize_t planes_len(PlanesObject *p)
{
	return PyTuple_GET_SIZE(p->arrays);
}

static PyObject *planes_item(PlanesObject *p, Py_ssize_t i)
{
	if (i < 0 || i >= PyTuple_GET_SIZE(p->arrays)) {
		PyErr_SetString(PyExc_IndexError, "plane index out of range");
		return NULL;
	}
	PyObject *a = PyTuple_GET_ITEM(p->arrays, i);

	Py_INCREF(a);
	return a;
}

/* p[i] (negative from the end) or p[a:b:c], a tuple of plane views */
static PyObject *planes_subscript(PlanesObject *p, PyObject *key)
{
	Py_ssize_t i;

	if (PySlice_Check(key))
		return PyObject_GetItem(p->arrays, key);
	i = PyNumber_AsSsize_t(key, PyExc_IndexError);
	if (i == -1 && PyErr_Occurred())
		return NULL;
	return planes_item(p, i < 0 ? i + PyTuple_GET_SIZE(p->arrays) : i);
}

static PyObject *planes_iter(PlanesObject *p)
{
	return PyObject_GetIter(p->arrays);
}

static PyObject *planes_root_attr(PlanesObject *p, void *name)
{
	return PyObject_GetAttrString((PyObject *)p->root, name);
}

static PyObject *planes_get_lease(PlanesObject *p, void *unused)
{
	Py_INCREF(p->root);
	return (PyObject *)p->root;
}

static PyObject *planes_get_format(PlanesObject *p, void *unused)
{
	Py_INCREF(p->format);
	return p->format;
}

static PyObject *planes_release(PlanesObject *p, PyObject *unused)
{
	return PyObject_CallMethod((PyObject *)p->root, "release", NULL);
}

static PyObject *planes_repr(PlanesObject *p)
{
	return PyUnicode_FromFormat("<tensord.Planes %U v%llu, %zd planes>",
				    p->format,
				    (unsigned long long)p->root->version,
				    PyTuple_GET_SIZE(p->arrays));
}

static PySequenceMethods planes_as_sequence = {
	.sq_length = (lenfunc)planes_len,
	.sq_item = (ssizeargfunc)planes_item,
};

static PyMappingMethods planes_as_mapping = {
	.mp_length = (lenfunc)planes_len,
	.mp_subscript = (binaryfunc)planes_subscript,
};

/*
 * No one DLPack tensor describes planes that lie apart: without these,
 * torch.from_dlpack(p) took the Planes for a capsule and said "received
 * an invalid capsule ... can be consumed only once", which tells nothing.
 * Each plane exports on its own.
 */
static PyObject *planes_dlpack(PlanesObject *p, PyObject *args, PyObject *kw)
{
	PyErr_Format(PyExc_BufferError, "a tensor of %zd planes (%U) is no "
		     "one DLPack tensor: export each plane, "
		     "torch.from_dlpack(p[0])", PyTuple_GET_SIZE(p->arrays),
		     p->format);
	tdpy_owner_name_refusal(p->root, "DLPack export");
	return NULL;
}

static PyObject *planes_dlpack_device(PlanesObject *p, PyObject *unused)
{
	return Py_BuildValue("(ii)", 1, 0); /* kDLCPU, as each plane's */
}

static PyMethodDef planes_methods[] = {
	{"release", (PyCFunction)planes_release, METH_NOARGS,
	 "End the lease now (for every plane view)."},
	{"__dlpack__", (PyCFunction)(void (*)(void))planes_dlpack,
	 METH_VARARGS | METH_KEYWORDS,
	 "Refused (BufferError): export each plane instead."},
	{"__dlpack_device__", (PyCFunction)planes_dlpack_device, METH_NOARGS,
	 "(1, 0): CPU, as each plane's."},
	{"__enter__", tdpy_enter, METH_NOARGS, NULL},
	{"__exit__", tdpy_exit_release, METH_VARARGS, NULL},
	{NULL},
};

static PyGetSetDef planes_getset[] = {
	{"version", (getter)planes_root_attr, NULL, "version of the tensor",
	 "version"},
	{"metadata", (getter)planes_root_attr, NULL, "user metadata bytes",
	 "metadata"},
	{"name", (getter)planes_root_attr, NULL, "tensor name", "name"},
	{"dtype_name", (getter)planes_root_attr, NULL, "tensord dtype name",
	 "dtype_name"},
	{"held", (getter)planes_root_attr, NULL,
	 "whether the lease/loan is held", "held"},
	{"format", (getter)planes_get_format, NULL, "the image format", NULL},
	{"lease", (getter)planes_get_lease, NULL,
	 "the tensord.Lease behind every plane", NULL},
	{NULL},
};

PyTypeObject tdpy_planes_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "tensord.Planes",
	.tp_doc = "A tensor of several planes (an image format such as "
		  "NV12): a sequence of arrays, one per plane, sharing one "
		  "lease; .version, .metadata, .format, .release().",
	.tp_basicsize = sizeof(PlanesObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_dealloc = (destructor)planes_dealloc,
	.tp_weaklistoffset = offsetof(PlanesObject, weakrefs),
	.tp_repr = (reprfunc)planes_repr,
	.tp_as_mapping = &planes_as_mapping,
	.tp_as_sequence = &planes_as_sequence,
	.tp_iter = (getiterfunc)planes_iter,
	.tp_methods = planes_methods,
	.tp_getset = planes_getset,
};

int tdpy_planes_init(PyObject *m)
{
	if (PyType_Ready(&tdpy_planes_type) < 0)
		return -1;
	Py_INCREF(&tdpy_planes_type);
	if (PyModule_AddObject(m, "Planes", (PyObject *)&tdpy_planes_type) < 0)
		return -1;
	return 0;
}
