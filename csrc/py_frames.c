/* py_frames.c: robocache._C.gather_frames: argument parsing, validation and dispatch to
 * rc_gather_frames_cpu / rc_gather_frames_cuda.
 * Shapes (elements): storage rgb [N, H, W, C] or [N, H*W*C], yuv420 [N, H*W + 2*ch*cw];
 * ids [M] (any shape, flattened); out [M, H', W', C] with any strides.
 * Benchmark: python benchmarks/bench_frames.py
 */
#include <math.h>
#include <string.h>

#include "augment_math.h"
#include "module.h"

PyDoc_STRVAR(gather_frames_doc,
"gather_frames(storage, ids, out, *, format, height, width, channels, matrix='bt601',\n"
"              full_range=False, scale=None, augment=None, augment_group=1, scratch=None,\n"
"              antialias=True, mean=None, std=None, stream=None)\n"
"--\n"
"\n"
"Writes frame ids[m] of storage, decoded, resized and cast, into out[m]: one pass.\n"
"\n"
"Parameters\n"
"----------\n"
"storage : array\n"
"    format 'rgb': [N, height, width, channels] (or [N, height*width*channels]), uint8 or\n"
"    float32. format 'yuv420': [N, frame_bytes] uint8, each row one I420 frame (Y plane,\n"
"    then U, then V of ((height+1)//2, (width+1)//2), no padding). Each frame's row must be\n"
"    C-contiguous. With CUDA ids/out: on their device, or in pinned host memory (read by\n"
"    the kernel over the bus; only the sampled frames move).\n"
"ids : int64 array [M] (any shape, flattened), on the device of out\n"
"    Frame of each output; ids < 0 write zeros (padding). CPU: ids >= N raise ValueError;\n"
"    CUDA: they write zeros (checking would need a host sync).\n"
"out : array [M, H', W', channels], uint8, float32, float16 or bfloat16, any strides\n"
"    A permuted view of [M, C, H', W'] gives planar output. (H', W') != (height, width)\n"
"    resizes bilinearly (torch's align_corners=False, antialias=False).\n"
"format : {'rgb', 'yuv420'}\n"
"height, width, channels : int\n"
"    The decoded frame; yuv420 decodes to 3 channels.\n"
"matrix : {'bt601', 'bt709', 'bt2020'}; full_range : bool\n"
"    yuv420 color conversion, computed exactly as PyAV/FFmpeg's rgb24 conversion.\n"
"scale : float, optional\n"
"    Float out only: values are divided by it (255.0 gives 0..1 from uint8 sources).\n"
"augment : float32 array [R, 33], optional\n"
"    Per-sample augmentation parameters (robocache.augment draws them; layout: the\n"
"    RC_AUG_* rows of robocache.h): out[m] is frame ids[m] cropped, resized (bilinear,\n"
"    antialiased as torchvision's resize unless antialias=False), affine-warped, flipped\n"
"    and colour-adjusted with row m // augment_group, values in [0, 1] (uint8 out: x 255,\n"
"    rounded), then (v - mean) / std. Needs 3 channels; scale is ignored.\n"
"augment_group : int\n"
"    Output frames per parameter row (a window's time steps share their sample's row).\n"
"scratch : float64 array [M * (H' + 1) + ceil(1.5 * M * H' * W')], optional\n"
"    Working memory for contrast ops (row sums, image means, the image before the op);\n"
"    required when a row has one.\n"
"mean, std : 3 floats, optional\n"
"    Per-channel normalization after the colour ops (augment only).\n"
"stream : int or stream object, optional\n"
"    CUDA stream to run on; default: the framework's current stream.\n"
"\n"
"Returns\n"
"-------\n"
"out. See docs/frames.md for exact semantics.\n");

enum { A_STORAGE, A_IDS, A_OUT, A_FORMAT, A_HEIGHT, A_WIDTH, A_CHANNELS, A_MATRIX,
       A_FULL_RANGE, A_SCALE, A_AUGMENT, A_GROUP, A_SCRATCH, A_ANTIALIAS, A_MEAN, A_STD, A_STREAM,
       A_COUNT };

static const char *const names[A_COUNT] = {"storage", "ids", "out", "format", "height",
                                           "width", "channels", "matrix", "full_range",
                                           "scale", "augment", "augment_group", "scratch",
                                           "antialias", "mean", "std", "stream"};

/* One call: its arguments, the arrays it imported, the kernel's arguments. */
typedef struct {
    PyObject *arg[A_COUNT];  /* borrowed; NULL: not given */
    rc_tensor ids, out, storage, aug, scratch;
    rc_gather_frames_args fa;
} job;

/* Index of obj among n ASCII names, or -1 with ValueError/TypeError naming arg and choices. */
static int parse_choice(PyObject *obj, const char *const *names, int n, const char *arg,
                        const char *choices) {
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a str (%s), got %.100s", arg, choices,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (PyUnicode_CompareWithASCIIString(obj, names[i]) == 0) return i;
    PyErr_Format(PyExc_ValueError, "%s: expected %s, got %R", arg, choices, obj);
    return -1;
}

/* out's strides reach every element once: sorted by stride, each dim steps over the whole
 * extent of the smaller ones. (Stricter than injective, which nobody builds on purpose.) */
static int distinct_elements(const rc_tensor *v) {
    int order[RC_MAX_DIMS], n = 0;
    for (int d = 0; d < v->ndim; d++) {
        if (v->shape[d] == 0) return 1;
        if (v->shape[d] > 1) order[n++] = d;
    }
    for (int i = 1; i < n; i++) /* insertion sort by stride: at most 4 dims */
        for (int j = i; j > 0 && v->strides[order[j]] < v->strides[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int64_t extent = 1; /* elements spanned by the dims so far */
    for (int i = 0; i < n; i++) {
        const int d = order[i];
        if (v->strides[d] < extent) return 0;
        extent = v->strides[d] * (v->shape[d] - 1) + extent; /* no overflow: view_from_dl */
    }
    return 1;
}

/* Storage on the CPU used by a CUDA call: it must be pinned, and the kernel reads it through
 * the address the device sees. */
static int pinned_storage(rc_state *st, const void **dev_ptr, const void *ptr, int device) {
    int kind = 0, where = -1;
    void *alias = NULL;
    if (rc_require_cuda(st, "ids", device) != 0) return -1;
    rc_status status = RC_CUDA_LAUNCH(rc_pointer_kind_cuda(&kind, &where, &alias, ptr));
    if (status != RC_OK) {
        rc_raise_status(st, status);
        return -1;
    }
    if (kind == 0) {
        PyErr_Format(PyExc_ValueError,
                     "storage is pageable host memory; pin it (tensor.pin_memory(), or "
                     "allocate it with pin_memory=True) or move it to cuda:%d: the kernel reads "
                     "host frames directly over the bus, which only pinned memory allows",
                     device);
        return -1;
    }
    if (kind == 2 && where != device) {
        PyErr_Format(PyExc_ValueError, "storage is memory of cuda:%d but ids and out are on "
                     "cuda:%d", where, device);
        return -1;
    }
    if (!alias) {
        PyErr_Format(PyExc_ValueError, "storage: this pinned host memory is not mapped into "
                     "cuda:%d's address space (allocate it with torch's pin_memory, or "
                     "cudaHostAlloc with cudaHostAllocMapped)", device);
        return -1;
    }
    *dev_ptr = alias;
    return 0;
}

/* Checks storage against format/height/width/channels and fills the storage fields of fa. */
static int check_storage(rc_gather_frames_args *fa, const rc_tensor *s) {
    char buf[160];
    const int64_t H = fa->height, W = fa->width, C = fa->channels;
    const int64_t row = fa->format == RC_FRAMES_YUV420
                            ? H * W + 2 * ((H + 1) / 2) * ((W + 1) / 2) : H * W * C;
    if (fa->format == RC_FRAMES_YUV420) {
        if (s->dtype != RC_U8) {
            PyErr_Format(PyExc_TypeError, "storage: format 'yuv420' needs uint8 planes, got %s",
                         rc_dtype_name(s->dtype));
            return -1;
        }
        if (s->ndim != 2 || s->shape[1] != row) {
            PyErr_Format(PyExc_ValueError,
                         "storage: format 'yuv420' with height %lld, width %lld expects [N, %lld] "
                         "(Y %lldx%lld, then U and V %lldx%lld), got shape %s",
                         (long long)H, (long long)W, (long long)row, (long long)H, (long long)W,
                         (long long)((H + 1) / 2), (long long)((W + 1) / 2),
                         rc_dims_str(buf, sizeof buf, s->ndim, s->shape));
            return -1;
        }
    } else {
        if (s->dtype != RC_U8 && s->dtype != RC_F32) {
            PyErr_Format(PyExc_TypeError, "storage: format 'rgb' needs uint8 or float32, got %s",
                         rc_dtype_name(s->dtype));
            return -1;
        }
        const int frames4 = s->ndim == 4 && s->shape[1] == H && s->shape[2] == W &&
                            s->shape[3] == C;
        const int frames2 = s->ndim == 2 && s->shape[1] == row;
        if (!frames4 && !frames2) {
            PyErr_Format(PyExc_ValueError,
                         "storage: format 'rgb' with height %lld, width %lld, channels %lld "
                         "expects [N, %lld, %lld, %lld] or [N, %lld], got shape %s",
                         (long long)H, (long long)W, (long long)C, (long long)H, (long long)W,
                         (long long)C, (long long)row,
                         rc_dims_str(buf, sizeof buf, s->ndim, s->shape));
            return -1;
        }
    }
    int64_t count, stride;
    if (!rc_flatten_trailing(&count, &stride, s, 1) || (count > 1 && stride != 1)) {
        PyErr_Format(PyExc_ValueError,
                     "storage: each frame must be C-contiguous (strides %s); the kernel reads "
                     "whole rows",
                     rc_dims_str(buf, sizeof buf, s->ndim, s->strides));
        return -1;
    }
    if (s->shape[0] > 1 && s->strides[0] < 0) {
        PyErr_SetString(PyExc_ValueError, "storage: negative frame stride");
        return -1;
    }
    fa->storage = s->data;
    fa->frames = s->shape[0];
    fa->frame_stride = s->shape[0] > 1 ? s->strides[0] : 0;
    fa->storage_dtype = s->dtype;
    return 0;
}

/* Checks out [M, H', W', C] and fills the out fields of fa. */
static int check_out(rc_gather_frames_args *fa, const rc_tensor *o) {
    char buf[160];
    if (o->dtype != RC_U8 && o->dtype != RC_F32 && o->dtype != RC_F16 && o->dtype != RC_BF16) {
        PyErr_Format(PyExc_TypeError, "out: expected uint8, float32, float16 or bfloat16, got %s",
                     rc_dtype_name(o->dtype));
        return -1;
    }
    if (o->ndim != 4 || o->shape[0] != fa->count || o->shape[3] != fa->channels) {
        PyErr_Format(PyExc_ValueError,
                     "out: expected [M, H', W', C] with M = %lld (ids) and C = %lld (channels), "
                     "got shape %s (planar output: pass a permuted view of [M, C, H', W'])",
                     (long long)fa->count, (long long)fa->channels,
                     rc_dims_str(buf, sizeof buf, o->ndim, o->shape));
        return -1;
    }
    if (o->shape[1] > (1 << 24) || o->shape[2] > (1 << 24)) {
        PyErr_Format(PyExc_ValueError, "out: %lld x %lld frames are too large (max 2^24 a side)",
                     (long long)o->shape[1], (long long)o->shape[2]);
        return -1;
    }
    for (int d = 0; d < 4; d++)
        if (o->shape[d] > 1 && o->strides[d] < 0) {
            PyErr_Format(PyExc_ValueError, "out: negative strides are not supported (strides %s)",
                         rc_dims_str(buf, sizeof buf, o->ndim, o->strides));
            return -1;
        }
    if (!distinct_elements(o)) {
        PyErr_Format(PyExc_ValueError,
                     "out: strides %s make elements overlap; pass an array with distinct "
                     "elements",
                     rc_dims_str(buf, sizeof buf, o->ndim, o->strides));
        return -1;
    }
    fa->out = o->data;
    fa->out_stride_m = o->strides[0];
    fa->out_stride_y = o->strides[1];
    fa->out_stride_x = o->strides[2];
    fa->out_stride_c = o->strides[3];
    fa->out_height = o->shape[1];
    fa->out_width = o->shape[2];
    fa->out_dtype = o->dtype;
    return 0;
}

/* scale=: float out is divided by it; a positive finite float32. */
static int parse_scale(float *scale, PyObject *obj) {
    if (rc_is_none(obj)) return 0;
    if (!PyFloat_Check(obj) && !PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "scale: expected a number, got %.100s", Py_TYPE(obj)->tp_name);
        return -1;
    }
    double s = PyFloat_AsDouble(obj);
    if (s == -1.0 && PyErr_Occurred()) return -1;
    if (!(s > 0.0) || !isfinite(s) || !((float)s > 0.0f) || !isfinite((float)s)) {
        PyErr_Format(PyExc_ValueError, "scale: expected a finite number > 0, got %R", obj);
        return -1;
    }
    *scale = (float)s;
    return 0;
}

/* mean= / std=: three finite floats each (std nonzero), into dst. */
static int parse_triple(float dst[3], PyObject *obj, const char *arg, int nonzero) {
    PyObject *seq = PySequence_Check(obj) && !PyUnicode_Check(obj) ? PySequence_Fast(obj, arg) : NULL;
    if (!seq || PySequence_Fast_GET_SIZE(seq) != 3) {
        Py_XDECREF(seq);
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: expected 3 numbers (one per channel), got %R", arg, obj);
        return -1;
    }
    for (int c = 0; c < 3; c++) {
        double v = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, c));
        if (v == -1.0 && PyErr_Occurred()) {
            Py_DECREF(seq);
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s: expected 3 numbers (one per channel), got %R", arg, obj);
            return -1;
        }
        if (!isfinite(v) || (nonzero && (float)v == 0.0f)) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_ValueError, "%s: expected finite%s numbers, got %R", arg,
                         nonzero ? " nonzero" : "", obj);
            return -1;
        }
        dst[c] = (float)v;
    }
    Py_DECREF(seq);
    return 0;
}

/* augment_group, antialias, mean and std (checked whether or not augment= is given). */
static int parse_augment_options(job *j) {
    rc_gather_frames_args *fa = &j->fa;
    int antialias;
    fa->aug_group = 1;
    if (!rc_is_none(j->arg[A_GROUP]) &&
        rc_parse_int_range(&fa->aug_group, j->arg[A_GROUP], "augment_group", 1, INT64_MAX / 2))
        return -1;
    if (rc_parse_flag(&antialias, j->arg[A_ANTIALIAS], 1) != 0) return -1;
    fa->antialias = antialias;
    const int has_mean = !rc_is_none(j->arg[A_MEAN]), has_std = !rc_is_none(j->arg[A_STD]);
    if (has_mean != has_std) {
        PyErr_SetString(PyExc_ValueError, "mean and std: give both (per-channel normalization) or neither");
        return -1;
    }
    if (has_mean && rc_is_none(j->arg[A_AUGMENT])) {
        PyErr_SetString(PyExc_ValueError, "mean/std: normalization is part of augment=; without it, "
                        "normalize the batch afterwards");
        return -1;
    }
    fa->normalize = has_mean;
    if (has_mean && (parse_triple(fa->mean, j->arg[A_MEAN], "mean", 0) != 0 ||
                     parse_triple(fa->std, j->arg[A_STD], "std", 1) != 0))
        return -1;
    return 0;
}

/* Keywords and options: the frame's format, size and color conversion, and scale. */
static int parse(const rc_state *st, job *j, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames) {
    static const int required[] = {A_STORAGE, A_IDS, A_OUT, A_FORMAT, A_HEIGHT, A_WIDTH,
                                   A_CHANNELS};
    static const rc_signature sig = {"gather_frames", "storage, ids, out", 3, required, 7};
    static const char *const formats[] = {"rgb", "yuv420"};
    static const char *const matrices[] = {"bt601", "bt709", "bt2020"};
    rc_gather_frames_args *fa = &j->fa;
    if (rc_parse_slots(j->arg, rc_op_names(st, RC_OP_GATHER_FRAMES), A_COUNT, &sig, args, nargs,
                       kwnames) != 0)
        return -1;
    int format = parse_choice(j->arg[A_FORMAT], formats, 2, "format", "'rgb' or 'yuv420'");
    if (format < 0) return -1;
    fa->format = (rc_frame_format)format;
    int matrix = RC_MATRIX_BT601, full_range;
    if (!rc_is_none(j->arg[A_MATRIX])) {
        matrix = parse_choice(j->arg[A_MATRIX], matrices, 3, "matrix", "'bt601', 'bt709' or 'bt2020'");
        if (matrix < 0) return -1;
    }
    if (rc_parse_flag(&full_range, j->arg[A_FULL_RANGE], 0) != 0) return -1;
    rc_yuv_coeffs(fa->yuv, matrix, full_range);
    /* 2^24: row and column indices are exact in the float32 resize arithmetic */
    if (rc_parse_int_range(&fa->height, j->arg[A_HEIGHT], "height", 1, 1 << 24) ||
        rc_parse_int_range(&fa->width, j->arg[A_WIDTH], "width", 1, 1 << 24) ||
        rc_parse_int_range(&fa->channels, j->arg[A_CHANNELS], "channels", 1, 4))
        return -1;
    if (fa->format == RC_FRAMES_YUV420 && fa->channels != 3) {
        PyErr_Format(PyExc_ValueError, "channels: format 'yuv420' decodes to 3 (RGB), got %lld",
                     (long long)fa->channels);
        return -1;
    }
    if (parse_scale(&fa->scale, j->arg[A_SCALE]) != 0) return -1;
    return parse_augment_options(j);
}

/* ids and out: they set the call's device. */
static int import_ids_out(rc_call *c, job *j) {
    rc_gather_frames_args *fa = &j->fa;
    if (rc_import_array(c, &j->ids, j->arg[A_IDS], "ids", 0) != 0) return -1;
    if (rc_expect_dtype(&j->ids, RC_I64, "ids")) return -1;
    if (!rc_flatten_trailing(&fa->count, &fa->ids_stride, &j->ids, 0)) {
        if (rc_import_contiguous(c, &j->ids, j->arg[A_IDS], "ids") != 0) return -1;
        rc_flatten_trailing(&fa->count, &fa->ids_stride, &j->ids, 0);
    }
    fa->ids = (const int64_t *)j->ids.data;
    if (rc_import_array(c, &j->out, j->arg[A_OUT], "out", 1) != 0) return -1;
    if (rc_expect_no_alias(c, "out") || check_out(fa, &j->out) != 0) return -1;
    if (fa->scale > 0.0f && fa->out_dtype == RC_U8) {
        PyErr_SetString(PyExc_ValueError,
                        "scale: only for float out; uint8 out takes the values unscaled");
        return -1;
    }
    return 0;
}

/* storage, in a call of its own (it may be pinned host memory read by a CUDA call): its shape
 * against the format, no byte shared with out, and on the device of the call or pinned. */
static int import_storage(rc_call *sc, const rc_call *c, job *j) {
    rc_gather_frames_args *fa = &j->fa;
    const rc_tensor *s = &j->storage;
    if (rc_import_array(sc, &j->storage, j->arg[A_STORAGE], "storage", 0) != 0 ||
        check_storage(fa, s) != 0)
        return -1;
    const rc_import *so = &sc->imports[sc->n_imports - 1], *oo = &c->imports[c->n_imports - 1];
    if (so->lo < oo->hi && oo->lo < so->hi) {
        PyErr_SetString(PyExc_ValueError,
                        "out overlaps the memory of storage; robocache reads its inputs "
                        "while it writes out, so it cannot compute in place (pass a "
                        "separate array)");
        return -1;
    }
    const int on_cuda = c->device_type == RC_DEVICE_CUDA;
    if (s->device_type == RC_DEVICE_CUDA && (!on_cuda || s->device_id != c->device_id)) {
        PyErr_Format(PyExc_ValueError, "storage is on cuda:%d but ids and out are on %s:%d",
                     s->device_id, on_cuda ? "cuda" : "cpu", c->device_id);
        return -1;
    }
    if (on_cuda && s->device_type == RC_DEVICE_CPU && fa->frames > 0 && fa->count > 0)
        return pinned_storage(c->st, &fa->storage, s->data, c->device_id);
    return 0;
}

/* augment= and scratch=, on the device of the call (after out, which import_storage compares
 * with the last import of the call). */
static int import_augment(rc_call *c, job *j) {
    rc_gather_frames_args *fa = &j->fa;
    char buf[160];
    if (rc_is_none(j->arg[A_AUGMENT])) {
        if (!rc_is_none(j->arg[A_SCRATCH])) {
            PyErr_SetString(PyExc_ValueError, "scratch: only used with augment=");
            return -1;
        }
        return 0;
    }
    if (fa->channels != 3) {
        PyErr_Format(PyExc_ValueError, "augment: needs 3-channel (RGB) frames, got channels %lld",
                     (long long)fa->channels);
        return -1;
    }
    if (fa->normalize && fa->out_dtype == RC_U8) {
        PyErr_SetString(PyExc_ValueError, "mean/std: normalized values need float out, got uint8");
        return -1;
    }
    const rc_tensor *p = &j->aug;
    if (rc_import_array(c, &j->aug, j->arg[A_AUGMENT], "augment", 0) != 0 ||
        rc_expect_dtype(p, RC_F32, "augment"))
        return -1;
    const int64_t rows = (fa->count + fa->aug_group - 1) / fa->aug_group;
    if (p->ndim != 2 || p->shape[1] != RC_AUG_NPARAMS || p->shape[0] != rows ||
        (p->shape[0] > 1 && p->strides[0] < RC_AUG_NPARAMS) || p->strides[1] != 1) {
        PyErr_Format(PyExc_ValueError,
                     "augment: expected a float32 [%lld, %d] array with contiguous rows (one per %lld "
                     "output frames of %lld), got shape %s strides %s",
                     (long long)rows, RC_AUG_NPARAMS, (long long)fa->aug_group, (long long)fa->count,
                     rc_dims_str(buf, sizeof buf, p->ndim, p->shape),
                     rc_dims_str(buf + 80, sizeof buf - 80, p->ndim, p->strides));
        return -1;
    }
    if (fa->count % fa->aug_group) {
        PyErr_Format(PyExc_ValueError, "augment_group: %lld output frames are not whole groups of %lld",
                     (long long)fa->count, (long long)fa->aug_group);
        return -1;
    }
    fa->aug = (const float *)p->data;
    fa->aug_stride = p->shape[0] > 1 ? p->strides[0] : RC_AUG_NPARAMS;
    if (rc_is_none(j->arg[A_SCRATCH])) return 0;
    const rc_tensor *s = &j->scratch;
    if (rc_import_array(c, &j->scratch, j->arg[A_SCRATCH], "scratch", 1) != 0 ||
        rc_expect_dtype(s, RC_F64, "scratch"))
        return -1;
    int64_t n, stride;
    const int64_t need = rc_aug_scratch_elements(fa->count, fa->out_height, fa->out_width);
    if (!rc_flatten_trailing(&n, &stride, s, 0) || (n > 1 && stride != 1) || n < need) {
        PyErr_Format(PyExc_ValueError, "scratch: expected a contiguous float64 array of at least %lld "
                     "elements (M * (H' + 1) + ceil(1.5 * M * H' * W')), got shape %s", (long long)need,
                     rc_dims_str(buf, sizeof buf, s->ndim, s->shape));
        return -1;
    }
    fa->aug_scratch = (double *)s->data;
    return 0;
}

/* A CPU call's parameter rows: sizes inside the frame, known ops, contrast only with scratch. The
 * CUDA kernel trusts its rows (reading them would need a host sync): robocache.augment draws them. */
static int check_augment_rows(const rc_gather_frames_args *fa) {
    const int64_t rows = fa->count / fa->aug_group;
    for (int64_t r = 0; r < rows; r++) {
        const float *p = fa->aug + r * fa->aug_stride;
        const float top = p[RC_AUG_CROP_TOP], left = p[RC_AUG_CROP_LEFT];
        const float ch = p[RC_AUG_CROP_H], cw = p[RC_AUG_CROP_W];
        const float rh = p[RC_AUG_RESIZE_H], rw = p[RC_AUG_RESIZE_W];
        const float ot = p[RC_AUG_OUT_TOP], ol = p[RC_AUG_OUT_LEFT];
        const float nf = p[RC_AUG_NCOLOR];
        const int n = nf >= 0 && nf <= RC_AUG_MAX_COLOR ? (int)nf : 0; /* a cast of NaN would be UB */
        const char *bad = NULL;
        if (!(top >= 0 && left >= 0 && ch >= 1 && cw >= 1 && top + ch <= fa->height && left + cw <= fa->width))
            bad = "the crop box lies outside the frame";
        else if (!(rh >= 1 && rw >= 1 && rh <= (1 << 24) && rw <= (1 << 24)))
            bad = "the resize size must be >= 1";
        else if (!(ot >= 0 && ol >= 0 && ot + fa->out_height <= rh && ol + fa->out_width <= rw))
            bad = "out's window lies outside the resized box";
        else if (!(p[RC_AUG_FLIP] >= 0 && p[RC_AUG_FLIP] <= 2 && p[RC_AUG_AFFINE] >= 0 && p[RC_AUG_AFFINE] <= 2))
            bad = "flip and affine must be 0, 1 or 2";
        else if (!(nf >= 0 && nf <= RC_AUG_MAX_COLOR))
            bad = "the op count must be a number in [0, 8]";
        for (int k = 0; !bad && k < n; k++) {
            const float op = p[RC_AUG_COLOR + 2 * k];
            if (!(op >= RC_COLOR_NONE && op <= RC_COLOR_AFFINE) || !isfinite(p[RC_AUG_COLOR + 2 * k + 1]))
                bad = "an unknown colour op or a non-finite factor";
            else if (op == RC_COLOR_CONTRAST && !fa->aug_scratch)
                bad = "a contrast op needs scratch= (the image means)";
        }
        if (!bad && (p[RC_AUG_AFFINE] != 0) != (rc_aug_find(p, n, RC_COLOR_AFFINE) < n))
            bad = "an affine (RC_AUG_AFFINE) needs its place in the op list (RC_COLOR_AFFINE), and only then";
        if (bad) {
            PyErr_Format(PyExc_ValueError, "augment: row %lld: %s", (long long)r, bad);
            return -1;
        }
    }
    return 0;
}

/* ids < frames, checked on the CPU (cheap next to the work); CUDA writes zeros instead, since
 * checking there would need a host sync. */
static int check_ids(const rc_gather_frames_args *fa) {
    for (int64_t m = 0; m < fa->count; m++) {
        const int64_t id = fa->ids[m * fa->ids_stride];
        if (id >= fa->frames) {
            PyErr_Format(PyExc_ValueError,
                         "ids[%lld] = %lld is out of range for storage of %lld frames (ids < "
                         "0 mean padding)",
                         (long long)m, (long long)id, (long long)fa->frames);
            return -1;
        }
    }
    return 0;
}

static rc_status run_cpu(void *fa, int threads) {
    const rc_gather_frames_args *a = (const rc_gather_frames_args *)fa;
    return a->aug ? rc_augment_frames_cpu(a, threads) : rc_gather_frames_cpu(a, threads);
}
static rc_status run_cuda(void *fa, int device, void *stream) {
    const rc_gather_frames_args *a = (const rc_gather_frames_args *)fa;
    return RC_CUDA_LAUNCH(a->aug ? rc_augment_frames_cuda(a, device, stream)
                                 : rc_gather_frames_cuda(a, device, stream));
}
static const rc_kernels kernels = {run_cpu, run_cuda};

static int run(rc_call *c, job *j) {
    const rc_gather_frames_args *fa = &j->fa;
    if (c->device_type != RC_DEVICE_CUDA)
        return check_ids(fa) != 0 || (fa->aug && check_augment_rows(fa) != 0) ? -1
                                                                               : rc_run(c, &kernels, &j->fa, 1);
    return rc_run(c, &kernels, &j->fa, fa->count > 0 && fa->out_height > 0 && fa->out_width > 0);
}

static PyObject *gather_frames(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames) {
    rc_state *st = rc_get_state(module);
    job j;
    memset(&j.fa, 0, sizeof j.fa);
    memset(&j.aug, 0, sizeof j.aug);
    memset(&j.scratch, 0, sizeof j.scratch);
    if (parse(st, &j, args, nargs, kwnames) != 0) return NULL;
    rc_call call, scall; /* storage has a call of its own: it may be pinned host memory */
    rc_call_init(&call, st, j.arg[A_STREAM]);
    rc_call_init(&scall, st, j.arg[A_STREAM]);
    PyObject *result = NULL;
    if (import_ids_out(&call, &j) == 0 && import_storage(&scall, &call, &j) == 0 &&
        import_augment(&call, &j) == 0 && run(&call, &j) == 0) {
        result = j.arg[A_OUT];
        Py_INCREF(result);
    }
    rc_call_release(&scall);
    rc_call_release(&call);
    return result;
}

static PyMethodDef methods[] = {
    {"gather_frames", (PyCFunction)(void (*)(void))gather_frames, METH_FASTCALL | METH_KEYWORDS,
     gather_frames_doc},
    {NULL, NULL, 0, NULL},
};

const rc_op rc_gather_frames_op = {RC_OP_GATHER_FRAMES, methods, names, A_COUNT};
