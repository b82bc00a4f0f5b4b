// One whole Llama decoder layer for a CPU step (decode, verify or prefill rows) in one call.
//
// The same kernels as the per-op path (cpu_gemv.cpp, cpu_decode_ops.cpp), chained in C++:
// the per-op path pays ~80 us of Python and torch dispatch per layer at batch 1 (2.4 ms of a
// 19 ms fp32 step of SmolLM2-135M on the dev machine), which this saves. Numerically it is
// the per-op path except silu, whose exp here differs from torch's by an ulp or two. Prefill
// takes it too (any T): a row's result never depends on how many rows share the call.
//
// Built and loaded by kernels/cpu_native.py; llm_engine/cpu_layer.py fills the structs.

#include "cpu_decode_ops.cpp"
#include "cpu_gemv.cpp"

namespace {

// act[i] = silu(g[i]) * g[I + i] for one row. Vectorized with the attention's exp (Cephes,
// ~1e-7 relative): glibc's scalar expf cost ~2 ms a layer for a 251-token prefill (torch's
// vectorized silu: 0.5 ms). exp's argument is capped at 88 (below exp's overflow): for
// g < -88, g / (1 + e^-g) is 0 to within fp32 either way. Every element's arithmetic depends
// only on its value and its column (lanes vs the scalar tail), never on the row count.
void silu_mul_row(const float* g, float* act, int64_t I) {
    int64_t i = 0;
#ifdef PARLEY_ATTENTION_SIMD
    const V one = Vec::set1(1.f), cap = Vec::set1(88.f), zero = Vec::zero();
    for (; i + L <= I; i += L) {
        const V x = Vec::load(g + i);
        const V e = exp_lanes(Vec::min(Vec::sub(zero, x), cap));
        Vec::store(act + i, Vec::mul(Vec::div(x, Vec::add(one, e)), Vec::load(g + I + i)));
    }
#endif
    for (; i < I; ++i) act[i] = g[i] / (1.f + expf(-g[i])) * g[I + i];
}

}  // namespace

extern "C" {

struct ParleyLinear {  // row-major [out, in]: fp32, bf16 bits, int8 with scale/wsum [out],
    const void* w;      // or q4 nibbles [out, in / 2] with scale = fp16 (d, m) [out, in / 32, 2]
    const void* scale;
    const int32_t* wsum;
};

struct ParleyLayerWeights {  // one layer
    ParleyLinear qkv, o, gate_up, down;
    const float* b_qkv;       // [(hq + 2 hk) d] or null
    const float* input_norm;  // [H]
    const float* post_norm;   // [H]
    int64_t wtype;            // 0: fp32, 1: bf16, 2: int8, 3: q4 (all four linears alike)
    int64_t hidden, hq, hk, d, inter;
    float eps, scale;
};

struct ParleyStep {  // this step's attention metadata (see llm_engine.attention_metadata)
    const int64_t* positions;  // [T]
    const int64_t* slots;      // [T]
    const float* cos;          // [P, d/2]
    const float* sin;
    const int32_t* tables;  // [B, max_blocks]
    const int32_t* cu;      // [B + 1]
    const int32_t* ctx;     // [B]
    int64_t T, B, max_blocks, block_size;
    int64_t threads;
};

static void layer_gemv(const ParleyLayerWeights* L, const float* x, const ParleyLinear& lin, float* y, int64_t M,
                       int64_t N, int64_t K, int threads) {
    if (L->wtype == 3)
        parley_gemv_q4(x, static_cast<const uint8_t*>(lin.w), static_cast<const uint16_t*>(lin.scale), y, M, N, K,
                       threads);
    else if (L->wtype == 2)
        parley_gemv_i8(x, static_cast<const int8_t*>(lin.w), static_cast<const float*>(lin.scale), lin.wsum, y, M,
                       N, K, threads);
    else if (L->wtype == 1)
        parley_gemv_bf16(x, static_cast<const uint16_t*>(lin.w), y, M, N, K, threads);
    else
        parley_gemv_f32(x, static_cast<const float*>(lin.w), y, M, N, K, threads);
}

// h [T, H] in; residual [T, H] or null (first layer); h_out, res_out [T, H] out.
void parley_decode_layer(const ParleyLayerWeights* L, const ParleyStep* S, float* kc, float* vc, const float* h,
                         const float* residual, float* h_out, float* res_out) {
    const int64_t T = S->T, H = L->hidden, hq = L->hq, hk = L->hk, d = L->d, I = L->inter;
    const int64_t qkv_n = (hq + 2 * hk) * d;
    const int threads = static_cast<int>(S->threads);
    float* buf = static_cast<float*>(malloc(sizeof(float) * T * (3 * H + qkv_n + 2 * hq * d + hk * d + 3 * I)));
    float* normed = buf;                 // [T, H]
    float* r1 = normed + T * H;          // [T, H]: the residual stream entering attention
    float* qkv = r1 + T * H;             // [T, qkv_n]
    float* q = qkv + T * qkv_n;          // [T, hq, d] rotated
    float* k = q + T * hq * d;           // [T, hk, d] rotated
    float* o = k + T * hk * d;           // [T, hq, d]
    float* h2 = o + T * hq * d;          // [T, H]
    float* gu = h2 + T * H;              // [T, 2I]
    float* act = gu + T * 2 * I;         // [T, I]

    parley_rms_norm(h, residual, L->input_norm, normed, r1, T, H, L->eps);
    const float* res1 = residual ? r1 : h;
    layer_gemv(L, normed, L->qkv, qkv, T, qkv_n, H, threads);
    if (L->b_qkv)
        for (int64_t t = 0; t < T; ++t)
            for (int64_t i = 0; i < qkv_n; ++i) qkv[t * qkv_n + i] += L->b_qkv[i];
    parley_rotary(qkv, qkv + hq * d, S->positions, S->cos, S->sin, q, k, T, hq, hk, d, qkv_n, qkv_n);
    parley_store_kv(k, qkv + (hq + hk) * d, kc, vc, S->slots, T, hk * d, hk * d, qkv_n);
    parley_paged_attention(q, kc, vc, S->tables, S->cu, S->ctx, o, S->B, S->max_blocks, S->block_size, hq, hk, d,
                           L->scale, threads);
    layer_gemv(L, o, L->o, h2, T, H, hq * d, threads);
    parley_rms_norm(h2, res1, L->post_norm, normed, res_out, T, H, L->eps);
    layer_gemv(L, normed, L->gate_up, gu, T, 2 * I, H, threads);
    for (int64_t t = 0; t < T; ++t) silu_mul_row(gu + t * 2 * I, act + t * I, I);
    layer_gemv(L, act, L->down, h_out, T, H, I, threads);
    free(buf);
}

// Every layer of a step in one call: layer i reads layer i - 1's (h, residual) (the first
// none) and the last one's land in h_out / res_out. One Python call a layer cost ~90 us once
// the step's weight stream had evicted the interpreter's data: int8 SmolLM2 streaming decode
// went from 58.0 to 68.8 tok/s with this call (benchmarks/cpu_layer_stack.py, model 167 Xeon,
// 1 thread, side by side); the arithmetic is parley_decode_layer's.
void parley_decode_layers(const ParleyLayerWeights* const* Ls, int64_t n, const ParleyStep* S, float* const* kcs,
                          float* const* vcs, const float* h, float* h_out, float* res_out) {
    const int64_t TH = S->T * Ls[0]->hidden;
    float* tmp = static_cast<float*>(malloc(sizeof(float) * 2 * TH));  // the other (h, residual) pair
    const float* h_in = h;
    const float* res_in = nullptr;
    for (int64_t i = 0; i < n; ++i) {
        const bool out = (n - 1 - i) % 2 == 0;  // pairs alternate so that the last layer writes h_out
        float* ho = out ? h_out : tmp;
        float* ro = out ? res_out : tmp + TH;
        parley_decode_layer(Ls[i], S, kcs[i], vcs[i], h_in, res_in, ho, ro);
        h_in = ho;
        res_in = ro;
    }
    free(tmp);
}
}
