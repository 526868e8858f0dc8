/* fuse_math.h: the per-stream row lookup of fuse, shared by csrc/cpu/fuse.c and cuda/fuse.cu.
 *
 * Everything per target (search, weight, lerp rules, half conversions, slerp) is
 * resample_math.h itself: fuse reuses that text so that each stream's columns equal a
 * separate resample of the stream, bit for bit, on either device.
 */
#ifndef RC_FUSE_MATH_H
#define RC_FUSE_MATH_H

#include "resample_math.h"

/* Stream s's series for output row b: element offsets of its first sample in values (*v0) and
 * times (*t0), and its sample count (*n). Same rule as rc_row_span (no lengths in fuse). */
RC_HD void rc_fuse_row_span(int64_t *v0, int64_t *t0, int64_t *n, const rc_fuse_args *a,
                            const rc_fuse_stream *s, int64_t b) {
    if (s->offsets) {
        int64_t e = a->index[b * a->index_stride];
        int64_t first = s->offsets[e * s->offsets_stride];
        *n = s->offsets[(e + 1) * s->offsets_stride] - first;
        *v0 = first * s->values_stride_s;
        *t0 = first * s->times_stride_s;
    } else {
        *n = s->samples;
        *v0 = b * s->values_stride_b;
        *t0 = b * s->times_stride_b;
    }
}

#endif /* RC_FUSE_MATH_H */
