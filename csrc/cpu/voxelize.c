/* cpu/voxelize.c: voxelize on the CPU, the no-GPU path and the reference the CUDA kernel is
 * held to bit for bit (deterministic mode).
 * Layouts (elements): out [B,X,Y,Z] or [B,F,X,Y,Z] contiguous, dropped [B]; points/features
 * strided, see rc_voxelize_args in robocache.h. The output is zeroed in parallel blocks, then
 * each thread takes whole clouds: a cloud's points are reduced in order by one thread, so the
 * result does not depend on the thread count. Benchmark: benchmarks/bench_voxelize.py --device cpu
 */
#include <math.h>
#include <string.h>

#include "../voxelize_math.h"
#include "../robocache.h"
#include "parallel.h"

typedef struct {
    const rc_voxelize_args *a;
    rc_vox_geom g;
    rc_vox_layout l;
    int64_t V;        /* voxels per cloud grid */
    int out_size;     /* bytes per output element */
    uint64_t one;     /* bit pattern of 1 in out_dtype (occupancy) */
} vox_job;

/* Points [r0, r1) of cloud b and the slot index of point r0 (see robocache.h). Offsets and
 * lengths are clamped to the array so that even unchecked content cannot read out of bounds. */
static void cloud_range(const rc_voxelize_args *a, int64_t b, int64_t *r0, int64_t *r1,
                        int64_t *slot0) {
    const int64_t n = a->points_per_cloud;
    if (a->offsets) {
        int64_t lo = a->offsets[b * a->offsets_stride], hi = a->offsets[(b + 1) * a->offsets_stride];
        lo = lo < 0 ? 0 : (lo > n ? n : lo);
        hi = hi < lo ? lo : (hi > n ? n : hi);
        *r0 = lo;
        *r1 = hi;
        *slot0 = 0;
    } else {
        int64_t hi = a->lengths ? a->lengths[b * a->lengths_stride] : n;
        *r0 = 0;
        *r1 = hi < 0 ? 0 : (hi > n ? n : hi);
        *slot0 = b * n;
    }
}

static int64_t point_voxel(const vox_job *j, int64_t b, int64_t r) {
    const rc_voxelize_args *a = j->a;
    const int64_t e = b * a->points_stride_b + r * a->points_stride_n, sc = a->points_stride_c;
    return rc_vox_bin(&j->g, rc_vox_load(a->points, e, a->points_dtype),
                      rc_vox_load(a->points, e + sc, a->points_dtype),
                      rc_vox_load(a->points, e + 2 * sc, a->points_dtype));
}

static double feature(const rc_voxelize_args *a, int64_t b, int64_t r, int64_t c) {
    return rc_vox_load(a->features,
                       b * a->features_stride_b + r * a->features_stride_n +
                           c * a->features_stride_c,
                       a->features_dtype);
}

static uint64_t one_bits(rc_dtype dt) {
    switch (dt) {
    case RC_F32: return 0x3f800000u;
    case RC_F64: return 0x3ff0000000000000ull;
    case RC_F16: return 0x3c00u;
    case RC_BF16: return 0x3f80u;
    default: return 1u; /* uint8, bool */
    }
}

/* ---- occupancy and count: straight into the output ---- */

static int64_t scatter_direct(const vox_job *j, int64_t b, int64_t r0, int64_t r1) {
    const rc_voxelize_args *a = j->a;
    char *out = (char *)a->out + b * j->V * j->out_size;
    int64_t kept = 0;
    for (int64_t r = r0; r < r1; r++) {
        int64_t v = point_voxel(j, b, r);
        if (v < 0) continue;
        kept++;
        if (a->mode == RC_VOX_OCCUPANCY) memcpy(out + v * j->out_size, &j->one, (size_t)j->out_size);
        else if (a->out_dtype == RC_I32) ((int32_t *)out)[v]++;
        else ((int64_t *)out)[v]++;
    }
    return kept;
}

/* ---- sum, mean, max: slots ---- */

/* The voxel's slot: the first point to reach the zeroed voxel writes its slot + 1 into the
 * channel-0 word of the output (overwritten by finish_slots). */
static int64_t claim(const vox_job *j, int64_t b, int64_t v, int64_t slot) {
    char *w = (char *)j->a->out + (b * j->a->channels * j->V + v) * j->out_size;
    if (j->out_size == 8) {
        uint64_t old;
        memcpy(&old, w, 8);
        if (old) return (int64_t)old - 1;
        old = (uint64_t)slot + 1;
        memcpy(w, &old, 8);
    } else {
        uint32_t old;
        memcpy(&old, w, 4);
        if (old) return (int64_t)old - 1;
        old = (uint32_t)(slot + 1);
        memcpy(w, &old, 4);
    }
    return slot;
}

static int64_t scatter_slots(const vox_job *j, int64_t b, int64_t r0, int64_t r1, int64_t s0) {
    const rc_voxelize_args *a = j->a;
    const rc_vox_layout *l = &j->l;
    const int64_t F = a->channels;
    char *ws = (char *)a->workspace;
    uint32_t *counts = (uint32_t *)(ws + l->counts);
    char *acc = ws + l->acc;
    uint8_t *flags = (uint8_t *)(ws + l->flags);
    uint64_t *maxabs = (uint64_t *)(ws + l->maxabs) + b * F;
    const int64_t first = s0 + r0, n = r1 - r0;
    memset(counts + first, 0, (size_t)(n * 4));
    memset(acc + first * F * l->acc_size, 0, (size_t)(n * F * l->acc_size));
    if (l->fixed) memset(flags + first * F, 0, (size_t)(n * F));

    int64_t kept = 0;
    if (l->fixed) { /* the statistics that fix each channel's scale */
        memset(maxabs, 0, (size_t)(F * 8));
        for (int64_t r = r0; r < r1; r++) {
            if (point_voxel(j, b, r) < 0) continue;
            kept++;
            for (int64_t c = 0; c < F; c++) {
                uint64_t bits = rc_vox_f64_bits(fabs(feature(a, b, r, c)));
                if (bits < 0x7ff0000000000000ull && bits > maxabs[c]) maxabs[c] = bits;
            }
        }
    }
    /* each channel's fixed-point scale, once per cloud (recomputed per value past 64) */
    int shifts[64];
    for (int64_t c = 0; l->fixed && c < F && c < 64; c++)
        shifts[c] = rc_vox_shift((uint64_t)kept, maxabs[c]);
#define RC_SHIFT(c) ((c) < 64 ? shifts[c] : rc_vox_shift((uint64_t)kept, maxabs[c]))
    int64_t kept2 = 0;
    for (int64_t r = r0; r < r1; r++) {
        int64_t v = point_voxel(j, b, r);
        if (v < 0) continue;
        kept2++;
        int64_t slot = claim(j, b, v, s0 + r);
        counts[slot]++;
        for (int64_t c = 0; c < F; c++) {
            double f = feature(a, b, r, c);
            int64_t k = slot * F + c;
            if (l->fixed) {
                uint32_t sp = rc_vox_special(f);
                if (sp) flags[k] |= (uint8_t)sp;
                else ((int64_t *)acc)[k] += rc_vox_to_fixed(f, RC_SHIFT(c));
            } else if (a->mode == RC_VOX_MAX) {
                /* written as selects: random data would mispredict a branch half the time */
                if (l->acc_size == 8) {
                    uint64_t key = rc_vox_key64(f), *p = (uint64_t *)acc + k;
                    *p = key > *p ? key : *p;
                } else {
                    uint32_t key = rc_vox_key32(rc_vox_to_f32(f)), *p = (uint32_t *)acc + k;
                    *p = key > *p ? key : *p;
                }
            } else if (l->acc_size == 8) {
                ((double *)acc)[k] += f;
            } else {
                ((float *)acc)[k] += rc_vox_to_f32(f);
            }
        }
    }
    if (!l->fixed) kept = kept2;

    /* each claimed slot writes its voxel's F channels */
    const int mean = a->mode == RC_VOX_MEAN;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t slot = s0 + r;
        const uint32_t cnt = counts[slot];
        if (!cnt) continue;
        const int64_t v = point_voxel(j, b, r);
        for (int64_t c = 0; c < F; c++) {
            const int64_t k = slot * F + c, o = (b * F + c) * j->V + v;
            if (l->fixed) {
                double x = rc_vox_fixed_result(((const int64_t *)acc)[k], flags[k], RC_SHIFT(c),
                                               cnt, mean);
                if (j->out_size == 8) ((double *)a->out)[o] = x;
                else ((float *)a->out)[o] = rc_vox_to_f32(x);
            } else if (a->mode == RC_VOX_MAX) {
                if (j->out_size == 8) ((double *)a->out)[o] = rc_vox_unkey64(((const uint64_t *)acc)[k]);
                else ((float *)a->out)[o] = rc_vox_unkey32(((const uint32_t *)acc)[k]);
            } else if (j->out_size == 8) {
                double s = ((const double *)acc)[k];
                ((double *)a->out)[o] = mean ? s / (double)cnt : s;
            } else {
                float s = ((const float *)acc)[k];
                ((float *)a->out)[o] = mean ? s / (float)cnt : s;
            }
        }
    }
#undef RC_SHIFT
    return kept;
}

static void clouds_range(void *ctx, int64_t begin, int64_t end) {
    const vox_job *j = (const vox_job *)ctx;
    const rc_voxelize_args *a = j->a;
    for (int64_t b = begin; b < end; b++) {
        int64_t r0, r1, s0, kept = 0;
        cloud_range(a, b, &r0, &r1, &s0);
        if (a->mode == RC_VOX_OCCUPANCY || a->mode == RC_VOX_COUNT)
            kept = scatter_direct(j, b, r0, r1);
        else if (a->channels > 0 && r1 > r0) /* empty: the workspace may be NULL */
            kept = scatter_slots(j, b, r0, r1, s0);
        else /* F == 0: nothing to write, but dropped still counts */
            for (int64_t r = r0; r < r1; r++) kept += point_voxel(j, b, r) >= 0;
        if (a->dropped) a->dropped[b] = (r1 - r0) - kept;
    }
}

#define RC_ZERO_BLOCK ((int64_t)1 << 22) /* 4 MiB per zeroing task */

static void zero_range(void *ctx, int64_t begin, int64_t end) {
    const vox_job *j = (const vox_job *)ctx;
    const int64_t bytes = j->a->batch * (j->a->mode >= RC_VOX_SUM ? j->a->channels : 1) * j->V *
                          j->out_size;
    for (int64_t k = begin; k < end; k++) {
        int64_t lo = k * RC_ZERO_BLOCK, hi = lo + RC_ZERO_BLOCK < bytes ? lo + RC_ZERO_BLOCK : bytes;
        memset((char *)j->a->out + lo, 0, (size_t)(hi - lo));
    }
}

int64_t rc_voxelize_workspace_size(const rc_voxelize_args *args) {
    rc_vox_layout l;
    rc_vox_layout_of(&l, args);
    return l.total;
}

rc_status rc_voxelize_cpu(const rc_voxelize_args *args, int num_threads) {
    vox_job j;
    j.a = args;
    j.g = rc_vox_geom_of(args);
    rc_vox_layout_of(&j.l, args);
    j.V = args->grid[0] * args->grid[1] * args->grid[2];
    j.out_size = rc_dtype_size(args->out_dtype);
    j.one = one_bits(args->out_dtype);
    const int64_t planes = args->batch * (args->mode >= RC_VOX_SUM ? args->channels : 1);
    const int64_t bytes = planes * j.V * j.out_size;
    rc_parallel_for((bytes + RC_ZERO_BLOCK - 1) / RC_ZERO_BLOCK, 1, num_threads, zero_range, &j);
    /* ~32k point visits per thread before another one pays off */
    const int64_t per_cloud = args->offsets
                                  ? args->points_per_cloud / (args->batch > 0 ? args->batch : 1)
                                  : args->points_per_cloud;
    const int64_t grain = 1 + 32768 / (per_cloud * (1 + args->channels) + 1);
    rc_parallel_for(args->batch, grain, num_threads, clouds_range, &j);
    return RC_OK;
}

rc_status rc_voxelize_check_cpu(rc_check_result *result, const rc_voxelize_args *a) {
    result->kind = RC_CHECK_OK;
    result->row = 0;
    result->i = 0;
    if (a->offsets) {
        const int64_t *off = a->offsets, so = a->offsets_stride;
        int64_t bad = -1;
        if (off[0] != 0) bad = 0;
        for (int64_t b = 0; bad < 0 && b < a->batch; b++)
            if (off[(b + 1) * so] < off[b * so]) bad = b + 1;
        if (bad < 0 && off[a->batch * so] != a->points_per_cloud) bad = a->batch;
        if (bad >= 0) {
            result->kind = RC_CHECK_OFFSETS;
            result->row = bad;
        }
    } else if (a->lengths) {
        for (int64_t b = 0; b < a->batch; b++) {
            int64_t n = a->lengths[b * a->lengths_stride];
            if (n < 0 || n > a->points_per_cloud) {
                result->kind = RC_CHECK_LENGTHS;
                result->row = b;
                break;
            }
        }
    }
    return RC_OK;
}
