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

const char rc_copy_planes_doc_text[] =
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
"None. The copy runs without the GIL; a plane shorter than its geometry raises ValueError.\n";

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

PyObject *rc_py_copy_planes(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    rc_state *st = rc_get_state(module);
    Py_buffer dst = {0}, src[RC_MAX_PLANES];
    Py_ssize_t rows[RC_MAX_PLANES], row_bytes[RC_MAX_PLANES], line[RC_MAX_PLANES];
    int held = 0, have_dst = 0;
    PyObject *result = NULL;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "copy_planes(dst, planes, geometry): expected 3 arguments, got %zd",
                     nargs);
        return NULL;
    }
    PyObject *planes = args[1], *geometry = args[2];
    Py_ssize_t n = PySequence_Check(planes) ? PySequence_Size(planes) : -1;
    Py_ssize_t ng = PySequence_Check(geometry) ? PySequence_Size(geometry) : -1;
    if (n < 0 || ng < 0) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, n < 0 ? "planes: expected a sequence of planes"
                                               : "geometry: expected a sequence of (rows, row_bytes)");
        return NULL;
    }
    if (n != ng || n < 1 || n > RC_MAX_PLANES) {
        PyErr_Format(PyExc_ValueError, "planes: expected 1..%d planes, one per geometry entry; got %zd "
                     "planes and %zd entries", RC_MAX_PLANES, n, ng);
        return NULL;
    }
    if (PyObject_GetBuffer(args[0], &dst, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "dst: expected a writable C-contiguous buffer, got %.80s",
                     Py_TYPE(args[0])->tp_name);
        return NULL;
    }
    have_dst = 1;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (plane_geometry(geometry, i, &rows[i], &row_bytes[i]) != 0) goto fail;
        PyObject *p = PySequence_GetItem(planes, i); /* new ref */
        if (!p) goto fail;
        PyObject *ls = PyObject_GetAttr(p, st->str_line_size); /* new ref */
        line[i] = ls ? PyLong_AsSsize_t(ls) : -1;
        Py_XDECREF(ls);
        if (line[i] < 0 || PyErr_Occurred()) {
            Py_DECREF(p);
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "planes[%zd]: expected a plane with an int line_size >= 0", i);
            goto fail;
        }
        int got = PyObject_GetBuffer(p, &src[i], PyBUF_SIMPLE);
        Py_DECREF(p);
        if (got != 0) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "planes[%zd]: expected an object with the buffer protocol", i);
            goto fail;
        }
        held++;
        if (rows[i] > 0 && (line[i] < row_bytes[i] || src[i].len < (rows[i] - 1) * line[i] + row_bytes[i])) {
            PyErr_Format(PyExc_ValueError, "planes[%zd]: %zd bytes in lines of %zd cannot hold %zd rows of %zd "
                         "bytes (geometry[%zd])", i, src[i].len, line[i], rows[i], row_bytes[i], i);
            goto fail;
        }
        total += rows[i] * row_bytes[i];
    }
    if (total != dst.len) {
        PyErr_Format(PyExc_ValueError, "dst: expected %zd bytes (the planes' rows back to back), got %zd", total,
                     dst.len);
        goto fail;
    }
    Py_BEGIN_ALLOW_THREADS
    char *d = (char *)dst.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *s = (const char *)src[i].buf;
        if (line[i] == row_bytes[i]) {
            memcpy(d, s, (size_t)(rows[i] * row_bytes[i]));
            d += rows[i] * row_bytes[i];
        } else {
            for (Py_ssize_t r = 0; r < rows[i]; r++, d += row_bytes[i])
                memcpy(d, s + r * line[i], (size_t)row_bytes[i]);
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
fail:
    for (int i = held - 1; i >= 0; i--) PyBuffer_Release(&src[i]);
    if (have_dst) PyBuffer_Release(&dst);
    return result;
}
