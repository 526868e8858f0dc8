/* py_planes.c: robocache._C.copy_planes, a decoded frame's planes into its row of the frame
 * buffer at ingest. One call per frame and one release of the GIL for all of its planes: the
 * decode workers (one per file, 16 on the H100 host) contend for the GIL between frames, and each
 * release is a hand-over to take back, so three NumPy copies per frame cost more in waiting than
 * in copying. Layouts (bytes): plane p is rows[p] rows of row_bytes[p] bytes, line_size bytes
 * apart; dst is the planes' rows back to back (an I420 row: Y, U, V; or one RGB plane).
 * Benchmark: python benchmarks/bench_ingest.py
 */
#include <string.h>

#include "module.h"

PyDoc_STRVAR(copy_planes_doc,
"copy_planes(dst, planes, geometry)\n"
"--\n"
"\n"
"Copies a decoded frame's planes into dst, their rows back to back without padding.\n"
"\n"
"Parameters\n"
"----------\n"
"dst : writable C-contiguous buffer of sum(rows * row_bytes) bytes\n"
"    The frame's row of the frame buffer (e.g. a uint8 array of H*W + 2*ch*cw bytes for I420).\n"
"planes : sequence of objects with the buffer protocol and a line_size attribute\n"
"    The decoder's planes (PyAV: frame.planes), each rows of line_size >= row_bytes bytes.\n"
"geometry : sequence of (rows, row_bytes), one per plane\n"
"    What each plane holds, e.g. ((H, W), (ch, cw), (ch, cw)) for yuv420p, ((H, 3 * W),) for rgb24.\n"
"\n"
"Returns\n"
"-------\n"
"None. The copy runs without the GIL; a plane shorter than its geometry raises ValueError.\n");

static const char *const names[] = {"line_size"}; /* the planes' attribute */

#define RC_MAX_PLANES 4

/* rows and row_bytes of geometry[i]: 0, or -1 with the exception set */
static int plane_geometry(PyObject *geometry, Py_ssize_t i, Py_ssize_t *rows, Py_ssize_t *row_bytes) {
    PyObject *g = PySequence_GetItem(geometry, i); /* new ref */
    if (!g) return -1;
    int ok = PySequence_Check(g) && PySequence_Size(g) == 2;
    PyObject *r = ok ? PySequence_GetItem(g, 0) : NULL, *b = ok ? PySequence_GetItem(g, 1) : NULL;
    Py_DECREF(g);
    if (r && b) {
        *rows = PyLong_AsSsize_t(r);
        *row_bytes = PyLong_AsSsize_t(b);
    }
    Py_XDECREF(r);
    Py_XDECREF(b);
    if (!ok || PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "geometry[%zd]: expected (rows, row_bytes), two ints", i);
        return -1;
    }
    if (*rows < 0 || *row_bytes < 0) {
        PyErr_Format(PyExc_ValueError, "geometry[%zd]: rows and row_bytes must be >= 0, got (%zd, %zd)", i,
                     *rows, *row_bytes);
        return -1;
    }
    return 0;
}

/* One frame: dst and its planes' buffers, held until the copy is done. */
typedef struct {
    Py_buffer dst, src[RC_MAX_PLANES];
    Py_ssize_t rows[RC_MAX_PLANES], row_bytes[RC_MAX_PLANES], line[RC_MAX_PLANES];
    int held, have_dst;  /* buffers taken so far: src[0..held), dst */
} frame;

/* The number of planes, one per geometry entry, or -1 with the exception set. */
static Py_ssize_t count_planes(PyObject *planes, PyObject *geometry) {
    Py_ssize_t n = PySequence_Check(planes) ? PySequence_Size(planes) : -1;
    Py_ssize_t ng = PySequence_Check(geometry) ? PySequence_Size(geometry) : -1;
    if (n < 0 || ng < 0) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, n < 0 ? "planes: expected a sequence of planes"
                                               : "geometry: expected a sequence of (rows, row_bytes)");
        return -1;
    }
    if (n != ng || n < 1 || n > RC_MAX_PLANES) {
        PyErr_Format(PyExc_ValueError, "planes: expected 1..%d planes, one per geometry entry; got %zd "
                     "planes and %zd entries", RC_MAX_PLANES, n, ng);
        return -1;
    }
    return n;
}

/* Plane i: its geometry, line_size and buffer, which must hold its rows. */
static int hold_plane(frame *f, PyObject *line_size, PyObject *planes, PyObject *geometry,
                      Py_ssize_t i) {
    if (plane_geometry(geometry, i, &f->rows[i], &f->row_bytes[i]) != 0) return -1;
    PyObject *p = PySequence_GetItem(planes, i); /* new ref */
    if (!p) return -1;
    PyObject *ls = PyObject_GetAttr(p, line_size); /* new ref */
    f->line[i] = ls ? PyLong_AsSsize_t(ls) : -1;
    Py_XDECREF(ls);
    if (f->line[i] < 0 || PyErr_Occurred()) {
        Py_DECREF(p);
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "planes[%zd]: expected a plane with an int line_size >= 0", i);
        return -1;
    }
    int got = PyObject_GetBuffer(p, &f->src[i], PyBUF_SIMPLE);
    Py_DECREF(p);
    if (got != 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "planes[%zd]: expected an object with the buffer protocol", i);
        return -1;
    }
    f->held++;
    const Py_ssize_t rows = f->rows[i], row_bytes = f->row_bytes[i], line = f->line[i];
    if (rows > 0 && (line < row_bytes || f->src[i].len < (rows - 1) * line + row_bytes)) {
        PyErr_Format(PyExc_ValueError, "planes[%zd]: %zd bytes in lines of %zd cannot hold %zd rows of %zd "
                     "bytes (geometry[%zd])", i, f->src[i].len, line, rows, row_bytes, i);
        return -1;
    }
    return 0;
}

/* The planes' rows back to back into dst (called without the GIL). */
static void copy_rows(const frame *f) {
    char *d = (char *)f->dst.buf;
    for (int i = 0; i < f->held; i++) {
        const char *s = (const char *)f->src[i].buf;
        if (f->line[i] == f->row_bytes[i]) {
            memcpy(d, s, (size_t)(f->rows[i] * f->row_bytes[i]));
            d += f->rows[i] * f->row_bytes[i];
        } else {
            for (Py_ssize_t r = 0; r < f->rows[i]; r++, d += f->row_bytes[i])
                memcpy(d, s + r * f->line[i], (size_t)f->row_bytes[i]);
        }
    }
}

static PyObject *copy_planes(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *line_size = rc_op_names(rc_get_state(module), RC_OP_COPY_PLANES)[0];
    frame f;
    f.held = f.have_dst = 0;
    PyObject *result = NULL;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "copy_planes(dst, planes, geometry): expected 3 arguments, got %zd",
                     nargs);
        return NULL;
    }
    const Py_ssize_t n = count_planes(args[1], args[2]);
    if (n < 0) return NULL;
    if (PyObject_GetBuffer(args[0], &f.dst, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "dst: expected a writable C-contiguous buffer, got %.80s",
                     Py_TYPE(args[0])->tp_name);
        return NULL;
    }
    f.have_dst = 1;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (hold_plane(&f, line_size, args[1], args[2], i) != 0) goto fail;
        total += f.rows[i] * f.row_bytes[i];
    }
    if (total != f.dst.len) {
        PyErr_Format(PyExc_ValueError, "dst: expected %zd bytes (the planes' rows back to back), got %zd", total,
                     f.dst.len);
        goto fail;
    }
    Py_BEGIN_ALLOW_THREADS
    copy_rows(&f);
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
fail:
    for (int i = f.held - 1; i >= 0; i--) PyBuffer_Release(&f.src[i]);
    if (f.have_dst) PyBuffer_Release(&f.dst);
    return result;
}

static PyMethodDef methods[] = {
    {"copy_planes", (PyCFunction)(void (*)(void))copy_planes, METH_FASTCALL, copy_planes_doc},
    {NULL, NULL, 0, NULL},
};

const rc_op rc_copy_planes_op = {RC_OP_COPY_PLANES, methods, names, 1};
