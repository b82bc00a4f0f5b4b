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

#if defined(__AVX512F__) || defined(__AVX2__)
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

// The grouped kernel below is written once over a vector type: Vec16 (AVX-512) or Vec8 (AVX2 +
// FMA). On an AVX2-only EPYC the scalar per-row path took 155 / 740 us for 1 / 6 query rows
// over 300 keys (9 query, 3 KV heads, d 64), so a 6-row verify pass spent as long in attention
// as in all its matmuls (benchmarks/cpu_attention.py).
#if defined(__AVX512F__)
#define PARLEY_ATTENTION_SIMD 1
struct Vec16 {
    using T = __m512;
    static constexpr int L = 16;
    static T load(const float* p) { return _mm512_loadu_ps(p); }
    static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
    static void store_first(float* p, T v, int n) { _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1u), v); }
    static T zero() { return _mm512_setzero_ps(); }
    static T set1(float x) { return _mm512_set1_ps(x); }
    static T add(T a, T b) { return _mm512_add_ps(a, b); }
    static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
    static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
    static T fmadd(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
    static T fnmadd(T a, T b, T c) { return _mm512_fnmadd_ps(a, b, c); }
    static T max(T a, T b) { return _mm512_max_ps(a, b); }
    static T min(T a, T b) { return _mm512_min_ps(a, b); }
    static T div(T a, T b) { return _mm512_div_ps(a, b); }
    static T round(T x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    static T pow2(T p, T n) { return _mm512_scalef_ps(p, n); }  // p * 2^n
    static float sum(T v) { return _mm512_reduce_add_ps(v); }
    // Lane j of the result = the sum of a[j]'s 16 lanes: a transpose-and-add tree (45 shuffles and
    // adds for 16 sums, against ~8 ops for each _mm512_reduce_add_ps). Lane j only ever adds a[j]'s
    // own elements, in a fixed order, so a key's score does not depend on its place in a block.
    static T reduce(const T (&a)[16]) {
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
};
using Vec = Vec16;
#elif defined(__AVX2__) && defined(__FMA__)
#define PARLEY_ATTENTION_SIMD 1
struct Vec8 {
    using T = __m256;
    static constexpr int L = 8;
    static T load(const float* p) { return _mm256_loadu_ps(p); }
    static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
    static void store_first(float* p, T v, int n) {
        _mm256_maskstore_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), v);
    }
    static T zero() { return _mm256_setzero_ps(); }
    static T set1(float x) { return _mm256_set1_ps(x); }
    static T add(T a, T b) { return _mm256_add_ps(a, b); }
    static T sub(T a, T b) { return _mm256_sub_ps(a, b); }
    static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
    static T fmadd(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
    static T fnmadd(T a, T b, T c) { return _mm256_fnmadd_ps(a, b, c); }
    static T max(T a, T b) { return _mm256_max_ps(a, b); }
    static T min(T a, T b) { return _mm256_min_ps(a, b); }
    static T div(T a, T b) { return _mm256_div_ps(a, b); }
    static T round(T x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    static T pow2(T p, T n) {  // p * 2^n by the exponent bits; exp's n lies in [-126, 0]
        const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
        return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    }
    static float sum(T v) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
    }
    // Lane j = the sum of a[j]'s 8 lanes, ((e0+e1)+(e2+e3))+((e4+e5)+(e6+e7)) for every j.
    static T reduce(const T (&a)[8]) {
        const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
        const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
        return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31));
    }
};
using Vec = Vec8;
#endif

#ifdef PARLEY_ATTENTION_SIMD
constexpr int L = Vec::L;
using V = Vec::T;

// exp for L lanes (Cephes expf: n = round(x / ln2), a degree-5 polynomial on the remainder,
// times 2^n): Cephes gives ~1e-7 relative error on [-87, 0], where softmax's x - max lies.
inline V exp_lanes(V x) {
    x = Vec::max(x, Vec::set1(-87.f));
    V n = Vec::round(Vec::mul(x, Vec::set1(1.44269504088896341f)));
    V r = Vec::fnmadd(n, Vec::set1(0.693359375f), x);
    r = Vec::fnmadd(n, Vec::set1(-2.12194440e-4f), r);
    V p = Vec::set1(1.9875691500e-4f);
    p = Vec::fmadd(p, r, Vec::set1(1.3981999507e-3f));
    p = Vec::fmadd(p, r, Vec::set1(8.3334519073e-3f));
    p = Vec::fmadd(p, r, Vec::set1(4.1665795894e-2f));
    p = Vec::fmadd(p, r, Vec::set1(1.6666665459e-1f));
    p = Vec::fmadd(p, r, Vec::set1(5.0000001201e-1f));
    p = Vec::fmadd(Vec::mul(p, r), r, Vec::add(r, Vec::set1(1.f)));
    return Vec::pow2(p, n);
}

// softmax numerators in place (scores - max, exp), -> their sum
float exp_shifted(float* scores, int64_t n, float mx) {
    V m = Vec::set1(mx), acc = Vec::zero();
    int64_t t = 0;
    for (; t + L <= n; t += L) {
        V e = exp_lanes(Vec::sub(Vec::load(scores + t), m));
        Vec::store(scores + t, e);
        acc = Vec::add(acc, e);
    }
    float sum = Vec::sum(acc);
    for (; t < n; ++t) {
        scores[t] = expf(scores[t] - mx);
        sum += scores[t];
    }
    return sum;
}

// Query vectors that share one KV head: nq of them, query j at qs[j], seeing keys 0..nk[j]-1.
struct QueryGroup {
    const float* qs[8];
    float* outs[8];
    int64_t nk[8];
    int nq;
};

// scores[j][t] = q_j . k_t (unscaled) for t < max nk, L keys a block: each K block is read
// from the cache once and stays in L1 while every query of the group scores it.
template <int NC>  // NC = D / L at compile time, so q, the L sums and V stay in registers
void group_scores(const QueryGroup& g, const float* kc, const int32_t* table, int64_t bs, int64_t tok_stride,
                  int64_t off, float* scores, int64_t ld) {
    int64_t n = 0;
    for (int j = 0; j < g.nq; ++j) n = g.nk[j] > n ? g.nk[j] : n;
    for (int64_t t0 = 0; t0 < n; t0 += L) {
        const int valid = static_cast<int>(n - t0 < L ? n - t0 : L);
        const float* k[L];
        for (int i = 0; i < valid; ++i)
            k[i] = kc + (static_cast<int64_t>(table[(t0 + i) / bs]) * bs + (t0 + i) % bs) * tok_stride + off;
        for (int i = valid; i < L; ++i) k[i] = k[0];  // a tail block scores key 0 again, never stored
        for (int j = 0; j < g.nq; ++j) {
            V qv[NC], acc[L];
#pragma GCC unroll 8
            for (int c = 0; c < NC; ++c) qv[c] = Vec::load(g.qs[j] + L * c);
#pragma GCC unroll 16
            for (int i = 0; i < L; ++i) {
                acc[i] = Vec::mul(qv[0], Vec::load(k[i]));
#pragma GCC unroll 8
                for (int c = 1; c < NC; ++c) acc[i] = Vec::fmadd(qv[c], Vec::load(k[i] + L * c), acc[i]);
            }
            Vec::store_first(scores + j * ld + t0, Vec::reduce(acc), valid);
        }
    }
}

// out_j = sum_{t < nk[j]} p_j[t] v_t, up to `per` queries at a time sharing each loaded V row
// (per * NC accumulators + NC V vectors fit the register file); every query's sum runs over t
// in order, whatever the group (so rows match across verify widths).
template <int NC>
void group_values(const QueryGroup& g, const float* vc, const int32_t* table, int64_t bs, int64_t tok_stride,
                  int64_t off, const float* p, int64_t ld) {
    constexpr int per = L == 16 ? (NC <= 4 ? 4 : 2) : (NC <= 4 ? 2 : 1);
    for (int j0 = 0; j0 < g.nq; j0 += per) {
        const int m = g.nq - j0 < per ? g.nq - j0 : per;
        V acc[per][NC];
        int64_t n = 0, lo = INT64_MAX;  // keys every query of the block sees: 0..lo-1
        const float* pj[per];
#pragma GCC unroll 4
        for (int j = 0; j < per; ++j) {
            pj[j] = p + (j0 + (j < m ? j : 0)) * ld;  // a missing query repeats the first one, never stored
            const int64_t nk = g.nk[j0 + (j < m ? j : 0)];
            n = nk > n ? nk : n;
            lo = nk < lo ? nk : lo;
#pragma GCC unroll 8
            for (int c = 0; c < NC; ++c) acc[j][c] = Vec::zero();
        }
        for (int64_t t = 0; t < n; ++t) {
            const float* v = vc + (static_cast<int64_t>(table[t / bs]) * bs + t % bs) * tok_stride + off;
            V vv[NC];
#pragma GCC unroll 8
            for (int c = 0; c < NC; ++c) vv[c] = Vec::load(v + L * c);
#pragma GCC unroll 4
            for (int j = 0; j < per; ++j) {
                if (t >= lo && t >= g.nk[j0 + (j < m ? j : 0)]) continue;  // causal: row j stops at nk[j]
                const V b = Vec::set1(pj[j][t]);
#pragma GCC unroll 8
                for (int c = 0; c < NC; ++c) acc[j][c] = Vec::fmadd(b, vv[c], acc[j][c]);
            }
        }
        for (int j = 0; j < m; ++j)
            for (int c = 0; c < NC; ++c) Vec::store(g.outs[j0 + j] + L * c, acc[j][c]);
    }
}

template <int NC>
void attend_group(const QueryGroup& g, const float* kc, const float* vc, const int32_t* table, int64_t bs,
                  int64_t hk, int64_t h, float scale, float* scores, int64_t ld) {
    const int64_t tok_stride = hk * NC * L;
    group_scores<NC>(g, kc, table, bs, tok_stride, h * NC * L, scores, ld);
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
    group_values<NC>(g, vc, table, bs, tok_stride, h * NC * L, scores, ld);
}
#endif

// One query row against keys 0..n_keys-1 of a paged sequence, scalar (no AVX2, or a head
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
#ifdef PARLEY_ATTENTION_SIMD
    if (d % L == 0 && d <= 8 * L) {  // head sizes 16..128 (AVX-512), 8..64 (AVX2)
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
                const_dispatch_1_to_8(d / L, [&](auto nc) {
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
