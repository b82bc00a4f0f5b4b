// Paged attention for CPU decode and speculative verify, fp32: a few query rows per sequence
// against its K/V read in place from the paged cache (included by cpu_decode_ops.cpp).
//
// Measured on the 2-core dev machine, 1 thread, SmolLM2's 9 query heads over 3 KV heads,
// through the Python launcher, side by side in one run (medians): the former per-row kernel
// (one horizontal sum per key, each head re-reading its K/V) against the grouped one below
// (the 3 heads x all verify rows that share a KV head score each K block and sum each V row
// together, 16 scores per transpose-add tree): 300 cached keys, 1 / 8 query rows 21.7 / 118
// -> 15.7 / 58.5 us; 1,000 keys 58.6 / 396 -> 41 / 178 us. benchmarks/cpu_attention.py
// compares with torch (gather the blocks, SDPA): 5-30x slower.

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "const_dispatch.h"

#ifdef __AVX512F__
#include <immintrin.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

inline float dot(const float* a, const float* b, int64_t n) {
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

#ifdef __AVX512F__
// exp for 16 lanes (Cephes expf: n = round(x / ln2), a degree-5 polynomial on the remainder,
// 2^n by vscalefps): Cephes gives ~1e-7 relative error on [-87, 0], where softmax's x - max lies.
inline __m512 exp16(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.f)));
    return _mm512_scalef_ps(p, n);
}

// softmax numerators in place (scores - max, exp), -> their sum
float exp_shifted(float* scores, int64_t n, float mx) {
    __m512 m = _mm512_set1_ps(mx), acc = _mm512_setzero_ps();
    int64_t t = 0;
    for (; t + 16 <= n; t += 16) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(scores + t), m));
        _mm512_storeu_ps(scores + t, e);
        acc = _mm512_add_ps(acc, e);
    }
    float sum = _mm512_reduce_add_ps(acc);
    for (; t < n; ++t) {
        scores[t] = expf(scores[t] - mx);
        sum += scores[t];
    }
    return sum;
}

#endif

#ifdef __AVX512F__
// Lane j of the result = the sum of a[j]'s 16 lanes: a transpose-and-add tree (45 shuffles and
// adds for 16 sums, against ~8 ops for each _mm512_reduce_add_ps). Lane j only ever adds a[j]'s
// own elements, in a fixed order, so a key's score does not depend on its place in a block.
inline __m512 reduce16(const __m512 (&a)[16]) {
    __m512 u[8], z[4], r[2];
    for (int j = 0; j < 8; ++j)  // per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3]
        u[j] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * j], a[2 * j + 1]), _mm512_unpackhi_ps(a[2 * j], a[2 * j + 1]));
    for (int j = 0; j < 4; ++j)  // per 128-bit lane: inputs 4j..4j+3's partial sums
        z[j] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * j], u[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(u[2 * j], u[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int j = 0; j < 2; ++j)  // 128-bit lanes summed pairwise
        r[j] = _mm512_add_ps(_mm512_shuffle_f32x4(z[2 * j], z[2 * j + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(z[2 * j], z[2 * j + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(r[0], r[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(r[0], r[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// Query vectors that share one KV head: nq of them, query j at qs[j], seeing keys 0..nk[j]-1.
struct QueryGroup {
    const float* qs[8];
    float* outs[8];
    int64_t nk[8];
    int nq;
};

// scores[j][t] = q_j . k_t (unscaled) for t < max nk, 16 keys a block: each K block is read
// from the cache once and stays in L1 while every query of the group scores it.
template <int NC>  // NC = D / 16 at compile time, so q, the 16 sums and V stay in registers
void group_scores(const QueryGroup& g, const float* kc, const int32_t* table, int64_t bs, int64_t tok_stride,
                  int64_t off, float* scores, int64_t ld) {
    int64_t n = 0;
    for (int j = 0; j < g.nq; ++j) n = g.nk[j] > n ? g.nk[j] : n;
    for (int64_t t0 = 0; t0 < n; t0 += 16) {
        const int valid = static_cast<int>(n - t0 < 16 ? n - t0 : 16);
        const float* k[16];
        for (int i = 0; i < valid; ++i)
            k[i] = kc + (static_cast<int64_t>(table[(t0 + i) / bs]) * bs + (t0 + i) % bs) * tok_stride + off;
        for (int i = valid; i < 16; ++i) k[i] = k[0];  // a tail block scores key 0 again, never stored
        for (int j = 0; j < g.nq; ++j) {
            __m512 qv[NC], acc[16];
#pragma GCC unroll 8
            for (int c = 0; c < NC; ++c) qv[c] = _mm512_loadu_ps(g.qs[j] + 16 * c);
#pragma GCC unroll 16
            for (int i = 0; i < 16; ++i) {
                acc[i] = _mm512_mul_ps(qv[0], _mm512_loadu_ps(k[i]));
#pragma GCC unroll 8
                for (int c = 1; c < NC; ++c) acc[i] = _mm512_fmadd_ps(qv[c], _mm512_loadu_ps(k[i] + 16 * c), acc[i]);
            }
            _mm512_mask_storeu_ps(scores + j * ld + t0, static_cast<__mmask16>((1u << valid) - 1u), reduce16(acc));
        }
    }
}

// out_j = sum_{t < nk[j]} p_j[t] v_t, up to 4 queries at a time sharing each loaded V row;
// every query's sum runs over t in order, whatever the group (so rows match across verify widths).
template <int NC>
void group_values(const QueryGroup& g, const float* vc, const int32_t* table, int64_t bs, int64_t tok_stride,
                  int64_t off, const float* p, int64_t ld) {
    constexpr int per = NC <= 4 ? 4 : 2;
    for (int j0 = 0; j0 < g.nq; j0 += per) {
        const int m = g.nq - j0 < per ? g.nq - j0 : per;
        __m512 acc[per][NC];
        int64_t n = 0, lo = INT64_MAX;  // keys every query of the block sees: 0..lo-1
        const float* pj[per];
#pragma GCC unroll 4
        for (int j = 0; j < per; ++j) {
            pj[j] = p + (j0 + (j < m ? j : 0)) * ld;  // a missing query repeats the first one, never stored
            const int64_t nk = g.nk[j0 + (j < m ? j : 0)];
            n = nk > n ? nk : n;
            lo = nk < lo ? nk : lo;
#pragma GCC unroll 8
            for (int c = 0; c < NC; ++c) acc[j][c] = _mm512_setzero_ps();
        }
        for (int64_t t = 0; t < n; ++t) {
            const float* v = vc + (static_cast<int64_t>(table[t / bs]) * bs + t % bs) * tok_stride + off;
            __m512 vv[NC];
#pragma GCC unroll 8
            for (int c = 0; c < NC; ++c) vv[c] = _mm512_loadu_ps(v + 16 * c);
#pragma GCC unroll 4
            for (int j = 0; j < per; ++j) {
                if (t >= lo && t >= g.nk[j0 + (j < m ? j : 0)]) continue;  // causal: row j stops at nk[j]
                const __m512 b = _mm512_set1_ps(pj[j][t]);
#pragma GCC unroll 8
                for (int c = 0; c < NC; ++c) acc[j][c] = _mm512_fmadd_ps(b, vv[c], acc[j][c]);
            }
        }
        for (int j = 0; j < m; ++j)
            for (int c = 0; c < NC; ++c) _mm512_storeu_ps(g.outs[j0 + j] + 16 * c, acc[j][c]);
    }
}

template <int NC>
void attend_group(const QueryGroup& g, const float* kc, const float* vc, const int32_t* table, int64_t bs,
                  int64_t hk, int64_t h, float scale, float* scores, int64_t ld) {
    const int64_t tok_stride = hk * NC * 16;
    group_scores<NC>(g, kc, table, bs, tok_stride, h * NC * 16, scores, ld);
    for (int j = 0; j < g.nq; ++j) {
        float* s = scores + j * ld;
        float mx = -INFINITY;
        for (int64_t t = 0; t < g.nk[j]; ++t) {
            s[t] *= scale;
            mx = s[t] > mx ? s[t] : mx;
        }
        const float inv = 1.f / exp_shifted(s, g.nk[j], mx);
        for (int64_t t = 0; t < g.nk[j]; ++t) s[t] *= inv;
    }
    group_values<NC>(g, vc, table, bs, tok_stride, h * NC * 16, scores, ld);
}
#endif

// One query row against keys 0..n_keys-1 of a paged sequence, scalar (no AVX-512, or a head
// size the grouped kernel does not take): scores, then the softmax-weighted V sum.
void attend_row(const float* q, const float* kc, const float* vc, const int32_t* table, int64_t n_keys,
                int64_t bs, int64_t hk, int64_t h, int64_t d, float scale, float* scores, float* out) {
    const int64_t tok_stride = hk * d;  // [NB, BS, Hk, D]
    for (int64_t t = 0; t < n_keys; ++t)
        scores[t] = dot(q, kc + (static_cast<int64_t>(table[t / bs]) * bs + t % bs) * tok_stride + h * d, d);
    float mx = -INFINITY;
    for (int64_t t = 0; t < n_keys; ++t) {
        scores[t] *= scale;
        mx = scores[t] > mx ? scores[t] : mx;
    }
    float denom = 0.f;
    for (int64_t t = 0; t < n_keys; ++t) {
        scores[t] = expf(scores[t] - mx);
        denom += scores[t];
    }
    for (int64_t i = 0; i < d; ++i) out[i] = 0.f;
    for (int64_t t = 0; t < n_keys; ++t) {
        const float* v = vc + (static_cast<int64_t>(table[t / bs]) * bs + t % bs) * tok_stride + h * d;
        float p = scores[t] / denom;
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) out[i] += p * v[i];
    }
}

}  // namespace

extern "C" {

// q [T, Hq, D]; sequence b owns query rows cu[b]..cu[b+1]-1, the last ones of its ctx[b]
// tokens, each attending causally (row i of n sees keys 0..ctx-n+i). out [T, Hq, D].
// Work item: one sequence, one KV head, up to 8 of the query vectors (rows x the heads of its
// GQA group) that read that head's K/V; at 1 row the group's 3 heads share one K/V pass.
void parley_paged_attention(const float* q, const float* kc, const float* vc, const int32_t* tables,
                            const int32_t* cu, const int32_t* ctx, float* out, int64_t B, int64_t max_blocks,
                            int64_t bs, int64_t hq, int64_t hk, int64_t d, float scale, int threads) {
    int64_t max_ctx = 0;
    for (int64_t b = 0; b < B; ++b) max_ctx = ctx[b] > max_ctx ? ctx[b] : max_ctx;
    const int64_t group = hq / hk;
#ifdef __AVX512F__
    if (d % 16 == 0 && d <= 128) {
        constexpr int QC = 8;
        int64_t* first = static_cast<int64_t*>(malloc(sizeof(int64_t) * (B + 1)));  // items before sequence b
        first[0] = 0;
        for (int64_t b = 0; b < B; ++b) first[b + 1] = first[b] + hk * (((cu[b + 1] - cu[b]) * group + QC - 1) / QC);
        const int64_t ld = (max_ctx + 15) / 16 * 16;
#pragma omp parallel num_threads(threads > 0 ? threads : 1) if (threads > 1)
        {
            float* scores = static_cast<float*>(malloc(sizeof(float) * QC * (ld > 0 ? ld : 16)));
#pragma omp for schedule(static)
            for (int64_t it = 0; it < first[B]; ++it) {
                int64_t b = 0;
                while (first[b + 1] <= it) ++b;
                const int64_t n = cu[b + 1] - cu[b], chunks = (n * group + QC - 1) / QC;
                const int64_t h = (it - first[b]) / chunks, j0 = (it - first[b]) % chunks * QC;
                QueryGroup g;
                g.nq = static_cast<int>(n * group - j0 < QC ? n * group - j0 : QC);
                for (int j = 0; j < g.nq; ++j) {
                    const int64_t i = (j0 + j) / group, head = h * group + (j0 + j) % group;
                    const int64_t r = (cu[b] + i) * hq + head;
                    g.qs[j] = q + r * d;
                    g.outs[j] = out + r * d;
                    g.nk[j] = ctx[b] - n + i + 1;
                }
                const int32_t* tb = tables + b * max_blocks;
                const_dispatch_1_to_8(d / 16, [&](auto nc) {  // head sizes 16..128
                    attend_group<decltype(nc)::value>(g, kc, vc, tb, bs, hk, h, scale, scores, ld);
                });
            }
            free(scores);
        }
        free(first);
        return;
    }
#endif
    const int64_t n_rows = static_cast<int64_t>(cu[B]) * hq;
#pragma omp parallel num_threads(threads > 0 ? threads : 1) if (threads > 1)
    {
        float* scores = static_cast<float*>(malloc(sizeof(float) * (max_ctx > 0 ? max_ctx : 1)));
#pragma omp for schedule(static)
        for (int64_t r = 0; r < n_rows; ++r) {
            int64_t tok = r / hq, head = r % hq;
            int64_t b = 0;
            while (cu[b + 1] <= tok) ++b;
            int64_t n = cu[b + 1] - cu[b], i = tok - cu[b];
            int64_t n_keys = ctx[b] - n + i + 1;
            attend_row(q + r * d, kc, vc, tables + b * max_blocks, n_keys, bs, hk, head / group, d, scale,
                       scores, out + r * d);
        }
        free(scores);
    }
}

}  // extern "C"
