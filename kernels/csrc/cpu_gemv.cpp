// Skinny matmul for CPU decode: y[m, n] = sum_k x[m, k] * w[n, k] for 1..8 rows of x.
//
// Decode streams every weight once per step, so the kernel's job is to read w at the
// memory's speed and reuse each loaded weight vector for all M rows while it is in a
// register (cost nearly flat in M: what speculative verification and small batches need).
// w is fp32 or bf16 (upcast exactly by a 16-bit shift); x and y are fp32; accumulation in
// fp32. Rows of w are split across threads in contiguous ranges.
//
// Built by kernels/cpu_gemv.py with the host compiler (-O3 -march=native -fopenmp); plain
// C ABI, called through ctypes on tensors' data pointers.

#include <stdint.h>
#include <string.h>

#ifdef __AVX512F__
#include <immintrin.h>
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

struct Bf16Act { uint16_t bits; };  // activations already rounded to bf16 (the dpbf16 path)

#ifdef __AVX512F__
// Masked loads measured 3-4x slower than plain ones on the Zen 5 dev machine: the main k loop
// uses plain loads (FULL) and only a K % 16 tail takes a mask.
template <bool FULL>
inline __m512 load_x(const float* p, __mmask16 mask) {
    return FULL ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(mask, p);
}
template <bool FULL>
inline __m512 load_w(const float* p, __mmask16 mask) { return load_x<FULL>(p, mask); }
template <bool FULL>
inline __m512 load_w(const uint16_t* p, __mmask16 mask) {
    __m256i h = FULL ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)) : _mm256_maskz_loadu_epi16(mask, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// acc[r][m] += w_r[k:k+16] * x_m[k:k+16] for R weight rows and M x rows
template <int R, int M, bool FULL, typename W>
inline void step(__m512 (&acc)[R][M], const W* const (&wr)[R], const float* x, int64_t K, int64_t k,
                 __mmask16 mask) {
    __m512 v[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) v[r] = load_w<FULL>(wr[r] + k, mask);
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
        __m512 xv = load_x<FULL>(x + m * K + k, mask);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) acc[r][m] = _mm512_fmadd_ps(v[r], xv, acc[r][m]);
    }
}

template <int R, int M, typename W>
inline void rows(const float* x, const W* w, float* y, int64_t N, int64_t K, int64_t n) {
    __m512 acc[R][M];
    const W* wr[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
        wr[r] = w + (n + r) * K;
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) acc[r][m] = _mm512_setzero_ps();
    }
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) step<R, M, true>(acc, wr, x, K, k, 0);
    if (k < K) step<R, M, false>(acc, wr, x, K, k, (__mmask16)((1u << (K - k)) - 1u));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) y[m * N + n + r] = _mm512_reduce_add_ps(acc[r][m]);
}

// bf16 weights, 32 at a time: a 32-bit lane holds elements 2j (low half) and 2j+1 (high half),
// so a shift and a mask give both as exact fp32, against x pre-split into even/odd halves per
// 32-block (xp). Measured: 2x the bandwidth of the widen-then-shift upcast (vpmovzxwd), which
// the dev machine executes slowly.
template <int R, int M>
inline void rows_pairs(const float* xp, const uint16_t* w, float* y, int64_t N, int64_t K, int64_t K32,
                       int64_t n) {
    const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    __m512 acc[R][M];
    const uint16_t* wr[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
        wr[r] = w + (n + r) * K;
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) acc[r][m] = _mm512_setzero_ps();
    }
    for (int64_t k = 0; k < K32; k += 32) {
        __m512 ev[R], od[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            __m512i v = _mm512_loadu_si512(reinterpret_cast<const void*>(wr[r] + k));
            ev[r] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
            od[r] = _mm512_castsi512_ps(_mm512_and_si512(v, hi_mask));
        }
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
            __m512 xe = _mm512_loadu_ps(xp + m * K + k), xo = _mm512_loadu_ps(xp + m * K + k + 16);
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r)
                acc[r][m] = _mm512_fmadd_ps(od[r], xo, _mm512_fmadd_ps(ev[r], xe, acc[r][m]));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
            float s = _mm512_reduce_add_ps(acc[r][m]);
            for (int64_t k = K32; k < K; ++k) s += bf16_to_f32(wr[r][k]) * xp[m * K + k];  // K % 32 tail
            y[m * N + n + r] = s;
        }
}

// Weight rows per inner loop: each x vector loaded serves R rows, which matters once M > 1
// (x loads compete with w loads for the load ports); R * M accumulators stay within the
// 32 zmm registers.
#define R_OF(M) ((M) <= 4 ? 4 : 3)

#ifdef __AVX512BF16__
// bf16 weights x bf16 activations with vdpbf16ps: 32 multiply-adds an instruction, half the
// FMA count of the upcast paths (the dev machine retires ~0.5 512-bit FMA a cycle, which caps
// the upcast paths from 2 rows on); products are exact, sums fp32.
template <int R, int M>
inline void rows_dp(const uint16_t* xb, const uint16_t* w, float* y, int64_t N, int64_t K, int64_t K32,
                    int64_t n) {
    __m512 acc[R][M];
    const uint16_t* wr[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
        wr[r] = w + (n + r) * K;
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) acc[r][m] = _mm512_setzero_ps();
    }
    for (int64_t k = 0; k < K32; k += 32) {
        __m512bh v[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) v[r] = (__m512bh)_mm512_loadu_si512(reinterpret_cast<const void*>(wr[r] + k));
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
            __m512bh xv = (__m512bh)_mm512_loadu_si512(reinterpret_cast<const void*>(xb + m * K + k));
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) acc[r][m] = _mm512_dpbf16_ps(acc[r][m], v[r], xv);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
            float s = _mm512_reduce_add_ps(acc[r][m]);
            for (int64_t k = K32; k < K; ++k) s += bf16_to_f32(wr[r][k]) * bf16_to_f32(xb[m * K + k]);
            y[m * N + n + r] = s;
        }
}

template <int M>
void rows_range(const Bf16Act* x, const uint16_t* w, float* y, int64_t N, int64_t K, int64_t n0, int64_t n1) {
    const uint16_t* xb = reinterpret_cast<const uint16_t*>(x);
    int64_t n = n0, K32 = K & ~int64_t(31);
    for (; n + R_OF(M) <= n1; n += R_OF(M)) rows_dp<R_OF(M), M>(xb, w, y, N, K, K32, n);
    for (; n < n1; ++n) rows_dp<1, M>(xb, w, y, N, K, K32, n);
}
#endif

// Two weight rows at a time: 2 * M accumulators (<= 16 of the 32 zmm registers).
template <int M>
void rows_range(const float* x, const float* w, float* y, int64_t N, int64_t K, int64_t n0, int64_t n1) {
    int64_t n = n0;
    for (; n + R_OF(M) <= n1; n += R_OF(M)) rows<R_OF(M), M>(x, w, y, N, K, n);
    for (; n < n1; ++n) rows<1, M>(x, w, y, N, K, n);
}
template <int M>
void rows_range(const float* xp, const uint16_t* w, float* y, int64_t N, int64_t K, int64_t n0, int64_t n1) {
    int64_t n = n0, K32 = K & ~int64_t(31);
    for (; n + 1 < n1; n += 2) rows_pairs<2, M>(xp, w, y, N, K, K32, n);
    if (n < n1) rows_pairs<1, M>(xp, w, y, N, K, K32, n);
}

// xp: x rounded to bf16, each full 32-block split into its 16 even then 16 odd elements.
void split_even_odd(const float* x, float* xp, int64_t M, int64_t K) {
    int64_t K32 = K & ~int64_t(31);
    for (int64_t m = 0; m < M; ++m) {
        const float* xr = x + m * K;
        float* pr = xp + m * K;
        for (int64_t k = 0; k < K32; k += 32)
            for (int i = 0; i < 16; ++i) {
                pr[k + i] = bf16_to_f32(f32_to_bf16(xr[k + 2 * i]));
                pr[k + 16 + i] = bf16_to_f32(f32_to_bf16(xr[k + 2 * i + 1]));
            }
        for (int64_t k = K32; k < K; ++k) pr[k] = bf16_to_f32(f32_to_bf16(xr[k]));
    }
}
#else
inline float load1(const float* p) { return *p; }
inline float load1(const uint16_t* p) { return bf16_to_f32(*p); }

// Portable path: the compiler vectorizes the k loop for whatever -march=native offers.
template <int M, typename W>
void rows_range(const float* x, const W* w, float* y, int64_t N, int64_t K, int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
        float acc[M] = {0};
        const W* wr = w + n * K;
        for (int64_t k = 0; k < K; ++k) {
            float wk = load1(wr + k);
            for (int m = 0; m < M; ++m) acc[m] += wk * x[m * K + k];
        }
        for (int m = 0; m < M; ++m) y[m * N + n] = acc[m];
    }
}
void split_even_odd(const float* x, float* xp, int64_t M, int64_t K) {
    for (int64_t i = 0; i < M * K; ++i) xp[i] = bf16_to_f32(f32_to_bf16(x[i]));
}
#endif

template <typename X, typename W>
void dispatch(int M, const X* x, const W* w, float* y, int64_t N, int64_t K, int64_t n0, int64_t n1) {
    switch (M) {
        case 1: rows_range<1>(x, w, y, N, K, n0, n1); break;
        case 2: rows_range<2>(x, w, y, N, K, n0, n1); break;
        case 3: rows_range<3>(x, w, y, N, K, n0, n1); break;
        case 4: rows_range<4>(x, w, y, N, K, n0, n1); break;
        case 5: rows_range<5>(x, w, y, N, K, n0, n1); break;
        case 6: rows_range<6>(x, w, y, N, K, n0, n1); break;
        case 7: rows_range<7>(x, w, y, N, K, n0, n1); break;
        default: rows_range<8>(x, w, y, N, K, n0, n1); break;
    }
}

template <typename X, typename W>
void run(const X* x, const W* w, float* y, int64_t M, int64_t N, int64_t K, int threads) {
    if (threads <= 1) {
        dispatch<X, W>(static_cast<int>(M), x, w, y, N, K, 0, N);
        return;
    }
#pragma omp parallel num_threads(threads)
    {
#ifdef _OPENMP
        int t = omp_get_thread_num();
#else
        int t = 0;
        threads = 1;
#endif
        // contiguous, even-sized ranges (rows pairs stay together)
        int64_t per = ((N + threads - 1) / threads + 1) & ~int64_t(1);
        int64_t n0 = t * per, n1 = n0 + per < N ? n0 + per : N;
        if (n0 < n1) dispatch<X, W>(static_cast<int>(M), x, w, y, N, K, n0, n1);
    }
}

}  // namespace

extern "C" {

int parley_gemv_has_avx512(void) {
#ifdef __AVX512F__
    return 1;
#else
    return 0;
#endif
}

// x [M, K] fp32, w [N, K] (fp32 or bf16 bits), y [M, N] fp32; all contiguous; 1 <= M <= 8.
void parley_gemv_f32(const float* x, const float* w, float* y, int64_t M, int64_t N, int64_t K,
                     int threads) {
    run<float, float>(x, w, y, M, N, K, threads);
}

// x is rounded to bf16 (nearest even) on every path, as oneDNN's bf16 matmul does; y is fp32.
void parley_gemv_bf16(const float* x, const uint16_t* w, float* y, int64_t M, int64_t N, int64_t K,
                      int threads) {
#ifdef __AVX512BF16__
    Bf16Act* xb = new Bf16Act[M * K];
    for (int64_t i = 0; i < M * K; ++i) xb[i].bits = f32_to_bf16(x[i]);
    run<Bf16Act, uint16_t>(xb, w, y, M, N, K, threads);
    delete[] xb;
#else
    float* xp = new float[M * K];
    split_even_odd(x, xp, M, K);
    run<float, uint16_t>(xp, w, y, M, N, K, threads);
    delete[] xp;
#endif
}
}
