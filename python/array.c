/* SPDX-License-Identifier: MIT */
/*
 * tensord.Array, the ndarray subclass every tensor comes back as, over
 * an Owner's memory (owner.c; DLPack export: dlexport.c).
 */
#include "tdpy.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Data pointer of zero-byte arrays: numpy allocates when given NULL. */
static char zero_size_data[1];

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

	return o ? tdpy_owner_do_release(o) : NULL;
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
	    (!PyArray_BASE(self) || tdpy_owner_at_base((PyObject *)self)))
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

	if (tdpy_owner_at_base(arr)) { /* a view of a tensor's pages */
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

	if (!r || Py_TYPE(r) != &PyArray_Type || !tdpy_owner_at_base(r))
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
	PyObject *d;
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
	return rc < 0 ? -1 : 0;
}

int tdpy_array_init(PyObject *m)
{
	tdpy_array_type.tp_base = &PyArray_Type;
	tdpy_array_type.tp_basicsize = PyArray_Type.tp_basicsize;
	if (tdpy_owner_init(m) < 0 || PyType_Ready(&tdpy_array_type) < 0 ||
	    finalize_init() < 0 || like_init() < 0)
		return -1;
	Py_INCREF(&tdpy_array_type);
	if (PyModule_AddObject(m, "Array", (PyObject *)&tdpy_array_type) < 0)
		return -1;
	return 0;
}
