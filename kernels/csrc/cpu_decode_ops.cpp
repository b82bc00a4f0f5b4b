// The per-layer glue of CPU decode, fp32, one call per op instead of 5-15 torch ops.
//
// At batch 1 a decode step runs ~60 small torch ops per layer, ~3 us each in eager mode:
// measured on the 2-core dev machine, 1 thread, SmolLM2 shapes, per layer: rms_norm with
// residual 10 us, rotary 51 us, KV store 31 us, SDPA decode attention 70 us at 100 cached
// tokens and 197 us at 400 (it gathers the paged K/V into a contiguous copy first). These
// kernels read the paged cache in place and touch each byte once; the attention is in
// cpu_paged_attention.cpp (included here, so this library exports it too).
//
// Built and loaded by kernels/cpu_native.py (ctypes, plain C ABI). Layouts: every tensor is
// row-major; strides (in elements) are passed where the caller hands views of a fused qkv.

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "cpu_paged_attention.cpp"  // also defines dot() in the anonymous namespace

extern "C" {

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
