// Skinny matmul for CPU decode: y[m, n] = sum_k x[m, k] * w[n, k] for 1..8 rows of x, and
// prefill's many rows in 8-row chunks with the same per-output arithmetic (row_chunks).
//
// Decode streams every weight once per step, so the kernel's job is to read w at the
// memory's speed and reuse each loaded weight vector for all M rows while it is in a
// register (what speculative verification and small batches need). w is fp32 or bf16; x and
// y are fp32; sums in fp32. With bf16 weights x is rounded to bf16 first (as oneDNN's bf16
// matmul does), so every product is exact. Rows of w are split across threads in contiguous
// ranges; each output is one thread's sum in a fixed order, whatever M or the thread count.
//
// Built by kernels/cpu_native.py with the host compiler (-O3 -march=native -fopenmp); plain
// C ABI, called through ctypes on tensors' data pointers.

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "const_dispatch.h"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define PARLEY_GEMV_SIMD 1
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

inline float bf16_to_f32(uint16_t v) {
    uint32_t bits = static_cast<uint32_t>(v) << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

// fp32 -> bf16 bits, round to nearest even (what torch's .to(torch.bfloat16) does); NaN kept NaN
inline uint16_t f32_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu)) return static_cast<uint16_t>((bits >> 16) | 0x40);
    bits += 0x7FFFu + ((bits >> 16) & 1u);
    return static_cast<uint16_t>(bits >> 16);
}

inline float to_f32(float v) { return v; }
inline float to_f32(uint16_t v) { return bf16_to_f32(v); }


#if defined(__AVX512F__)
using Acc = __m512;  // one accumulator: 16 fp32 lanes
inline Acc acc_zero() { return _mm512_setzero_ps(); }
inline float acc_sum(Acc a) { return _mm512_reduce_add_ps(a); }

// Step policies: acc[r][m] += w_r[k : k+BLOCK] . x_m[k : k+BLOCK], plain (unmasked) loads
// only: masked loads measured 3-4x slower on the Zen 5 dev machine, so the K % BLOCK tail
// is summed in scalar code after the vector reduction.
struct F32Step {  // fp32 weights, fp32 x
    using X = float;
    using W = float;
    static constexpr int BLOCK = 16;
    template <int R, int M>
    static inline void step(__m512 (&acc)[R][M], const W* const (&wr)[R], const X* x, int64_t K, int64_t k) {
        __m512 v[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) v[r] = _mm512_loadu_ps(wr[r] + k);
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
            __m512 xv = _mm512_loadu_ps(x + m * K + k);
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) acc[r][m] = _mm512_fmadd_ps(v[r], xv, acc[r][m]);
        }
    }
};

#if defined(__AVX512BF16__)
// bf16 weights x bf16 activations with vdpbf16ps: 32 multiply-adds an instruction, half the
// FMA count of an upcast path (the dev machine retires ~0.5 512-bit FMA a cycle with its
// sibling thread busy, so an upcast path is compute-bound from 2 rows on); products exact,
// sums fp32.
struct Bf16Step {
    using X = uint16_t;
    using W = uint16_t;
    static constexpr int BLOCK = 32;
    template <int R, int M>
    static inline void step(__m512 (&acc)[R][M], const W* const (&wr)[R], const X* x, int64_t K, int64_t k) {
        __m512bh v[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) v[r] = (__m512bh)_mm512_loadu_si512(reinterpret_cast<const void*>(wr[r] + k));
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
            __m512bh xv = (__m512bh)_mm512_loadu_si512(reinterpret_cast<const void*>(x + m * K + k));
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) acc[r][m] = _mm512_dpbf16_ps(acc[r][m], v[r], xv);
        }
    }
};
#else
struct Bf16Step {  // AVX-512 without BF16: widen each bf16 weight to fp32 by a 16-bit shift
    using X = float;  // x already rounded to bf16 values
    using W = uint16_t;
    static constexpr int BLOCK = 16;
    template <int R, int M>
    static inline void step(__m512 (&acc)[R][M], const W* const (&wr)[R], const X* x, int64_t K, int64_t k) {
        __m512 v[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[r] + k));
            v[r] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        }
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
            __m512 xv = _mm512_loadu_ps(x + m * K + k);
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) acc[r][m] = _mm512_fmadd_ps(v[r], xv, acc[r][m]);
        }
    }
};
#endif

// Weight rows per inner loop: each x vector loaded serves R rows, which matters once M > 1
// (x loads compete with w loads for the load ports; bf16 8 rows went 10.4 -> 7.5 ms from
// R = 2 to 3); R * M accumulators stay within the 32 zmm registers.
template <int M>
constexpr int rows_per_step() { return M <= 4 ? 4 : 3; }

#elif defined(PARLEY_GEMV_SIMD)
// AVX2 + FMA (x86-64-v3: most desktop and laptop CPUs, Zen 2-4 servers): 8 fp32 lanes. The
// portable loop below is a strict-order fp32 reduction the compiler cannot vectorize: on an
// AVX2-only EPYC it took 868 us for a [1536, 576] fp32 weight at 1 row (F.linear: 113 us; this path: 84).
using Acc = __m256;
inline Acc acc_zero() { return _mm256_setzero_ps(); }
inline float acc_sum(Acc a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

struct F32Step {
    using X = float;
    using W = float;
    static constexpr int BLOCK = 8;
    template <int R, int M>
    static inline void step(__m256 (&acc)[R][M], const W* const (&wr)[R], const X* x, int64_t K, int64_t k) {
        __m256 v[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) v[r] = _mm256_loadu_ps(wr[r] + k);
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
            __m256 xv = _mm256_loadu_ps(x + m * K + k);
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) acc[r][m] = _mm256_fmadd_ps(v[r], xv, acc[r][m]);
        }
    }
};

struct Bf16Step {  // widen each bf16 weight to fp32 by a 16-bit shift
    using X = float;  // x already rounded to bf16 values
    using W = uint16_t;
    static constexpr int BLOCK = 8;
    template <int R, int M>
    static inline void step(__m256 (&acc)[R][M], const W* const (&wr)[R], const X* x, int64_t K, int64_t k) {
        __m256 v[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wr[r] + k));
            v[r] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        }
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
            __m256 xv = _mm256_loadu_ps(x + m * K + k);
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) acc[r][m] = _mm256_fmadd_ps(v[r], xv, acc[r][m]);
        }
    }
};

// 16 ymm registers: R * M accumulators + R weight vectors + one x vector
template <int M>
constexpr int rows_per_step() { return M <= 2 ? 4 : M <= 4 ? 2 : 1; }
#endif

#if defined(PARLEY_GEMV_SIMD)
// R weight rows n..n+R-1 against all M rows of x.
// Software prefetch PF weight rows ahead (fp32 18 KB, bf16 9 KB). Without it the hardware
// prefetcher alone kept the weight stream at memory speed only for M = 1: each extra row's
// FMAs slowed the loads, and a DRAM-resident [3072, 576] fp32 weight took 2.4x the 1-row time
// for 8 rows (bf16 2.1x). With it: fp32 1.33x, bf16 0.9x (so a verify pass of k+1 tokens
// costs about one decode step in bf16 weights); 1-row times unchanged.
constexpr int PF = 8;
template <int R, int M, typename S>
inline void rows(const typename S::X* x, const typename S::W* w, float* y, int64_t N, int64_t K, int64_t n) {
    Acc acc[R][M];
    const typename S::W* wr[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
        wr[r] = w + (n + r) * K;
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) acc[r][m] = acc_zero();
    }
    int64_t k = 0;
    for (; k + S::BLOCK <= K; k += S::BLOCK) {
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(wr[r] + PF * K + k), _MM_HINT_T0);
        S::template step<R, M>(acc, wr, x, K, k);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
            float s = acc_sum(acc[r][m]);
            for (int64_t j = k; j < K; ++j) s += to_f32(wr[r][j]) * to_f32(x[m * K + j]);
            y[m * N + n + r] = s;
        }
}

template <int M, typename S>
void rows_range(const typename S::X* x, const typename S::W* w, float* y, int64_t N, int64_t K, int64_t n0,
                int64_t n1) {
    constexpr int R = rows_per_step<M>();
    int64_t n = n0;
    for (; n + R <= n1; n += R) rows<R, M, S>(x, w, y, N, K, n);
    for (; n < n1; ++n) rows<1, M, S>(x, w, y, N, K, n);
}
#else
struct F32Step { using X = float; using W = float; };
struct Bf16Step { using X = float; using W = uint16_t; };


// Portable path: the compiler vectorizes the k loop for whatever -march=native offers.
template <int M, typename S>
void rows_range(const typename S::X* x, const typename S::W* w, float* y, int64_t N, int64_t K, int64_t n0,
                int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
        float acc[M] = {0};
        const typename S::W* wr = w + n * K;
        for (int64_t k = 0; k < K; ++k) {
            float wk = to_f32(wr[k]);
            for (int m = 0; m < M; ++m) acc[m] += wk * x[m * K + k];
        }
        for (int m = 0; m < M; ++m) y[m * N + n] = acc[m];
    }
}
#endif

template <typename S>
void dispatch(int M, const typename S::X* x, const typename S::W* w, float* y, int64_t N, int64_t K, int64_t n0,
              int64_t n1) {
    const_dispatch_1_to_8(M, [&](auto m) { rows_range<decltype(m)::value, S>(x, w, y, N, K, n0, n1); });
}

// f(n0, n1) over contiguous row ranges of [0, N), one per thread (inline when threads <= 1).
template <typename F>
void parallel_rows(int64_t N, int threads, F f) {
    if (threads <= 1) {
        f(int64_t(0), N);
        return;
    }
#pragma omp parallel num_threads(threads)
    {
#ifdef _OPENMP
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
#else
        int t = 0, nt = 1;
#endif
        int64_t per = (N + nt - 1) / nt;
        int64_t n0 = t * per, n1 = n0 + per < N ? n0 + per : N;
        if (n0 < n1) f(n0, n1);
    }
}

// f(m0, m, b0, b1): x rows m0..m0+m-1 (m <= 8) against weight rows b0..b1-1, covering rows
// [0, M) x [n0, n1). Up to 8 rows: one call, each weight row streamed once. Prefill (more
// rows): 8-row chunks against blocks of weight rows sized to stay in L2 (~256 KB) while every
// chunk passes over them, so the weights still come from DRAM once. Each output is still
// one accumulation over k in the kernel's fixed order, so a row's result does not depend on
// M, on its chunk or on the block: a prefilled prompt row equals the same row decoded alone
// (greedy output after a prefix-cache hit = cold).
template <typename F>
void row_chunks(int64_t M, int64_t K, int64_t w_bytes, int64_t n0, int64_t n1, F f) {
    if (M <= 8) {
        f(int64_t(0), M, n0, n1);
        return;
    }
    int64_t nb = (256 * 1024) / (K * w_bytes);
    nb = nb < 16 ? 16 : nb;
    for (int64_t b0 = n0; b0 < n1; b0 += nb) {
        const int64_t b1 = b0 + nb < n1 ? b0 + nb : n1;
        for (int64_t m0 = 0; m0 < M; m0 += 8) f(m0, M - m0 < 8 ? M - m0 : 8, b0, b1);
    }
}

template <typename S>
void run(const typename S::X* x, const typename S::W* w, float* y, int64_t M, int64_t N, int64_t K, int threads) {
    parallel_rows(N, threads, [&](int64_t n0, int64_t n1) {
        row_chunks(M, K, sizeof(typename S::W), n0, n1, [&](int64_t m0, int64_t m, int64_t b0, int64_t b1) {
            dispatch<S>(static_cast<int>(m), x + m0 * K, w, y + m0 * N, N, K, b0, b1);
        });
    });
}

}  // namespace

extern "C" {

// fp32 lanes of the path this build took: 16 (AVX-512), 8 (AVX2 + FMA), 1 (portable loops)
int parley_gemv_lanes(void) {
#if defined(__AVX512F__)
    return 16;
#elif defined(PARLEY_GEMV_SIMD)
    return 8;
#else
    return 1;
#endif
}

// x [M, K] fp32, w [N, K] fp32, y [M, N] fp32; all contiguous; M >= 1 (see row_chunks).
void parley_gemv_f32(const float* x, const float* w, float* y, int64_t M, int64_t N, int64_t K, int threads) {
    run<F32Step>(x, w, y, M, N, K, threads);
}

// The same with w as bf16 bits; x is rounded to bf16 (nearest even) first on every path.
void parley_gemv_bf16(const float* x, const uint16_t* w, float* y, int64_t M, int64_t N, int64_t K,
                      int threads) {
    Bf16Step::X* xr = new Bf16Step::X[M * K];
    for (int64_t i = 0; i < M * K; ++i) {
        uint16_t b = f32_to_bf16(x[i]);
        if constexpr (sizeof(Bf16Step::X) == 2) {
            xr[i] = b;
        } else {
            xr[i] = bf16_to_f32(b);
        }
    }
    run<Bf16Step>(xr, w, y, M, N, K, threads);
    delete[] xr;
}

}  // extern "C"

// ---- int8 weights x int8 activations (the llama.cpp way) -------------------------------
// w int8 [N, K] with a per-row scale ws[n]; each x row quantized symmetrically to int8 with
// xs[m] = max|x[m]| / 127, q = round-half-even(x / xs); y = ws[n] * xs[m] * sum_k q w as
// exact int32 sums. With AVX512-VNNI, vpdpbusd multiplies u8 by s8 64 at a time, so x is
// offset by +128 and 128 * sum_k w[n, k] (wsum, precomputed) taken back off.
namespace {

// The loops below are the scalar one's arithmetic, vectorized: max ignores NaN as the scalar
// compare does (vmaxps returns its second operand when either is NaN), the division is IEEE,
// vcvtps2dq rounds half to even as nearbyintf does in the default mode, and the int8 is the
// int32's low byte, as the scalar cast leaves it. One int8 decode step's 120 matmuls (SmolLM2
// shapes, 1 thread, model 167 Xeon, side by side): 10.04 -> 9.81 ms at 1 row, 10.61 -> 10.19
// at 2, 12.37 -> 11.63 at 4: the quantization is paid per row, like a verify row's products.
void quantize_rows(const float* x, int8_t* q, float* xs, int64_t M, int64_t K) {
    for (int64_t m = 0; m < M; ++m) {
        const float* xr = x + m * K;
        int8_t* qr = q + m * K;
        float amax = 0.f;
        int64_t k = 0;
#if defined(__AVX512F__)
        __m512 vmax = _mm512_setzero_ps();
        for (; k + 16 <= K; k += 16) vmax = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xr + k)), vmax);
        amax = _mm512_reduce_max_ps(vmax);
#elif defined(__AVX2__)
        const __m256 sign = _mm256_set1_ps(-0.f);
        __m256 vmax = _mm256_setzero_ps();
        for (; k + 8 <= K; k += 8) vmax = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(xr + k)), vmax);
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, vmax);
        for (float v : lanes) amax = v > amax ? v : amax;
#endif
        for (; k < K; ++k) amax = fabsf(xr[k]) > amax ? fabsf(xr[k]) : amax;
        const float s = amax > 0.f ? amax / 127.f : 1.f;
        xs[m] = s;
        k = 0;
#if defined(__AVX512F__)
        const __m512 vs = _mm512_set1_ps(s);
        for (; k + 16 <= K; k += 16)
            _mm_storeu_si128(reinterpret_cast<__m128i*>(qr + k),
                             _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_div_ps(_mm512_loadu_ps(xr + k), vs))));
#elif defined(__AVX2__)
        const __m256 vs = _mm256_set1_ps(s);
        alignas(32) int32_t ints[8];
        for (; k + 8 <= K; k += 8) {
            _mm256_store_si256(reinterpret_cast<__m256i*>(ints), _mm256_cvtps_epi32(_mm256_div_ps(_mm256_loadu_ps(xr + k), vs)));
            for (int j = 0; j < 8; ++j) qr[k + j] = static_cast<int8_t>(ints[j]);
        }
#endif
        for (; k < K; ++k) qr[k] = static_cast<int8_t>(nearbyintf(xr[k] / s));
    }
}

#if defined(__AVX512VNNI__)
// int8 rows are 4x shorter than fp32's: 24 rows (14 KB) ahead. On the Zen 5, [49152, 576] int8
// at 8 rows went from 1.8-2.4x (an xor per x load, one weight row per step) to 1.2x of the
// 1-row time (x pre-offset once, R-row blocks; see i8_rows for why R is 1 again).
constexpr int PF_I8 = 24;
// R weight rows n..n+R-1 against all M rows of q (u8 bits of q + 128): one x load feeds R
// vpdpbusd, as in rows<> above.
template <int R, int M>
inline void i8_block(const int8_t* q, const int8_t* w, const int32_t* wsum, const float* xs, const float* ws,
                     float* y, int64_t N, int64_t K, int64_t n) {
    const int64_t K64 = K & ~int64_t(63);
    __m512i acc[R][M];
    const int8_t* wr[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
        wr[r] = w + (n + r) * K;
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) acc[r][m] = _mm512_setzero_si512();
    }
    for (int64_t k = 0; k < K64; k += 64) {
        __m512i wv[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            _mm_prefetch(reinterpret_cast<const char*>(wr[r] + PF_I8 * K + k), _MM_HINT_T0);
            wv[r] = _mm512_loadu_si512(reinterpret_cast<const void*>(wr[r] + k));
        }
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
            __m512i xu = _mm512_loadu_si512(reinterpret_cast<const void*>(q + m * K + k));
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) acc[r][m] = _mm512_dpbusd_epi32(acc[r][m], xu, wv[r]);  // (q + 128) . w
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
            int32_t s = _mm512_reduce_add_epi32(acc[r][m]) - 128 * wsum[n + r];  // the tail adds its offset too
            for (int64_t k = K64; k < K; ++k) s += static_cast<int32_t>(static_cast<uint8_t>(q[m * K + k])) * wr[r][k];
            y[m * N + n + r] = static_cast<float>(s) * (xs[m] * ws[n + r]);
        }
}

template <int M>
void i8_rows(const int8_t* q, const int8_t* w, const int32_t* wsum, const float* xs, const float* ws, float* y,
             int64_t N, int64_t K, int64_t n0, int64_t n1) {
    // One weight row per step at every M. Blocks of R = 3-4 rows (one x load feeding R
    // vpdpbusd) were chosen on a Zen 5; on a Zen 4 (512-bit ops double-pumped) they made a
    // 2-row pass over one decode step's int8 weights 2x the 1-row time (21.3 vs 11.7 ms,
    // benchmarks.cpu_gemv's shapes, 1 thread), so every speculative verify cost two plain
    // steps; one row per step: 13.3-13.6 ms at 2 rows, 19-23 at 8 (was 24-26). Sums are the
    // same per output in the same order either way: bit-identical results.
    for (int64_t n = n0; n < n1; ++n) i8_block<1, M>(q, w, wsum, xs, ws, y, N, K, n);
}
#elif defined(__AVX2__)
// AVX2 has no u8 x s8 dot product into int32 without saturation: vpmaddubsw takes |q| (u8) and
// w with q's sign (vpsignb), whose pair sums stay within int16 (2 x 127 x 127 = 32,258; q and w
// never reach -128), and vpmaddwd by ones widens them to int32: exact, like the VNNI path.
constexpr int PF_I8 = 24;
inline int32_t hsum_epi32(__m256i a) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1))));
}

template <int R, int M>
inline void i8_block(const int8_t* q, const int8_t* w, const float* xs, const float* ws, float* y, int64_t N,
                     int64_t K, int64_t n) {
    const int64_t K32 = K & ~int64_t(31);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i acc[R][M];
    const int8_t* wr[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
        wr[r] = w + (n + r) * K;
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) acc[r][m] = _mm256_setzero_si256();
    }
    for (int64_t k = 0; k < K32; k += 32) {
        __m256i wv[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            _mm_prefetch(reinterpret_cast<const char*>(wr[r] + PF_I8 * K + k), _MM_HINT_T0);
            wv[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[r] + k));
        }
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
            const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + m * K + k));
            const __m256i ax = _mm256_abs_epi8(xq);
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                const __m256i p = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(wv[r], xq));
                acc[r][m] = _mm256_add_epi32(acc[r][m], _mm256_madd_epi16(p, ones));
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
            int32_t s = hsum_epi32(acc[r][m]);
            for (int64_t k = K32; k < K; ++k) s += static_cast<int32_t>(q[m * K + k]) * wr[r][k];
            y[m * N + n + r] = static_cast<float>(s) * (xs[m] * ws[n + r]);
        }
}

template <int M>
void i8_rows(const int8_t* q, const int8_t* w, const int32_t* wsum, const float* xs, const float* ws, float* y,
             int64_t N, int64_t K, int64_t n0, int64_t n1) {
    (void)wsum;
    constexpr int R = M <= 2 ? 2 : 1;  // R * M accumulators + R weights + 4 temporaries <= 16 ymm
    int64_t n = n0;
    for (; n + R <= n1; n += R) i8_block<R, M>(q, w, xs, ws, y, N, K, n);
    for (; n < n1; ++n) i8_block<1, M>(q, w, xs, ws, y, N, K, n);
}
#else
template <int M>
void i8_rows(const int8_t* q, const int8_t* w, const int32_t* wsum, const float* xs, const float* ws, float* y,
             int64_t N, int64_t K, int64_t n0, int64_t n1) {
    (void)wsum;
    for (int64_t n = n0; n < n1; ++n)
        for (int m = 0; m < M; ++m) {
            int32_t s = 0;
            for (int64_t k = 0; k < K; ++k) s += static_cast<int32_t>(q[m * K + k]) * w[n * K + k];
            y[m * N + n] = static_cast<float>(s) * (xs[m] * ws[n]);
        }
}
#endif

void i8_dispatch(int M, const int8_t* q, const int8_t* w, const int32_t* wsum, const float* xs, const float* ws,
                 float* y, int64_t N, int64_t K, int64_t n0, int64_t n1) {
    const_dispatch_1_to_8(M, [&](auto m) { i8_rows<decltype(m)::value>(q, w, wsum, xs, ws, y, N, K, n0, n1); });
}

// ---- 4-bit weights (GGUF's Q4_1) x int8 activations ---------------------------------------
// A weight = d * nibble + m, with an fp16 scale d and minimum m per block of 32 along k.
// dm: fp16 [N, 2, K / 32], each row's block scales, then its minimums. w: uint8 [N, K / 2],
// per row first G = (K / 32) / 16 groups of 16 blocks, 256 bytes each, interleaved so that one
// vector holds a 4-element word of every block of the group: word (r, j) (r = 0..7, j = 0..15)
// is elements 4r..4r+3 of block j; 64-byte chunk c holds words (2c, *) in its low nibbles and
// (2c + 1, *) in its high ones. A lane then sums one block's products over the 8 words in
// integers (no reduction per block), and one multiply by 16 (8) scales serves 16 (8) blocks.
// The last K / 32 % 16 blocks follow in GGUF's own layout (16 bytes a block, byte j: element j
// low, j + 16 high). kernels/cpu_gemv.py quantize_q4 writes both.
// x rows are quantized as for int8 (q, xs), with each group's words moved to the weights'
// order (q4_interleave); sx [M, pad] = each block's sum of q (fp32, zero-padded to whole 8s).
// y[m, n] = xs[m] * (sum_b d_b * sum_i nibble_i q_i + sum_b m_b * sx[m, b]). The nibble is the
// unsigned operand of the byte products (vpdpbusd with AVX512-VNNI; without, vpmaddubsw, whose
// int16 pair sums 2 x 15 x 127 stay exact summed over the 8 words: 8 x 3810 < 2^15), so block
// sums are exact int32 and no sign trick or offset is needed. The float sums run in 8 lanes
// (scales: blocks j, j + 8 of each group, then each tail block's lane j; minimums: blocks j,
// j + 8, ...), added lane by lane before one reduction: a row's bits never depend on M or the
// threads, and the builds without VNNI (AVX2, plain loops) agree to the bit; VNNI's 16 lanes
// are folded to 8 at the end (another order).
inline float half_to_f32(uint16_t h) {
#if defined(__F16C__)
    return _cvtsh_ss(h);
#else
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    uint32_t bits;
    if (exp == 0x1Fu) {
        bits = sign | 0x7F800000u | (man << 13);  // inf / NaN
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {  // subnormal: normalize
        int e = -1;
        uint32_t m = man;
        do {
            ++e;
            m <<= 1;
        } while (!(m & 0x400u));
        bits = sign | ((112u - e) << 23) | ((m & 0x3FFu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
#endif
}

constexpr int Q4_BLOCK = 32;
constexpr int Q4_GROUP = 16;  // blocks interleaved in a group
inline int64_t q4_pad(int64_t nb) { return (nb + 7) / 8 * 8; }

// one weight row's d and m as fp32 into d[0, pad) and mn[0, pad), zero-padded (the padding
// adds fma(0, 0, s) = s to the minimum term)
inline void q4_scales(const uint16_t* dmr, int64_t nb, float* d, float* mn) {
    int64_t b = 0;
#if defined(__F16C__) && defined(__AVX2__)
    for (; b + 8 <= nb; b += 8) {
        _mm256_storeu_ps(d + b, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(dmr + b))));
        _mm256_storeu_ps(mn + b, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(dmr + nb + b))));
    }
#endif
    for (; b < nb; ++b) d[b] = half_to_f32(dmr[b]), mn[b] = half_to_f32(dmr[nb + b]);
    for (; b < q4_pad(nb); ++b) d[b] = 0.f, mn[b] = 0.f;
}

// x rows q [M, K] -> qr: each group's words in the weights' order, the tail blocks as they are
void q4_interleave(const int8_t* q, int8_t* qr, int64_t M, int64_t K) {
    const int64_t G = K / Q4_BLOCK / Q4_GROUP, span = int64_t(Q4_GROUP) * Q4_BLOCK;
    memcpy(qr, q, M * K);
    for (int64_t m = 0; m < M; ++m)
        for (int64_t g = 0; g < G; ++g)
            for (int r = 0; r < 8; ++r)
                for (int j = 0; j < Q4_GROUP; ++j)
                    memcpy(qr + m * K + g * span + (r * Q4_GROUP + j) * 4, q + m * K + g * span + j * Q4_BLOCK + 4 * r, 4);
}

#if defined(__AVX2__) && defined(__FMA__)
inline float hsum_ps(__m256 a) {  // ((0 + 4) + (2 + 6)) + ((1 + 5) + (3 + 7))
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

template <int M>
void q4_groups(const int8_t* qr, const uint8_t* wr, const float* d, int64_t K, __m256* acc) {
    const int64_t G = K / Q4_BLOCK / Q4_GROUP, span = int64_t(Q4_GROUP) * Q4_BLOCK;
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    const __m512i low = _mm512_set1_epi8(0x0F);
    __m512 acc16[M];
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) acc16[m] = _mm512_setzero_ps();
    for (int64_t g = 0; g < G; ++g) {
        const uint8_t* pg = wr + 256 * g;
        __m512i nib[8];
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
            _mm_prefetch(reinterpret_cast<const char*>(pg + 24 * (K / 2) + 64 * c), _MM_HINT_T0);
            const __m512i v = _mm512_loadu_si512(reinterpret_cast<const void*>(pg + 64 * c));
            nib[2 * c] = _mm512_and_si512(v, low);
            nib[2 * c + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
        }
        const __m512 dv = _mm512_loadu_ps(d + Q4_GROUP * g);
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
            const int8_t* xr = qr + m * K + g * span;
            __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), nib[0], _mm512_loadu_si512(xr));
#pragma GCC unroll 7
            for (int r = 1; r < 8; ++r) s = _mm512_dpbusd_epi32(s, nib[r], _mm512_loadu_si512(xr + 64 * r));
            acc16[m] = _mm512_fmadd_ps(dv, _mm512_cvtepi32_ps(s), acc16[m]);
        }
    }
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m)
        acc[m] = _mm256_add_ps(_mm512_castps512_ps256(acc16[m]),
                               _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc16[m]), 1)));
#else
    const __m256i low = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    for (int64_t g = 0; g < G; ++g) {
        const uint8_t* pg = wr + 256 * g;
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) _mm_prefetch(reinterpret_cast<const char*>(pg + 24 * (K / 2) + 64 * c), _MM_HINT_T0);
        for (int h = 0; h < 2; ++h) {  // blocks 8h..8h+7 of the group: bytes 32h..32h+31 of each chunk
            __m256i nib[8];
#pragma GCC unroll 4
            for (int c = 0; c < 4; ++c) {
                const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pg + 64 * c + 32 * h));
                nib[2 * c] = _mm256_and_si256(v, low);
                nib[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
            }
            const __m256 dv = _mm256_loadu_ps(d + Q4_GROUP * g + 8 * h);
#pragma GCC unroll 8
            for (int m = 0; m < M; ++m) {
                const int8_t* xr = qr + m * K + g * span + 32 * h;
                __m256i s = _mm256_maddubs_epi16(nib[0], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr)));
#pragma GCC unroll 7
                for (int r = 1; r < 8; ++r)
                    s = _mm256_add_epi16(s, _mm256_maddubs_epi16(
                                                nib[r], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr + 64 * r))));
                acc[m] = _mm256_fmadd_ps(dv, _mm256_cvtepi32_ps(_mm256_madd_epi16(s, ones)), acc[m]);
            }
        }
    }
#endif
}

// 8 int32 lanes, each a sum of 4 nibble x q products of one (GGUF-layout) block
inline __m256i q4_dot(__m256i nibbles, __m256i xq) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), nibbles, xq);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(nibbles, xq), _mm256_set1_epi16(1));
#endif
}

template <int M>
void q4_rows(const int8_t* q, const float* sx, const float* xs, const uint8_t* w, const uint16_t* dm, float* y,
             int64_t N, int64_t K, int64_t n0, int64_t n1) {
    const int64_t nb = K / Q4_BLOCK, np = q4_pad(nb), tail0 = nb / Q4_GROUP * Q4_GROUP;
    float* d = new float[2 * np];
    float* mn = d + np;
    const __m128i low = _mm_set1_epi8(0x0F);
    for (int64_t n = n0; n < n1; ++n) {
        const uint8_t* wr = w + n * (K / 2);
        q4_scales(dm + n * 2 * nb, nb, d, mn);
        __m256 acc[M];
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) acc[m] = _mm256_setzero_ps();
        q4_groups<M>(q, wr, d, K, acc);
        for (int64_t b = tail0; b < nb; ++b) {
            const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wr + 16 * b));
            const __m256i nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), low), _mm_and_si128(v, low));
            const __m256 db = _mm256_broadcast_ss(d + b);
#pragma GCC unroll 8
            for (int m = 0; m < M; ++m) {
                const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + m * K + Q4_BLOCK * b));
                acc[m] = _mm256_fmadd_ps(db, _mm256_cvtepi32_ps(q4_dot(nib, xq)), acc[m]);
            }
        }
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
            __m256 mins = _mm256_setzero_ps();
            for (int64_t c = 0; c < np; c += 8)
                mins = _mm256_fmadd_ps(_mm256_loadu_ps(mn + c), _mm256_loadu_ps(sx + m * np + c), mins);
            y[m * N + n] = xs[m] * hsum_ps(_mm256_add_ps(acc[m], mins));
        }
    }
    delete[] d;
}
#else
// portable: the AVX2 path's sums, lane by lane
template <int M>
void q4_rows(const int8_t* q, const float* sx, const float* xs, const uint8_t* w, const uint16_t* dm, float* y,
             int64_t N, int64_t K, int64_t n0, int64_t n1) {
    const int64_t nb = K / Q4_BLOCK, np = q4_pad(nb), G = nb / Q4_GROUP, span = int64_t(Q4_GROUP) * Q4_BLOCK;
    float* d = new float[2 * np];
    float* mn = d + np;
    for (int64_t n = n0; n < n1; ++n) {
        const uint8_t* wr = w + n * (K / 2);
        q4_scales(dm + n * 2 * nb, nb, d, mn);
        for (int m = 0; m < M; ++m) {
            const int8_t* xm = q + m * K;
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, mins[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int64_t g = 0; g < G; ++g)
                for (int h = 0; h < 2; ++h)
                    for (int lane = 0; lane < 8; ++lane) {
                        const int j = 8 * h + lane;
                        int32_t s = 0;
                        for (int r = 0; r < 8; ++r)
                            for (int t = 0; t < 4; ++t) {
                                const uint8_t byte = wr[256 * g + 64 * (r / 2) + 4 * j + t];
                                s += (r % 2 ? byte >> 4 : byte & 0x0F) * xm[g * span + (r * Q4_GROUP + j) * 4 + t];
                            }
                        acc[lane] = fmaf(d[Q4_GROUP * g + j], static_cast<float>(s), acc[lane]);
                    }
            for (int64_t b = G * Q4_GROUP; b < nb; ++b)
                for (int lane = 0; lane < 8; ++lane) {
                    int32_t s = 0;
                    for (int i = 4 * lane; i < 4 * lane + 4; ++i) {
                        const int nibble = i < 16 ? wr[16 * b + i] & 0x0F : wr[16 * b + i - 16] >> 4;
                        s += nibble * xm[Q4_BLOCK * b + i];
                    }
                    acc[lane] = fmaf(d[b], static_cast<float>(s), acc[lane]);
                }
            for (int64_t c = 0; c < np; c += 8)
                for (int lane = 0; lane < 8; ++lane) mins[lane] = fmaf(mn[c + lane], sx[m * np + c + lane], mins[lane]);
            float t[8];
            for (int lane = 0; lane < 8; ++lane) t[lane] = acc[lane] + mins[lane];
            y[m * N + n] = xs[m] * (((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7])));
        }
    }
    delete[] d;
}
#endif

void q4_dispatch(int M, const int8_t* q, const float* sx, const float* xs, const uint8_t* w, const uint16_t* dm,
                 float* y, int64_t N, int64_t K, int64_t n0, int64_t n1) {
    const_dispatch_1_to_8(M, [&](auto m) { q4_rows<decltype(m)::value>(q, sx, xs, w, dm, y, N, K, n0, n1); });
}

}  // namespace

extern "C" {

// x [M, K] fp32 (M >= 1), w [N, K] int8, ws/wsum [N] (scale, sum_k w), y [M, N] fp32.
void parley_gemv_i8(const float* x, const int8_t* w, const float* ws, const int32_t* wsum, float* y, int64_t M,
                    int64_t N, int64_t K, int threads) {
    int8_t* q = new int8_t[M * K];
    float* xs = new float[M];
    quantize_rows(x, q, xs, M, K);
#if defined(__AVX512VNNI__)
    // q + 128 as u8 bits (vpdpbusd's unsigned operand), flipped once here rather than per row of w
    for (int64_t i = 0; i < M * K; ++i) q[i] = static_cast<int8_t>(static_cast<uint8_t>(q[i]) ^ 0x80u);
#endif
    parallel_rows(N, threads, [&](int64_t n0, int64_t n1) {
        row_chunks(M, K, 1, n0, n1, [&](int64_t m0, int64_t m, int64_t b0, int64_t b1) {
            i8_dispatch(static_cast<int>(m), q + m0 * K, w, wsum, xs + m0, ws, y + m0 * N, N, K, b0, b1);
        });
    });
    delete[] q;
    delete[] xs;
}

// x [M, K] fp32 (M >= 1, K a multiple of 32), w uint8 [N, K / 2] (nibbles, see above), dm fp16
// bits [N, 2, K / 32] (scales, then minimums), y [M, N] fp32.
void parley_gemv_q4(const float* x, const uint8_t* w, const uint16_t* dm, float* y, int64_t M, int64_t N,
                    int64_t K, int threads) {
    const int64_t nb = K / Q4_BLOCK, np = q4_pad(nb);
    int8_t* q = new int8_t[2 * M * K];
    int8_t* qr = q + M * K;
    float* xs = new float[M];
    float* sx = new float[M * np];
    quantize_rows(x, q, xs, M, K);
    for (int64_t m = 0; m < M; ++m)
        for (int64_t b = 0; b < np; ++b) {
            int32_t s = 0;
            for (int j = 0; b < nb && j < Q4_BLOCK; ++j) s += q[m * K + b * Q4_BLOCK + j];
            sx[m * np + b] = static_cast<float>(s);
        }
    q4_interleave(q, qr, M, K);
    parallel_rows(N, threads, [&](int64_t n0, int64_t n1) {
        row_chunks(M, K, 1, n0, n1, [&](int64_t m0, int64_t m, int64_t b0, int64_t b1) {
            q4_dispatch(static_cast<int>(m), qr + m0 * K, sx + m0 * np, xs + m0, w, dm, y + m0 * N, N, K, b0, b1);
        });
    });
    delete[] q;
    delete[] xs;
    delete[] sx;
}
}
