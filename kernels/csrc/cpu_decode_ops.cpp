// The per-layer glue of CPU decode, fp32, one call per op instead of 5-15 torch ops.
//
// At batch 1 a decode step runs ~60 small torch ops per layer, ~3 us each in eager mode:
// measured on the 2-core dev machine, 1 thread, SmolLM2 shapes, per layer: rms_norm with
// residual 10 us, rotary 51 us, KV store 31 us, SDPA decode attention 70 us at 100 cached
// tokens and 197 us at 400 (it gathers the paged K/V into a contiguous copy first). These
// kernels read the paged cache in place and touch each byte once. Attention, 9 query heads,
// 500 cached keys: 31 us for 1 query row, 141 us for 6 (torch SDPA: 135 and 226 us).
//
// Built and loaded by kernels/cpu_native.py (ctypes, plain C ABI). Layouts: every tensor is
// row-major; strides (in elements) are passed where the caller hands views of a fused qkv.

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

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
// scores[t] = q . k_t for 4 keys at a time: 4 independent FMA chains and reductions in flight
// instead of one latency-bound chain per key.
void scores_avx512(const float* q, const float* kc, const int32_t* table, int64_t n_keys, int64_t bs,
                   int64_t tok_stride, int64_t off, int64_t d, float* scores) {
    const int64_t nc = d / 16;
    __m512 qv[8];
    for (int64_t c = 0; c < nc; ++c) qv[c] = _mm512_loadu_ps(q + 16 * c);
    int64_t t = 0;
    for (; t + 4 <= n_keys; t += 4) {
        const float* k[4];
        __m512 acc[4];
        for (int j = 0; j < 4; ++j) {
            k[j] = kc + (static_cast<int64_t>(table[(t + j) / bs]) * bs + (t + j) % bs) * tok_stride + off;
            acc[j] = _mm512_mul_ps(qv[0], _mm512_loadu_ps(k[j]));
        }
        for (int64_t c = 1; c < nc; ++c)
            for (int j = 0; j < 4; ++j) acc[j] = _mm512_fmadd_ps(qv[c], _mm512_loadu_ps(k[j] + 16 * c), acc[j]);
        for (int j = 0; j < 4; ++j) scores[t + j] = _mm512_reduce_add_ps(acc[j]);
    }
    for (; t < n_keys; ++t)
        scores[t] = dot(q, kc + (static_cast<int64_t>(table[t / bs]) * bs + t % bs) * tok_stride + off, d);
}

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

// out = sum_t p[t] v_t with the d <= 128 accumulators in registers, two keys in flight.
void weighted_v_avx512(const float* p, const float* vc, const int32_t* table, int64_t n_keys, int64_t bs,
                       int64_t tok_stride, int64_t off, int64_t d, float* out) {
    const int64_t nc = d / 16;
    __m512 a[8], b[8];
    for (int64_t c = 0; c < nc; ++c) a[c] = b[c] = _mm512_setzero_ps();
    int64_t t = 0;
    for (; t + 2 <= n_keys; t += 2) {
        const float* v0 = vc + (static_cast<int64_t>(table[t / bs]) * bs + t % bs) * tok_stride + off;
        const float* v1 = vc + (static_cast<int64_t>(table[(t + 1) / bs]) * bs + (t + 1) % bs) * tok_stride + off;
        __m512 p0 = _mm512_set1_ps(p[t]), p1 = _mm512_set1_ps(p[t + 1]);
        for (int64_t c = 0; c < nc; ++c) {
            a[c] = _mm512_fmadd_ps(p0, _mm512_loadu_ps(v0 + 16 * c), a[c]);
            b[c] = _mm512_fmadd_ps(p1, _mm512_loadu_ps(v1 + 16 * c), b[c]);
        }
    }
    if (t < n_keys) {
        const float* v0 = vc + (static_cast<int64_t>(table[t / bs]) * bs + t % bs) * tok_stride + off;
        __m512 p0 = _mm512_set1_ps(p[t]);
        for (int64_t c = 0; c < nc; ++c) a[c] = _mm512_fmadd_ps(p0, _mm512_loadu_ps(v0 + 16 * c), a[c]);
    }
    for (int64_t c = 0; c < nc; ++c) _mm512_storeu_ps(out + 16 * c, _mm512_add_ps(a[c], b[c]));
}
#endif

// One query row against keys 0..n_keys-1 of a paged sequence: two passes (scores, then the
// softmax-weighted V sum) over K/V read in place from their blocks.
void attend_row(const float* q, const float* kc, const float* vc, const int32_t* table, int64_t n_keys,
                int64_t bs, int64_t hk, int64_t h, int64_t d, float scale, float* scores, float* out) {
    const int64_t tok_stride = hk * d;  // [NB, BS, Hk, D]
#ifdef __AVX512F__
    if (d % 16 == 0 && d <= 128) {
        scores_avx512(q, kc, table, n_keys, bs, tok_stride, h * d, d, scores);
    } else
#endif
    {
        for (int64_t t = 0; t < n_keys; ++t)
            scores[t] = dot(q, kc + (static_cast<int64_t>(table[t / bs]) * bs + t % bs) * tok_stride + h * d, d);
    }
    float mx = -INFINITY;
    for (int64_t t = 0; t < n_keys; ++t) {
        scores[t] *= scale;
        mx = scores[t] > mx ? scores[t] : mx;
    }
#ifdef __AVX512F__
    if (d % 16 == 0 && d <= 128) {
        const float inv = 1.f / exp_shifted(scores, n_keys, mx);
        for (int64_t t = 0; t < n_keys; ++t) scores[t] *= inv;
        weighted_v_avx512(scores, vc, table, n_keys, bs, tok_stride, h * d, d, out);
        return;
    }
#endif
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
void parley_paged_attention(const float* q, const float* kc, const float* vc, const int32_t* tables,
                            const int32_t* cu, const int32_t* ctx, float* out, int64_t B, int64_t max_blocks,
                            int64_t bs, int64_t hq, int64_t hk, int64_t d, float scale, int threads) {
    int64_t max_ctx = 0;
    for (int64_t b = 0; b < B; ++b) max_ctx = ctx[b] > max_ctx ? ctx[b] : max_ctx;
    const int64_t group = hq / hk;
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

// q [T, Hq, D], k [T, Hk, D] as views (row strides sq, sk; heads contiguous at stride D);
// rotate-half RoPE at positions, cos/sin [P, D/2]; results into contiguous qo, ko.
void parley_rotary(const float* q, const float* k, const int64_t* pos, const float* cos_t, const float* sin_t,
                   float* qo, float* ko, int64_t T, int64_t hq, int64_t hk, int64_t d, int64_t sq, int64_t sk) {
    const int64_t half = d / 2;
    for (int64_t t = 0; t < T; ++t) {
        const float* c = cos_t + pos[t] * half;
        const float* s = sin_t + pos[t] * half;
        for (int64_t h = 0; h < hq + hk; ++h) {
            const float* x = h < hq ? q + t * sq + h * d : k + t * sk + (h - hq) * d;
            float* o = h < hq ? qo + (t * hq + h) * d : ko + (t * hk + h - hq) * d;
#pragma omp simd
            for (int64_t i = 0; i < half; ++i) {
                float x1 = x[i], x2 = x[i + half];
                o[i] = x1 * c[i] - x2 * s[i];
                o[i + half] = x2 * c[i] + x1 * s[i];
            }
        }
    }
}

// k, v [T, Hk*D] rows at strides sk, sv into caches [NB*BS, Hk*D] at slots (-1: skip).
void parley_store_kv(const float* k, const float* v, float* kc, float* vc, const int64_t* slots, int64_t T,
                     int64_t row, int64_t sk, int64_t sv) {
    for (int64_t t = 0; t < T; ++t) {
        if (slots[t] < 0) continue;
        float* kd = kc + slots[t] * row;
        float* vd = vc + slots[t] * row;
        const float* ks = k + t * sk;
        const float* vs = v + t * sv;
        for (int64_t i = 0; i < row; ++i) { kd[i] = ks[i]; vd[i] = vs[i]; }
    }
}

// out = rms_norm(x + residual) * w; residual_out = x + residual (residual may be null: then
// residual_out is unused). All [T, D] contiguous.
void parley_rms_norm(const float* x, const float* residual, const float* w, float* out, float* residual_out,
                     int64_t T, int64_t d, float eps) {
    for (int64_t t = 0; t < T; ++t) {
        const float* xr = x + t * d;
        float* o = out + t * d;
        const float* src = xr;
        if (residual) {
            float* ro = residual_out + t * d;
            const float* rr = residual + t * d;
#pragma omp simd
            for (int64_t i = 0; i < d; ++i) ro[i] = xr[i] + rr[i];
            src = ro;
        }
        float ss = dot(src, src, d);
        float inv = 1.f / sqrtf(ss / static_cast<float>(d) + eps);
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) o[i] = w[i] * (src[i] * inv);
    }
}
}
