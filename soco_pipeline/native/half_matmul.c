/* Similarity of fp32 queries to an fp16 feature map, computed in fp32 without converting the map first.
 *
 * sims[q, j] = sum_c query[q, c] * map[c, j] for a C x HW row-major fp16 map (the feature cache's layout)
 * and Q rows of a row-major fp32 query matrix with C columns, plus the maximum of each row and the first (lowest) index at
 * which it occurs, as torch.argmax reports it. The map is walked a column of 32 cells at a time; each column
 * is widened KB channels at a time (8 KB of float32 that stay in L1) and meets all queries, 12 at a time (24
 * accumulators), so the map is never copied: torch would first write a float32 copy of every map (twice
 * its size, larger than L2) and read it back for the product, which costs more than the product itself
 * when each map meets only a few dozen queries, as in matching. A column's sums are final once all its
 * channels are done, so the argmax, the similarity matrix (when asked for) and any requested values are
 * taken from a buffer of Q x 32 floats that stays in cache.
 *
 * Built at first use by soco_pipeline/half_matmul.py with the system C compiler; the AVX-512 code is
 * selected per function (target attribute), so the library loads on any x86-64 CPU and Python asks
 * soco_half_matmul_supported() before calling it.
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>

#define QB 12 /* queries per register block: 12 x 2 accumulators of 16 cells (8 and 4 for a last group) */
#define CB 32  /* cells per tile */
#define KB 64  /* channel rows streamed together */

int soco_half_matmul_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
}

__attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma")))
static inline __m512 load_half(const uint16_t *p, __mmask16 m, int full) {
    __m256i h = full ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(m, p);
    return _mm512_cvtph_ps(h);
}

static inline __mmask16 lane_mask(int64_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : (n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u));
}

/* Sums of nq queries x 32 cells over kn channel rows of the widened tile `a` (kn x 32 floats), the queries
 * packed channel-major in q (kn x nq floats), added to (or, first, stored in) the partial-sum rows p + j * 32
 * of the jn real queries (the others are padding). nq is a constant at every call site, so the loops unroll
 * into 2 nq accumulators. */
__attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma"), always_inline))
static inline void tile(const int nq, const float *a, int64_t kn, const float *q, float *p, int64_t jn, int first) {
    __m512 acc0[QB], acc1[QB];
#pragma GCC unroll 12
    for (int j = 0; j < nq; j++) {
        const int load = !first && j < jn;
        acc0[j] = load ? _mm512_load_ps(p + j * CB) : _mm512_setzero_ps();
        acc1[j] = load ? _mm512_load_ps(p + j * CB + 16) : _mm512_setzero_ps();
    }
    for (int64_t c = 0; c < kn; c++, a += CB, q += nq) {
        const __m512 a0 = _mm512_load_ps(a);
        const __m512 a1 = _mm512_load_ps(a + 16);
#pragma GCC unroll 12
        for (int j = 0; j < nq; j++) {
            const __m512 b = _mm512_set1_ps(q[j]);
            acc0[j] = _mm512_fmadd_ps(b, a0, acc0[j]);
            acc1[j] = _mm512_fmadd_ps(b, a1, acc1[j]);
        }
    }
#pragma GCC unroll 12
    for (int j = 0; j < nq; j++) {
        if (j < jn) {
            _mm512_store_ps(p + j * CB, acc0[j]);
            _mm512_store_ps(p + j * CB + 16, acc1[j]);
        }
    }
}

/* Register blocks of 12, 8 and 4 queries, kept out of line so that all 32 vector registers are theirs. */
#define TILE_FN(NQ)                                                                                            \
    __attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma"), noinline)) static void tile##NQ(               \
        const float *a, int64_t kn, const float *q, float *p, int64_t jn, int first) {                         \
        tile(NQ, a, kn, q, p, jn, first);                                                                      \
    }
TILE_FN(12)
TILE_FN(8)
TILE_FN(4)

/* Widen kn rows x 32 cells of the map (row stride HW) into `a` (kn x 32 floats); masked lanes read 0. Each
 * row's line PF cells ahead is prefetched on the way: the tile that many tiles later will need it. */
#define PF_TILES 2
__attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma"), always_inline))
static inline void widen(const uint16_t *row, int64_t HW, int64_t kn, int full, __mmask16 m0, __mmask16 m1,
                         float *a, int64_t pf) {
    for (int64_t c = 0; c < kn; c++, row += HW, a += CB) {
        if (pf > 0) _mm_prefetch((const char *)(row + pf), _MM_HINT_T1);
        _mm512_store_ps(a, load_half(row, m0, full));
        _mm512_store_ps(a + 16, load_half(row + 16, m1, full));
    }
}

/* Queries per register block for the group starting at g0: QB, or 8 or 4 for a short last group. */
static inline int64_t group_size(int64_t Q, int64_t g0) {
    const int64_t r = Q - g0;
    return r >= QB ? QB : (r > 8 ? QB : (r > 4 ? 8 : 4));
}

/* Pack every block's channels of every query group, channel-major: group g0 of block b (qb queries a group,
 * the last one of group_size(Q, g0) lanes, padding repeating its last query) starts at (b * ngroups * qb
 * + g0) * KB. Query i is row qrows[i] of `query` (row i when qrows is NULL). */
static void pack_queries(float *pack, const float *query, const int64_t *qrows, int64_t Q, int64_t C, int64_t qb,
                         int64_t (*group_size)(int64_t, int64_t)) {
    const int64_t ngroups = (Q + qb - 1) / qb, nblocks = C > 0 ? (C + KB - 1) / KB : 1;
    for (int64_t b = 0; b < nblocks; b++) {
        const int64_t k0 = b * KB, kn = C - k0 < KB ? C - k0 : KB;
        for (int64_t g0 = 0; g0 < Q; g0 += qb) {
            const int64_t nq = group_size(Q, g0), jn = Q - g0 < qb ? Q - g0 : qb;
            float *dst = pack + (b * ngroups * qb + g0) * KB;
            for (int64_t j = 0; j < nq; j++) {
                const int64_t qi = g0 + (j < jn ? j : jn - 1);
                const float *src = query + (qrows ? qrows[qi] : qi) * C + k0;
                for (int64_t c = 0; c < kn; c++) dst[c * nq + j] = src[c];
            }
        }
    }
}

/* Query i is row qrows[i] of `query` (row i when qrows is NULL), so callers need not gather them.
 * Returns 0 on success, -1 when the workspace cannot be allocated. sims may be NULL (argmax only).
 * probe_val[k] receives the similarity of query probe_q[k] at cell probe_cell[k] (cells ascending), for
 * callers that need a few values (SOC-geo candidates) rather than the whole Q x HW matrix.
 *
 * The map is walked 32 cells at a time: for each such column of the map, all channels meet all queries,
 * KB channel rows at a time, with the partial sums in a small buffer (Q x 32 floats, in L1 or L2), and the
 * finished sums go to the running argmax and to `sims`. The lines of the column PF_TILES columns ahead are
 * prefetched while a column is widened. The queries are packed once per call, channel-major per block and
 * query group (padding repeats the last query), so a register block reads its broadcasts from one small
 * contiguous array. */
__attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma")))
int soco_half_matmul_argmax(const uint16_t *map, int64_t C, int64_t HW, const float *query,
                            const int64_t *qrows, int64_t Q, float *sims, int64_t *best_idx, float *best_val,
                            const int64_t *probe_q, const int64_t *probe_cell, int64_t nprobe, float *probe_val) {
    if (Q <= 0) return 0;
    const int64_t ngroups = (Q + QB - 1) / QB, nblocks = C > 0 ? (C + KB - 1) / KB : 1;
    float *bv = (float *)malloc(sizeof(float) * 16 * Q);
    int32_t *bi = (int32_t *)malloc(sizeof(int32_t) * 16 * Q);
    float *pack = (float *)aligned_alloc(64, sizeof(float) * nblocks * ngroups * QB * KB);
    float *part = (float *)aligned_alloc(64, sizeof(float) * ngroups * QB * CB);
    if (!bv || !bi || !pack || !part) {
        free(bv); free(bi); free(pack); free(part);
        return -1;
    }
    const __m512 ninf = _mm512_set1_ps(-__builtin_inff());
    for (int64_t i = 0; i < Q; i++) {
        _mm512_storeu_ps(bv + 16 * i, ninf);
        _mm512_storeu_si512((void *)(bi + 16 * i), _mm512_set1_epi32(0x7fffffff));
    }
    pack_queries(pack, query, qrows, Q, C, QB, group_size);
    for (int64_t t0 = 0; t0 < PF_TILES * CB && t0 < HW; t0 += 32)  /* the first columns, before the walk */
        for (int64_t c = 0; c < C; c++) _mm_prefetch((const char *)(map + c * HW + t0), _MM_HINT_T1);
    float a[KB * CB] __attribute__((aligned(64)));  /* the current tile, widened once for all query groups */
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    int64_t next_probe = 0;

    for (int64_t t0 = 0; t0 < HW; t0 += CB) {
        const int64_t n = HW - t0 < CB ? HW - t0 : CB;
        const int full = n == CB;
        const __mmask16 m0 = lane_mask(n), m1 = lane_mask(n - 16);
        /* the last cell of the column PF_TILES ahead: its line, the earlier one was fetched a column ago */
        const int64_t pf = t0 + (PF_TILES + 1) * CB - 1 < HW ? (PF_TILES + 1) * CB - 1 : 0;
        for (int64_t b = 0; b < nblocks; b++) {
            const int64_t k0 = b * KB, kn = C - k0 < KB ? C - k0 : KB;
            if (full) widen(map + k0 * HW + t0, HW, kn, 1, m0, m1, a, pf);
            else widen(map + k0 * HW + t0, HW, kn, 0, m0, m1, a, pf);
            for (int64_t g0 = 0; g0 < Q; g0 += QB) {
                const int64_t nq = group_size(Q, g0), jn = Q - g0 < QB ? Q - g0 : QB;
                const float *q = pack + (b * ngroups * QB + g0) * KB;
                float *p = part + g0 * CB;
                if (nq == QB) tile12(a, kn, q, p, jn, b == 0);
                else if (nq == 8) tile8(a, kn, q, p, jn, b == 0);
                else tile4(a, kn, q, p, jn, b == 0);
            }
        }
        for (; next_probe < nprobe && probe_cell[next_probe] < t0 + n; next_probe++)
            probe_val[next_probe] = part[probe_q[next_probe] * CB + probe_cell[next_probe] - t0];
        const __m512i cell0 = _mm512_add_epi32(_mm512_set1_epi32((int32_t)t0), iota);
        const __m512i cell1 = _mm512_add_epi32(cell0, _mm512_set1_epi32(16));
        for (int64_t qi = 0; qi < Q; qi++) {
            const __m512 acc0 = _mm512_maskz_load_ps(m0, part + qi * CB);
            const __m512 acc1 = _mm512_maskz_load_ps(m1, part + qi * CB + 16);
            if (sims) {
                _mm512_mask_storeu_ps(sims + qi * HW + t0, m0, acc0);
                _mm512_mask_storeu_ps(sims + qi * HW + t0 + 16, m1, acc1);
            }
            __m512 v = _mm512_loadu_ps(bv + 16 * qi);
            __m512i ix = _mm512_loadu_si512((const void *)(bi + 16 * qi));
            /* strict > per lane: each lane meets its cells in increasing order, so ties keep the first */
            __mmask16 up = _mm512_mask_cmp_ps_mask(m0, acc0, v, _CMP_GT_OQ);
            v = _mm512_mask_blend_ps(up, v, acc0);
            ix = _mm512_mask_blend_epi32(up, ix, cell0);
            up = _mm512_mask_cmp_ps_mask(m1, acc1, v, _CMP_GT_OQ);
            v = _mm512_mask_blend_ps(up, v, acc1);
            ix = _mm512_mask_blend_epi32(up, ix, cell1);
            _mm512_storeu_ps(bv + 16 * qi, v);
            _mm512_storeu_si512((void *)(bi + 16 * qi), ix);
        }
    }
    for (int64_t i = 0; i < Q; i++) {
        const __m512 v = _mm512_loadu_ps(bv + 16 * i);
        const float mx = _mm512_reduce_max_ps(v);
        const __mmask16 eq = _mm512_cmp_ps_mask(v, _mm512_set1_ps(mx), _CMP_EQ_OQ);
        const __m512i ix = _mm512_loadu_si512((const void *)(bi + 16 * i));
        best_val[i] = mx;
        /* no value above -inf (all NaN): report cell 0 as torch.argmax would; callers reject NaN maps */
        best_idx[i] = (eq && mx > -__builtin_inff()) ? _mm512_mask_reduce_min_epi32(eq, ix) : 0;
    }
    free(bv);
    free(bi);
    free(pack);
    free(part);
    return 0;
}

/* ------------------------------------------------------------------------------------------------------
 * The same computation for CPUs with AVX2 but no AVX-512 (AMD Zen 1-3, Intel desktop parts): 8 lanes and
 * 16 vector registers, so columns of 16 cells and register blocks of 6 queries (12 accumulators). Sums,
 * argmax and ties are the same as above.
 */
#define QB2 6
#define CB2 16

int soco_half_matmul_supported_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
}

__attribute__((target("avx2,f16c,fma"), always_inline))
static inline void tile_avx2(const int nq, const float *a, int64_t kn, const float *q, float *p, int64_t jn,
                             int first) {
    __m256 acc0[QB2], acc1[QB2];
#pragma GCC unroll 6
    for (int j = 0; j < nq; j++) {
        const int load = !first && j < jn;
        acc0[j] = load ? _mm256_load_ps(p + j * CB2) : _mm256_setzero_ps();
        acc1[j] = load ? _mm256_load_ps(p + j * CB2 + 8) : _mm256_setzero_ps();
    }
    for (int64_t c = 0; c < kn; c++, a += CB2, q += nq) {
        const __m256 a0 = _mm256_load_ps(a);
        const __m256 a1 = _mm256_load_ps(a + 8);
#pragma GCC unroll 6
        for (int j = 0; j < nq; j++) {
            const __m256 b = _mm256_broadcast_ss(q + j);
            acc0[j] = _mm256_fmadd_ps(b, a0, acc0[j]);
            acc1[j] = _mm256_fmadd_ps(b, a1, acc1[j]);
        }
    }
#pragma GCC unroll 6
    for (int j = 0; j < nq; j++) {
        if (j < jn) {
            _mm256_store_ps(p + j * CB2, acc0[j]);
            _mm256_store_ps(p + j * CB2 + 8, acc1[j]);
        }
    }
}

#define TILE2_FN(NQ)                                                                                           \
    __attribute__((target("avx2,f16c,fma"), noinline)) static void tile2_##NQ(                                 \
        const float *a, int64_t kn, const float *q, float *p, int64_t jn, int first) {                         \
        tile_avx2(NQ, a, kn, q, p, jn, first);                                                                 \
    }
TILE2_FN(6)
TILE2_FN(4)
TILE2_FN(2)

/* Widen kn rows x 16 cells (n of them real; the others read 0) into `a`, prefetching each row pf cells on. */
__attribute__((target("avx2,f16c,fma"), always_inline))
static inline void widen_avx2(const uint16_t *row, int64_t HW, int64_t kn, int64_t n, float *a, int64_t pf) {
    for (int64_t c = 0; c < kn; c++, row += HW, a += CB2) {
        if (pf > 0) _mm_prefetch((const char *)(row + pf), _MM_HINT_T1);
        if (n == CB2) {
            _mm256_store_ps(a, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)row)));
            _mm256_store_ps(a + 8, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 8))));
        } else {
            for (int64_t k = 0; k < CB2; k++) a[k] = k < n ? _cvtsh_ss(row[k]) : 0.0f;
        }
    }
}

static inline int64_t group_size_avx2(int64_t Q, int64_t g0) {
    const int64_t r = Q - g0;
    return r >= 5 ? QB2 : (r >= 3 ? 4 : 2);
}

/* Same arguments and results as soco_half_matmul_argmax. */
__attribute__((target("avx2,f16c,fma")))
int soco_half_matmul_argmax_avx2(const uint16_t *map, int64_t C, int64_t HW, const float *query,
                                 const int64_t *qrows, int64_t Q, float *sims, int64_t *best_idx, float *best_val,
                                 const int64_t *probe_q, const int64_t *probe_cell, int64_t nprobe,
                                 float *probe_val) {
    if (Q <= 0) return 0;
    const int64_t ngroups = (Q + QB2 - 1) / QB2, nblocks = C > 0 ? (C + KB - 1) / KB : 1;
    float *bv = (float *)malloc(sizeof(float) * 8 * Q);
    int32_t *bi = (int32_t *)malloc(sizeof(int32_t) * 8 * Q);
    float *pack = (float *)aligned_alloc(64, sizeof(float) * nblocks * ngroups * QB2 * KB);
    float *part = (float *)aligned_alloc(64, sizeof(float) * ngroups * QB2 * CB2);
    if (!bv || !bi || !pack || !part) {
        free(bv); free(bi); free(pack); free(part);
        return -1;
    }
    for (int64_t i = 0; i < 8 * Q; i++) {
        bv[i] = -__builtin_inff();
        bi[i] = 0x7fffffff;
    }
    pack_queries(pack, query, qrows, Q, C, QB2, group_size_avx2);
    float a[KB * CB2] __attribute__((aligned(64)));
    const __m256i iota = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
    const __m256 ninf = _mm256_set1_ps(-__builtin_inff());
    int64_t next_probe = 0;

    for (int64_t t0 = 0; t0 < HW; t0 += CB2) {
        const int64_t n = HW - t0 < CB2 ? HW - t0 : CB2;
        const int64_t pf = t0 + (PF_TILES + 1) * CB2 - 1 < HW ? (PF_TILES + 1) * CB2 - 1 : 0;
        for (int64_t b = 0; b < nblocks; b++) {
            const int64_t k0 = b * KB, kn = C - k0 < KB ? C - k0 : KB;
            widen_avx2(map + k0 * HW + t0, HW, kn, n, a, pf);
            for (int64_t g0 = 0; g0 < Q; g0 += QB2) {
                const int64_t nq = group_size_avx2(Q, g0), jn = Q - g0 < QB2 ? Q - g0 : QB2;
                const float *q = pack + (b * ngroups * QB2 + g0) * KB;
                float *p = part + g0 * CB2;
                if (nq == QB2) tile2_6(a, kn, q, p, jn, b == 0);
                else if (nq == 4) tile2_4(a, kn, q, p, jn, b == 0);
                else tile2_2(a, kn, q, p, jn, b == 0);
            }
        }
        for (; next_probe < nprobe && probe_cell[next_probe] < t0 + n; next_probe++)
            probe_val[next_probe] = part[probe_q[next_probe] * CB2 + probe_cell[next_probe] - t0];
        const __m256i cell0 = _mm256_add_epi32(_mm256_set1_epi32((int32_t)t0), iota);
        const __m256i cell1 = _mm256_add_epi32(cell0, _mm256_set1_epi32(8));
        /* lanes past the last cell take no part: -inf never wins a strict > */
        const __m256 real0 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)n), iota));
        const __m256 real1 = _mm256_castsi256_ps(
            _mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)n), _mm256_add_epi32(iota, _mm256_set1_epi32(8))));
        for (int64_t qi = 0; qi < Q; qi++) {
            const __m256 acc0 = _mm256_blendv_ps(ninf, _mm256_load_ps(part + qi * CB2), real0);
            const __m256 acc1 = _mm256_blendv_ps(ninf, _mm256_load_ps(part + qi * CB2 + 8), real1);
            if (sims) {
                if (n == CB2) {
                    _mm256_storeu_ps(sims + qi * HW + t0, acc0);
                    _mm256_storeu_ps(sims + qi * HW + t0 + 8, acc1);
                } else {
                    for (int64_t k = 0; k < n; k++) sims[qi * HW + t0 + k] = part[qi * CB2 + k];
                }
            }
            __m256 v = _mm256_loadu_ps(bv + 8 * qi);
            __m256i ix = _mm256_loadu_si256((const __m256i *)(bi + 8 * qi));
            /* strict > per lane: each lane meets its cells in increasing order, so ties keep the first */
            __m256 up = _mm256_cmp_ps(acc0, v, _CMP_GT_OQ);
            v = _mm256_blendv_ps(v, acc0, up);
            ix = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(ix), _mm256_castsi256_ps(cell0), up));
            up = _mm256_cmp_ps(acc1, v, _CMP_GT_OQ);
            v = _mm256_blendv_ps(v, acc1, up);
            ix = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(ix), _mm256_castsi256_ps(cell1), up));
            _mm256_storeu_ps(bv + 8 * qi, v);
            _mm256_storeu_si256((__m256i *)(bi + 8 * qi), ix);
        }
    }
    for (int64_t i = 0; i < Q; i++) {
        float mx = -__builtin_inff();
        for (int k = 0; k < 8; k++) mx = bv[8 * i + k] > mx ? bv[8 * i + k] : mx;
        int32_t best = 0x7fffffff;
        for (int k = 0; k < 8; k++)
            if (bv[8 * i + k] == mx && bi[8 * i + k] < best) best = bi[8 * i + k];
        best_val[i] = mx;
        /* no value above -inf (all NaN): report cell 0 as torch.argmax would; callers reject NaN maps */
        best_idx[i] = mx > -__builtin_inff() ? best : 0;
    }
    free(bv);
    free(bi);
    free(pack);
    free(part);
    return 0;
}

/* Bilinear descriptors from an fp16 C x HW map: out[i, c] = sum_k weights[i, k] * map[c, cells[i, k]] for
 * n points with 4 corner cells each, summed in corner order in float32 (no fused multiply-add, like
 * grid_sample's kernel). Reads 4 values per point and channel instead of widening the whole map. */
#define PF_ROWS 4
__attribute__((target("f16c")))
void soco_half_corners(const uint16_t *map, int64_t C, int64_t HW, const int64_t *cells, const float *weights,
                       int64_t n, float *out) {
    for (int64_t c = 0; c < C; c++) {
        const uint16_t *row = map + c * HW;
        for (int64_t i = 0; i < n; i++) {
            const int64_t *k = cells + 4 * i;
            const float *wt = weights + 4 * i;
            if (c + PF_ROWS < C) {  /* the rows a few channels ahead: the corners' lines are scattered */
                _mm_prefetch((const char *)(row + PF_ROWS * HW + k[0]), _MM_HINT_T0);
                _mm_prefetch((const char *)(row + PF_ROWS * HW + k[2]), _MM_HINT_T0);
            }
            float v = wt[0] * _cvtsh_ss(row[k[0]]);
            v = v + wt[1] * _cvtsh_ss(row[k[1]]);
            v = v + wt[2] * _cvtsh_ss(row[k[2]]);
            v = v + wt[3] * _cvtsh_ss(row[k[3]]);
            out[i * C + c] = v;
        }
    }
}
