// ppc_cuda.h: the portability header of ppc's generated CUDA C. Self-contained (no CUDA SDK
// header), it compiles three ways:
//   - by NVRTC at load time on the GPU (__CUDACC_RTC__): NVRTC's own keywords and built-ins,
//     libdevice's __nv_* math;
//   - by clang as CUDA without the SDK (`clang -x cuda --cuda-device-only -nocudainc
//     -nocudalib`, CI's check that every kernel compiles to PTX): attributes and NVVM
//     built-ins spelled out, libdevice's __nv_* declared and left external in the PTX;
//   - for the host (PPC_HOST, by clang++ or g++), where a launch is a loop over the grid's
//     blocks and threads, so CI runs every kernel on the CPU and compares it with the CPU
//     device.
// bf16 and f16 conversions are written out (round to nearest even, as the CPU device's).
#ifndef PPC_CUDA_H
#define PPC_CUDA_H

#if defined(PPC_HOST)
#include <math.h>
#include <stdint.h>
#include <string.h>
#define PPC_GLOBAL extern "C"
#define PPC_DEV static inline
// The emulated thread's coordinates: per OS thread, so that launches on several threads
// (ranks with devices of their own) do not share them.
static thread_local unsigned ppc_tid, ppc_bid, ppc_bdim, ppc_gdim;
#define PPC_TID ppc_tid
#define PPC_BID ppc_bid
#define PPC_BDIM ppc_bdim
#define PPC_GDIM ppc_gdim
// Row kernels' shared memory: the host launcher's, per OS thread. The host has no barriers:
// a row kernel's host launcher runs each phase for every thread before the next.
#define PPC_SHARED static thread_local
PPC_DEV float ppc_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
PPC_DEV uint32_t ppc_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
PPC_DEV float ppc_expf(float x) { return expf(x); }
PPC_DEV float ppc_logf(float x) { return logf(x); }
PPC_DEV float ppc_tanhf(float x) { return tanhf(x); }
PPC_DEV float ppc_erff(float x) { return erff(x); }
PPC_DEV float ppc_erfcf(float x) { return erfcf(x); }
PPC_DEV float ppc_sinf(float x) { return sinf(x); }
PPC_DEV float ppc_cosf(float x) { return cosf(x); }
PPC_DEV float ppc_powf(float x, float y) { return powf(x, y); }
PPC_DEV double ppc_exp(double x) { return exp(x); }
PPC_DEV double ppc_log(double x) { return log(x); }
PPC_DEV double ppc_tanh(double x) { return tanh(x); }
PPC_DEV double ppc_erf(double x) { return erf(x); }
PPC_DEV double ppc_erfc(double x) { return erfc(x); }
PPC_DEV double ppc_sin(double x) { return sin(x); }
PPC_DEV double ppc_cos(double x) { return cos(x); }
PPC_DEV double ppc_pow(double x, double y) { return pow(x, y); }
PPC_DEV float ppc_sqrt(float x) { return sqrtf(x); }
PPC_DEV double ppc_sqrt(double x) { return sqrt(x); }
PPC_DEV float ppc_fabs(float x) { return fabsf(x); }
PPC_DEV double ppc_fabs(double x) { return fabs(x); }
#define PPC_INF HUGE_VAL
#define PPC_NAN ((double)NAN)
// Unrolling keeps a tile kernel's accumulator arrays in registers on the GPU; the host build
// gains nothing from it but compile time.
#define PPC_UNROLL
#else
#define PPC_UNROLL _Pragma("unroll")
#if defined(__CUDACC_RTC__)
#define PPC_GLOBAL extern "C" __global__
#define PPC_DEV static __device__ __forceinline__
#define PPC_TID threadIdx.x
#define PPC_BID blockIdx.x
#define PPC_BDIM blockDim.x
#define PPC_GDIM gridDim.x
#define PPC_EXTERN_DEV extern "C" __device__
#define PPC_SHARED __shared__
#define PPC_SYNC() __syncthreads()
#else // clang -x cuda -nocudainc
#define PPC_GLOBAL extern "C" __attribute__((global))
#define PPC_DEV static __attribute__((device)) __attribute__((always_inline)) inline
#define PPC_TID __nvvm_read_ptx_sreg_tid_x()
#define PPC_BID __nvvm_read_ptx_sreg_ctaid_x()
#define PPC_BDIM __nvvm_read_ptx_sreg_ntid_x()
#define PPC_GDIM __nvvm_read_ptx_sreg_nctaid_x()
#define PPC_EXTERN_DEV extern "C" __attribute__((device))
#define PPC_SHARED __attribute__((shared))
#define PPC_SYNC() __nvvm_bar_sync(0)
#endif
typedef unsigned char uint8_t;
typedef signed char int8_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
PPC_EXTERN_DEV float __nv_expf(float);
PPC_EXTERN_DEV float __nv_logf(float);
PPC_EXTERN_DEV float __nv_tanhf(float);
PPC_EXTERN_DEV float __nv_erff(float);
PPC_EXTERN_DEV float __nv_erfcf(float);
PPC_EXTERN_DEV float __nv_sinf(float);
PPC_EXTERN_DEV float __nv_cosf(float);
PPC_EXTERN_DEV float __nv_powf(float, float);
PPC_EXTERN_DEV double __nv_exp(double);
PPC_EXTERN_DEV double __nv_log(double);
PPC_EXTERN_DEV double __nv_tanh(double);
PPC_EXTERN_DEV double __nv_erf(double);
PPC_EXTERN_DEV double __nv_erfc(double);
PPC_EXTERN_DEV double __nv_sin(double);
PPC_EXTERN_DEV double __nv_cos(double);
PPC_EXTERN_DEV double __nv_pow(double, double);
PPC_EXTERN_DEV float __nv_sqrtf(float);
PPC_EXTERN_DEV double __nv_sqrt(double);
PPC_EXTERN_DEV float __nv_fabsf(float);
PPC_EXTERN_DEV double __nv_fabs(double);
PPC_EXTERN_DEV float __nv_int_as_float(int);
PPC_EXTERN_DEV double __nv_longlong_as_double(long long);
PPC_EXTERN_DEV int __nv_float_as_int(float);
PPC_DEV float ppc_bits_f32(uint32_t u) { return __nv_int_as_float((int)u); }
PPC_DEV uint32_t ppc_f32_bits(float f) { return (uint32_t)__nv_float_as_int(f); }
PPC_DEV float ppc_expf(float x) { return __nv_expf(x); }
PPC_DEV float ppc_logf(float x) { return __nv_logf(x); }
PPC_DEV float ppc_tanhf(float x) { return __nv_tanhf(x); }
PPC_DEV float ppc_erff(float x) { return __nv_erff(x); }
PPC_DEV float ppc_erfcf(float x) { return __nv_erfcf(x); }
PPC_DEV float ppc_sinf(float x) { return __nv_sinf(x); }
PPC_DEV float ppc_cosf(float x) { return __nv_cosf(x); }
PPC_DEV float ppc_powf(float x, float y) { return __nv_powf(x, y); }
PPC_DEV double ppc_exp(double x) { return __nv_exp(x); }
PPC_DEV double ppc_log(double x) { return __nv_log(x); }
PPC_DEV double ppc_tanh(double x) { return __nv_tanh(x); }
PPC_DEV double ppc_erf(double x) { return __nv_erf(x); }
PPC_DEV double ppc_erfc(double x) { return __nv_erfc(x); }
PPC_DEV double ppc_sin(double x) { return __nv_sin(x); }
PPC_DEV double ppc_cos(double x) { return __nv_cos(x); }
PPC_DEV double ppc_pow(double x, double y) { return __nv_pow(x, y); }
// libdevice's sqrt is correctly rounded (NVRTC's default --prec-sqrt=true), as the CPU's.
PPC_DEV float ppc_sqrt(float x) { return __nv_sqrtf(x); }
PPC_DEV double ppc_sqrt(double x) { return __nv_sqrt(x); }
PPC_DEV float ppc_fabs(float x) { return __nv_fabsf(x); }
PPC_DEV double ppc_fabs(double x) { return __nv_fabs(x); }
// Infinity and a quiet NaN as doubles, spelled by their bits: NVRTC has neither
// __builtin_huge_val nor __builtin_nan, and no <math.h>.
#define PPC_INF __nv_longlong_as_double(0x7ff0000000000000LL)
#define PPC_NAN __nv_longlong_as_double(0x7ff8000000000000LL)
#endif

// The grid-stride loop every elementwise kernel runs: any grid covers any size.
#define PPC_FOR_EACH(i, n) for (long long i = (long long)PPC_BID * PPC_BDIM + PPC_TID; i < (n); i += (long long)PPC_GDIM * PPC_BDIM)

// Overloads pick float or double math by the operand's type.
PPC_DEV long long ppc_fabs(long long x) { return x < 0 ? -x : x; }
PPC_DEV float ppc_expo(float x) { return ppc_expf(x); }
PPC_DEV double ppc_expo(double x) { return ppc_exp(x); }
PPC_DEV float ppc_loga(float x) { return ppc_logf(x); }
PPC_DEV double ppc_loga(double x) { return ppc_log(x); }
PPC_DEV float ppc_tanhy(float x) { return ppc_tanhf(x); }
PPC_DEV double ppc_tanhy(double x) { return ppc_tanh(x); }
PPC_DEV float ppc_erfy(float x) { return ppc_erff(x); }
PPC_DEV double ppc_erfy(double x) { return ppc_erf(x); }
PPC_DEV float ppc_erfcy(float x) { return ppc_erfcf(x); }
PPC_DEV double ppc_erfcy(double x) { return ppc_erfc(x); }
// The logistic function without overflow or cancellation on either side, as the CPU device's.
template <typename T> PPC_DEV T ppc_sigmoid(T z) {
  if (z >= 0) return 1 / (1 + ppc_expo(-z));
  T e = ppc_expo(z);
  return e / (1 + e);
}
// GELU: 0.5·x·erfc(−x/√2) (no cancellation for negative x), and the tanh form as
// x·σ(2·√(2/π)·(x + 0.044715·x³)).
template <typename T> PPC_DEV T ppc_gelu(T x) { return (T)0.5 * x * ppc_erfcy(-x * (T)0.7071067811865476); }
template <typename T> PPC_DEV T ppc_gelu_tanh(T x) {
  T u = (T)0.7978845608028654 * (x + (T)0.044715 * x * x * x);
  return x * ppc_sigmoid<T>(2 * u);
}
// Their derivatives, as the CPU device's kernels compute them.
template <typename T> PPC_DEV T ppc_gelu_grad(T x) {
  return (T)0.5 * ppc_erfcy(-x * (T)0.7071067811865476) + x * (T)0.3989422804014327 * ppc_expo((T)-0.5 * x * x);
}
template <typename T> PPC_DEV T ppc_gelu_tanh_grad(T x) {
  T u = (T)0.7978845608028654 * (x + (T)0.044715 * x * x * x);
  T du = (T)0.7978845608028654 * (1 + 3 * (T)0.044715 * x * x);
  T s = ppc_sigmoid<T>(2 * u);
  return s + 2 * x * s * (1 - s) * du;
}
PPC_DEV float ppc_sine(float x) { return ppc_sinf(x); }
PPC_DEV double ppc_sine(double x) { return ppc_sin(x); }
PPC_DEV float ppc_cosine(float x) { return ppc_cosf(x); }
PPC_DEV double ppc_cosine(double x) { return ppc_cos(x); }
PPC_DEV float ppc_power(float x, float y) { return ppc_powf(x, y); }
PPC_DEV double ppc_power(double x, double y) { return ppc_pow(x, y); }
// max and min propagate NaN, as the CPU device's (Go's math.Max and math.Min) do.
template <typename T> PPC_DEV T ppc_max(T x, T y) { return x != x ? x : y != y ? y : (x > y ? x : y); }
template <typename T> PPC_DEV T ppc_min(T x, T y) { return x != x ? x : y != y ? y : (x < y ? x : y); }
// Index maps of pad's edge, wrap and reflect modes (ONNX's: reflect does not repeat the
// edge element), as the CPU device's layoutPadIndex.
PPC_DEV long long ppc_clampi(long long i, long long lo, long long hi) { return i < lo ? lo : i > hi ? hi : i; }
PPC_DEV long long ppc_wrapi(long long i, long long d) { i %= d; return i < 0 ? i + d : i; }
PPC_DEV long long ppc_reflecti(long long i, long long d) {
  if (i >= 0 && i < d) return i;
  if (d == 1) return 0;
  long long p = 2 * (d - 1);
  i %= p;
  if (i < 0) i += p;
  return i >= d ? p - i : i;
}

// bf16: the high half of an f32; rounding to nearest even, NaN kept quiet.
PPC_DEV float ppc_bf16_f32(uint16_t h) { return ppc_bits_f32((uint32_t)h << 16); }
PPC_DEV uint16_t ppc_f32_bf16(float f) {
  uint32_t u = ppc_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// f16 (IEEE binary16), subnormals included; rounding to nearest even.
PPC_DEV float ppc_f16_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return ppc_bits_f32(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    float f = (float)m * 5.9604644775390625e-8f; // m · 2^-24
    return sign ? -f : f;
  }
  return ppc_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}
PPC_DEV uint16_t ppc_f32_f16(float f) {
  uint32_t x = ppc_f32_bits(f), sign = (x >> 16) & 0x8000u, e = (x >> 23) & 0xffu, m = x & 0x7fffffu;
  if (e == 0xff) return (uint16_t)(sign | 0x7c00u | (m ? 0x200u : 0u));
  int ee = (int)e - 112;
  if (ee >= 0x1f) return (uint16_t)(sign | 0x7c00u);
  if (ee <= 0) {
    if (ee < -10) return (uint16_t)sign;
    m |= 0x800000u;
    int shift = 14 - ee;
    uint32_t hm = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (hm & 1u))) hm++;
    return (uint16_t)(sign | hm);
  }
  uint32_t hm = m >> 13, rem = m & 0x1fffu;
  uint32_t h = sign | ((uint32_t)ee << 10) | hm;
  if (rem > 0x1000u || (rem == 0x1000u && (hm & 1u))) h++; // a carry rounds up into the exponent, or to infinity
  return (uint16_t)h;
}
PPC_DEV float ppc_round_bf16(float f) { return ppc_bf16_f32(ppc_f32_bf16(f)); }
PPC_DEV float ppc_round_f16(float f) { return ppc_f16_f32(ppc_f32_f16(f)); }
// Tensor-core products for the tile kernels (kernels_attention_mma.go): a warp adds to a
// 16×8 fp32 tile D the product of a 16×16 tile A and a 16×8 tile B of bf16 or f16, both in
// shared memory, as PTX's mma.sync.m16n8k16 (row-major A, column-major B). Each lane holds
// four elements of D: rows lane/4 and lane/4 + 8, columns 2·(lane%4) and the next. A
// fragment is what a lane needs of an operand: on sm_80 and later, the registers PTX's
// fragment layout gives it; on the host (and older GPUs) the tile's address, and the lane
// computes its four elements of D itself from the tiles — the same values by the same
// layout, so the host build checks every index the kernels compute, and only the register
// packing below is the GPU's alone.
//   ppc_frag_a(p, ld, lane):  A(r, k) at p[r·ld + k]
//   ppc_frag_bt(p, ld, lane): B(k, n) at p[n·ld + k] (B's columns are rows of p)
//   ppc_frag_b(p, ld, lane):  B(k, n) at p[k·ld + n]
// ld is 16·m + 8 and each row 16-byte aligned (tiles padded to 16 columns and placed at
// multiples of 8 columns, shared arrays 16-aligned): ldmatrix needs it.
#define PPC_ALIGN16 __attribute__((aligned(16)))
// ppc_copy16 copies eight 16-bit elements, ppc_zero16 zeroes eight: on the GPU one 16-byte
// access (both addresses 16-byte aligned), for staging a tile's rows from global to shared
// memory a vector at a time; on the host element by element (no aliasing tricks for C++).
#ifdef PPC_HOST
PPC_DEV void ppc_copy16(uint16_t* d, const uint16_t* s) { for (int k = 0; k < 8; k++) d[k] = s[k]; }
PPC_DEV void ppc_zero16(uint16_t* d) { for (int k = 0; k < 8; k++) d[k] = 0; }
#else
struct PPC_ALIGN16 ppc_v16 { uint32_t x, y, z, w; };
PPC_DEV void ppc_copy16(uint16_t* d, const uint16_t* s) { *(ppc_v16*)d = *(const ppc_v16*)s; }
PPC_DEV void ppc_zero16(uint16_t* d) { ppc_v16 z = {0, 0, 0, 0}; *(ppc_v16*)d = z; }
#endif
#if defined(PPC_HOST) || !defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 800
struct ppc_fa { const uint16_t* p; int ld; };
struct ppc_fb { const uint16_t* p; int ld; int kn; };
PPC_DEV ppc_fa ppc_frag_a(const uint16_t* p, int ld, int lane) { (void)lane; ppc_fa f = {p, ld}; return f; }
PPC_DEV ppc_fb ppc_frag_bt(const uint16_t* p, int ld, int lane) { (void)lane; ppc_fb f = {p, ld, 0}; return f; }
PPC_DEV ppc_fb ppc_frag_b(const uint16_t* p, int ld, int lane) { (void)lane; ppc_fb f = {p, ld, 1}; return f; }
PPC_DEV float ppc_mma_widen(uint16_t h, int f16) { return f16 ? ppc_f16_f32(h) : ppc_bf16_f32(h); }
PPC_DEV void ppc_mma_lane(float& c0, float& c1, float& c2, float& c3, ppc_fa a, ppc_fb b, int lane, int f16) {
  const int g = lane >> 2, t = lane & 3;
  float s[4] = {0, 0, 0, 0};
  for (int i = 0; i < 4; i++) {
    const int r = g + (i >= 2 ? 8 : 0), n = 2 * t + (i & 1);
    for (int k = 0; k < 16; k++)
      s[i] += ppc_mma_widen(a.p[r * a.ld + k], f16) * ppc_mma_widen(b.kn ? b.p[k * b.ld + n] : b.p[n * b.ld + k], f16);
  }
  c0 += s[0]; c1 += s[1]; c2 += s[2]; c3 += s[3];
}
PPC_DEV void ppc_mma_bf16(float& c0, float& c1, float& c2, float& c3, ppc_fa a, ppc_fb b, int lane) { ppc_mma_lane(c0, c1, c2, c3, a, b, lane, 0); }
PPC_DEV void ppc_mma_f16(float& c0, float& c1, float& c2, float& c3, ppc_fa a, ppc_fb b, int lane) { ppc_mma_lane(c0, c1, c2, c3, a, b, lane, 1); }
#else
struct ppc_fa { uint32_t r0, r1, r2, r3; };
struct ppc_fb { uint32_t r0, r1; };
// A: a lane's registers hold (row g, columns 2t, 2t+1), (g+8, 2t, 2t+1), (g, 2t+8, 2t+9),
// (g+8, 2t+8, 2t+9), the lower column in the lower half; B: (rows 2t, 2t+1, column g) and
// (rows 2t+8, 2t+9, column g) — PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating
// point type". ldmatrix loads them a warp at a time: each 8×8 matrix of 16-bit elements from
// eight row addresses (lanes 8i…8i+7 give matrix i's), lane l receiving row l/4's elements
// 2(l%4) and 2(l%4)+1 — the A fragment's layout for A's four 8×8 quarters, and with .trans
// the B fragment's for a row-major [k, n] tile. One instruction where 32-bit loads took four
// (A), two (Bᵀ) or four 16-bit loads a register (B). Rows are 16-byte aligned: shared arrays
// are, tiles start at multiples of 8 columns, and row strides are 16·m + 8 elements.
PPC_DEV uint32_t ppc_smem(const void* p) {
  uint32_t a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}
PPC_DEV ppc_fa ppc_frag_a(const uint16_t* p, int ld, int lane) {
  const int i = lane >> 3;
  const uint32_t a = ppc_smem(p + ((lane & 7) + 8 * (i & 1)) * ld + 8 * (i >> 1));
  ppc_fa f;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(f.r0), "=r"(f.r1), "=r"(f.r2), "=r"(f.r3) : "r"(a) : "memory");
  return f;
}
PPC_DEV ppc_fb ppc_frag_bt(const uint16_t* p, int ld, int lane) {
  const uint32_t a = ppc_smem(p + (lane & 7) * ld + 8 * ((lane >> 3) & 1));
  ppc_fb f;
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(f.r0), "=r"(f.r1) : "r"(a) : "memory");
  return f;
}
PPC_DEV ppc_fb ppc_frag_b(const uint16_t* p, int ld, int lane) {
  const uint32_t a = ppc_smem(p + (lane & 15) * ld);
  ppc_fb f;
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(f.r0), "=r"(f.r1) : "r"(a) : "memory");
  return f;
}
PPC_DEV void ppc_mma_bf16(float& c0, float& c1, float& c2, float& c3, ppc_fa a, ppc_fb b, int lane) {
  (void)lane;
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
               : "r"(a.r0), "r"(a.r1), "r"(a.r2), "r"(a.r3), "r"(b.r0), "r"(b.r1));
}
PPC_DEV void ppc_mma_f16(float& c0, float& c1, float& c2, float& c3, ppc_fa a, ppc_fb b, int lane) {
  (void)lane;
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
               : "r"(a.r0), "r"(a.r1), "r"(a.r2), "r"(a.r3), "r"(b.r0), "r"(b.r1));
}
#endif
#endif // PPC_CUDA_H
