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

void quantize_rows(const float* x, int8_t* q, float* xs, int64_t M, int64_t K) {
    for (int64_t m = 0; m < M; ++m) {
        float amax = 0.f;
        for (int64_t k = 0; k < K; ++k) amax = fabsf(x[m * K + k]) > amax ? fabsf(x[m * K + k]) : amax;
        xs[m] = amax > 0.f ? amax / 127.f : 1.f;
        for (int64_t k = 0; k < K; ++k) q[m * K + k] = static_cast<int8_t>(nearbyintf(x[m * K + k] / xs[m]));
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
}
