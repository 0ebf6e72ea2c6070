/* SPDX-License-Identifier: MIT */
/*
 * DLPack export of tensord.Array (__dlpack__, __dlpack_device__): the
 * consumer shares the pages, copy-on-write for a read-only lease or ring
 * view (docs/python.md, "DLPack").
 */
#include "tdpy.h"

#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlpack.h"

struct dl_ctx {
	DLManagedTensor mt;
	PyObject *keep; /* the exported array */
	void *priv;     /* copy-on-write mapping, or NULL */
	size_t priv_len;
	void *heap;     /* private copy of an inline plane */
	PyObject *sub;  /* a ring view's Subscription (kept by keep) */
	OwnerObject *lease; /* a followed lease's root (kept by keep) */
	int64_t shape[TDPY_MAX_DIMS];
	int64_t strides[TDPY_MAX_DIMS];
};

/* Called by the consumer (torch, numpy) from any thread. */
static void dl_deleter(DLManagedTensor *mt)
{
	struct dl_ctx *x = mt->manager_ctx;
	PyGILState_STATE g;

	if (x->priv)
		munmap(x->priv, x->priv_len);
	g = PyGILState_Ensure();
	if (x->sub)
		tdpy_owner_hooks.view_export_gone(x->sub);
	if (x->lease)
		x->lease->dl_exports--;
	Py_XDECREF(x->keep);
	PyMem_RawFree(x->heap);
	PyGILState_Release(g);
	PyMem_RawFree(x);
}

static void dl_capsule_free(PyObject *cap)
{
	/* a consumer renames the capsule "used_dltensor" and owns it */
	if (PyCapsule_IsValid(cap, "dltensor")) {
		DLManagedTensor *mt = PyCapsule_GetPointer(cap, "dltensor");

		mt->deleter(mt);
	}
}

/*
 * A MAP_PRIVATE (copy-on-write) mapping of fd over the owner's bytes,
 * which start at file offset `at`: x's data is where p (inside the
 * owner's bytes) lies in it. Offsets in units of the file's pages (huge
 * pages on hugetlbfs: its st_blksize).
 */
static int dl_map_cow(struct dl_ctx *x, OwnerObject *o, int fd, uint64_t at,
		      const char *p)
{
	uint64_t align = (uint64_t)sysconf(_SC_PAGESIZE), lo, len;
	struct stat st;

	if (fstat(fd, &st) == 0 && st.st_blksize > 0 &&
	    (uint64_t)st.st_blksize > align &&
	    !(st.st_blksize & (st.st_blksize - 1)))
		align = (uint64_t)st.st_blksize;
	lo = at & ~(align - 1);
	len = (at - lo + o->size + align - 1) & ~(align - 1);
	x->priv = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd,
		       (off_t)lo);
	if (x->priv == MAP_FAILED) {
		x->priv = NULL;
		PyErr_SetFromErrno(PyExc_OSError);
		return -1;
	}
	x->priv_len = len;
	x->mt.dl_tensor.data = (char *)x->priv + (at - lo) + (p - o->data);
	return 0;
}

/*
 * Where DLPack's data lives: writable owners export their own pages; a
 * read-only lease or ring view exports a MAP_PRIVATE (copy-on-write)
 * mapping of the same file range: reads share the page-cache pages (no
 * copy), a write by the consumer (torch tensors are writable) faults in
 * a private page that no other process ever sees, instead of crashing
 * on PROT_READ. A ring view's slot stays held while the export lives.
 */
static int dl_place(OwnerObject *o, PyArrayObject *a, struct dl_ctx *x)
{
	OwnerObject *r = tdpy_owner_root(o);
	char *p = PyArray_DATA(a);
	npy_intp lo = (npy_intp)((uintptr_t)p - (uintptr_t)o->data);
	npy_intp hi = lo + PyArray_ITEMSIZE(a);
	bool out = lo < 0;

	/* what is exported lies in the owner's bytes, all the copy-on-write
	 * mapping has: a view made with as_strided(subok=True) may not */
	for (int i = 0; i < PyArray_NDIM(a) && !out; i++) {
		npy_intp n = PyArray_DIMS(a)[i], s = PyArray_STRIDES(a)[i], d;

		if (n > 0 && __builtin_mul_overflow(n - 1, s, &d))
			out = true;
		else if (n > 0 && __builtin_add_overflow(s < 0 ? lo : hi, d,
							 s < 0 ? &lo : &hi))
			out = true;
	}
	if (PyArray_SIZE(a) > 0 &&
	    (out || lo < 0 || hi < 0 || (uint64_t)hi > o->size)) {
		PyErr_SetString(PyExc_BufferError, "the view reaches outside "
				"the tensor's bytes: no DLPack export");
		return -1;
	}
	if (tdpy_owner_writable(o) || PyArray_NBYTES(a) == 0) {
		x->mt.dl_tensor.data = p;
		return 0;
	}
	if (o->kind == OWNER_VIEW) {
		if (o->fd < 0 || tdpy_owner_hooks.view_export(o->parent, o->version) < 0) {
			if (!PyErr_Occurred())
				PyErr_SetString(PyExc_BufferError, "no file "
						"to map this ring view");
			return -1;
		}
		if (dl_map_cow(x, o, o->fd, o->file_off, p) < 0) {
			tdpy_owner_hooks.view_export_gone(o->parent);
			return -1;
		}
		x->sub = o->parent;
		return 0;
	}
	/* an ended lease's bytes may be recycled under the consumer */
	if (r->kind != OWNER_LOAN && !tdpy_owner_held(r)) {
		PyErr_SetString(PyExc_BufferError,
				r->kind == OWNER_SLOT
					? "the slot was published, it is the "
					  "subscribers' now: no DLPack export"
				: r->t ? "the lease ended with its client's "
					 "close(): no DLPack export"
				       : "the lease was released: no DLPack "
					 "export");
		return -1;
	}
	/* an inline plane's private copy, or a published
	 * alloc(private=False) loan's pages, shared and read-only: the
	 * buffer's, which readers read and the consumer must not write */
	if (o->heap || r->kind == OWNER_LOAN) {
		x->heap = PyMem_RawMalloc(o->size);
		if (!x->heap) {
			PyErr_NoMemory();
			return -1;
		}
		memcpy(x->heap, o->heap ? o->heap : o->data, o->size);
		x->mt.dl_tensor.data = (char *)x->heap + (p - o->data);
	} else if (dl_map_cow(x, o, td_tensor_plane_fd(r->t, o->plane),
			      o->file_off, p) < 0) {
		return -1;
	}
	/* a followed lease stays held while the export lives: the
	 * follow's next() and release() refuse until it is gone */
	if (r->follow) {
		r->dl_exports++;
		x->lease = r;
	}
	return 0;
}

/* The exported array's own dtype, a view's (x.view(np.complex64)) as
 * much as a tensor's: native-order ints and floats, else a BufferError
 * naming it as numpy does and why. */
static int dl_dtype_refused(PyArray_Descr *d)
{
	bool native = PyArray_ISNBO(d->byteorder);
	PyObject *n;

	if (native && (d->kind == 'u' || d->kind == 'i' || d->kind == 'f'))
		return 0;
	n = PyObject_Str((PyObject *)d);
	if (n)
		PyErr_Format(PyExc_BufferError, "dtype %U has no DLPack "
			     "export here: %s", n, native ? "only ints, "
			     "unsigned ints and floats are exported" :
			     "not in native byte order");
	Py_XDECREF(n);
	return -1;
}

PyObject *tdpy_array_dlpack(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {"stream", NULL};
	PyArrayObject *a = (PyArrayObject *)self;
	PyArray_Descr *d = PyArray_DESCR(a);
	PyObject *stream = Py_None, *cap;
	OwnerObject *o;
	struct dl_ctx *x;
	int nd = PyArray_NDIM(a);

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &stream))
		return NULL;
	o = tdpy_owner_of(self);
	if (!o)
		return NULL;
	if (stream != Py_None) {
		PyErr_SetString(PyExc_BufferError,
				"stream must be None for CPU memory");
		goto named;
	}
	if (dl_dtype_refused(d) < 0)
		goto named;
	x = PyMem_RawCalloc(1, sizeof(*x));
	if (!x)
		return PyErr_NoMemory();
	for (int i = 0; i < nd; i++) {
		npy_intp s = PyArray_STRIDES(a)[i], n = PyArray_DIMS(a)[i];

		if (s % d->elsize) {
			PyErr_SetString(PyExc_BufferError, "a stride is not a "
					"whole number of elements");
			goto fail;
		}
		/* DLPack 0.x has signed strides, but torch 1.13 aborts the
		 * process on a negative one (numpy exports them): refused.
		 * Over one element or none a stride moves nowhere: 0. */
		if (s < 0 && n > 1) {
			PyErr_Format(PyExc_BufferError, "negative stride %zd "
				     "(dimension %d, a reversed view): no "
				     "DLPack export; export a copy "
				     "(np.ascontiguousarray)", (Py_ssize_t)s,
				     i);
			goto fail;
		}
		x->shape[i] = n;
		x->strides[i] = s < 0 ? 0 : s / d->elsize;
	}
	if (dl_place(o, a, x) < 0)
		goto fail;
	Py_INCREF(self);
	x->keep = self;
	x->mt.dl_tensor.device.device_type = TDPY_DL_CPU;
	x->mt.dl_tensor.ndim = nd;
	x->mt.dl_tensor.dtype.code = d->kind == 'u' ? TDPY_DL_UINT :
				     d->kind == 'i' ? TDPY_DL_INT :
						      TDPY_DL_FLOAT;
	x->mt.dl_tensor.dtype.bits = (uint8_t)(d->elsize * 8);
	x->mt.dl_tensor.dtype.lanes = 1;
	x->mt.dl_tensor.shape = x->shape;
	x->mt.dl_tensor.strides = x->strides;
	x->mt.manager_ctx = x;
	x->mt.deleter = dl_deleter;
	cap = PyCapsule_New(&x->mt, "dltensor", dl_capsule_free);
	if (!cap)
		dl_deleter(&x->mt);
	return cap;
fail:
	PyMem_RawFree(x);
named:
	tdpy_owner_name_refusal(o, "DLPack export");
	return NULL;
}

PyObject *tdpy_array_dlpack_device(PyObject *self, PyObject *unused)
{
	return Py_BuildValue("(ii)", TDPY_DL_CPU, 0);
}

