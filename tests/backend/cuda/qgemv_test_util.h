// Builders shared by the quantized GEMV tests (qgemv_test.cpp: the
// CUDA-core kernels, qgemv_mma_test.cpp: the tensor-core one,
// qgemv_dp4a*_test.cpp: the int8 one): random GGUF blocks with sane f16
// scales, FP8 scales, the layout the upload gives the kernels (Q6_K_R8
// repacked), the CPU reference dequantizer's rows, the host's run of the
// kernels' own block decoders, the part of an output inside [m, n], and the
// int8 activation rows of the int8 GEMV as the host computes them.
//
// Thread-safety: test-only helpers; call from the test thread.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/kernels/qgemv.cuh"
#include "backend/cuda/kernels/quant_blocks.h"
#include "backend/cuda/kernels/quant_blocks_q6r8.h"
#include "cellm/status.h"
#include "format/fp8.h"
#include "format/ggml_types.h"
#include "gpu_test_util.h"

namespace cellm::cuda::qgemv_test {

// Where a block keeps its f16 scales (the rest is quants: any bytes are valid).
inline std::vector<int> half_fields(QuantType type) {
  switch (type) {
    case QuantType::kQ4_1:
    case QuantType::kQ5_1: return {0, 2};    // d, m
    case QuantType::kQ2_K: return {80, 82};  // d, dmin after the scales and quants
    case QuantType::kQ3_K: return {108};     // d last
    case QuantType::kQ4_K:
    case QuantType::kQ5_K: return {0, 2};  // d, dmin
    case QuantType::kQ6_K: return {208};   // d after ql, qh and the scales
    case QuantType::kF8_E4M3: return {};   // scales beside the rows
    default: return {0};                   // d first
  }
}

// n rows of random blocks, ldw_bytes apart, with f16 scales of 2^-7..2^-3
// (either sign, except Q4_K's d and dmin, which its quantizer keeps >= 0).
inline std::vector<std::uint8_t> random_rows(QuantType type, int n, int k, std::int64_t ldw_bytes,
                                             std::mt19937& rng) {
  const int block_bytes = quant_block_bytes(type);
  const int blocks = k / quant_block_elems(type);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(n * ldw_bytes));
  std::uniform_int_distribution<int> byte(0, 255), exponent(8, 12), mantissa(0, 1023), sign(0, 1);
  for (auto& b : out) b = static_cast<std::uint8_t>(byte(rng));
  if (type == QuantType::kF8_E4M3) {
    for (auto& b : out) b = (b & 0x7f) == 0x7f ? 0 : b;  // no NaN codes
  }
  for (int r = 0; r < n; ++r) {
    for (int b = 0; b < blocks; ++b) {
      std::uint8_t* block = out.data() + r * ldw_bytes + static_cast<std::int64_t>(b) * block_bytes;
      for (int at : half_fields(type)) {
        const bool negative =
            type != QuantType::kQ4_K && type != QuantType::kQ5_K && sign(rng) == 1;
        const auto bits = static_cast<std::uint16_t>((negative ? 0x8000 : 0) |
                                                     (exponent(rng) << 10) | mantissa(rng));
        std::memcpy(block + at, &bits, 2);
      }
    }
  }
  return out;
}

// FP8 rows' scales: one per row and `cols` columns, random in 2^-10..2^-5.
struct Fp8Scales {
  std::vector<float> values;
  int cols = 0;
  std::int64_t ld = 0;
};
inline Fp8Scales random_scales(int n, int k, int cols, std::mt19937& rng) {
  Fp8Scales s;
  s.cols = cols;
  s.ld = (k + cols - 1) / cols + 1;  // padded, as a part's slice of a wider grid is
  std::uniform_real_distribution<float> exponent(-10.0f, -5.0f);
  s.values.resize(static_cast<std::size_t>(n * s.ld));
  for (float& v : s.values) v = std::exp2(exponent(rng));
  return s;
}

inline std::string type_name(QuantType type) {
  switch (type) {
    case QuantType::kF8_E4M3: return "F8_E4M3";
    case QuantType::kQ6_K_R8: return "Q6_K_R8";
    default: return std::string(format::ggml_type_name(static_cast<format::GgmlType>(type)));
  }
}

// The type of the file's rows a case starts from (Q6_K_R8: Q6_K).
inline QuantType file_type(QuantType type) {
  return type == QuantType::kQ6_K_R8 ? QuantType::kQ6_K : type;
}

// The file's rows as the kernels get them: Q6_K_R8 repacked (the stride's
// padding copied), the others as they are.
inline std::vector<std::uint8_t> device_rows(QuantType type, const std::vector<std::uint8_t>& rows,
                                             int n, int k, std::int64_t ldw_bytes) {
  if (type != QuantType::kQ6_K_R8) return rows;
  std::vector<std::uint8_t> out = rows;
  qblocks::repack_q6k_r8_rows(rows.data(), out.data(), n, ldw_bytes, k);
  return out;
}

// Row r of the weights as the CPU's reference dequantizer reads it (FP8:
// format's decoding table times the row's scales).
inline std::vector<float> dequantized_row(QuantType type, const std::vector<std::uint8_t>& rows,
                                          int r, int k, std::int64_t ldw_bytes,
                                          const Fp8Scales& scales) {
  if (type == QuantType::kF8_E4M3) {
    std::vector<float> out(static_cast<std::size_t>(k));
    for (int c = 0; c < k; ++c) {
      out[static_cast<std::size_t>(c)] =
          format::e4m3_to_f32(rows[static_cast<std::size_t>(r * ldw_bytes + c)]) *
          scales.values[static_cast<std::size_t>(r * scales.ld + c / scales.cols)];
    }
    return out;
  }
  const std::size_t bytes =
      static_cast<std::size_t>(k / quant_block_elems(type)) * quant_block_bytes(type);
  std::vector<float> out(static_cast<std::size_t>(k));
  const Status s = format::dequantize_f32(
      static_cast<format::GgmlType>(type),
      std::span<const std::uint8_t>(rows.data() + r * ldw_bytes, bytes), out);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return out;
}

// The host's run of decoder D over the file's rows: each weight as the
// kernels decode it (FP8 times its scale), rounded to bf16.
template <class D>
void decode_rows_as(const std::vector<std::uint8_t>& rows, int n, int k, std::int64_t ldw_bytes,
                    const Fp8Scales& scales, std::vector<float>& out) {
  const int blocks = k / D::kBlockElems;
  for (int r = 0; r < n; ++r) {
    for (int grp = 0; grp < (k + 255) / 256; ++grp) {
      for (int lane = 0; lane < 32; ++lane) {
        if (!D::valid(grp, lane, blocks)) continue;
        typename D::Raw raw;
        D::load(raw, rows.data() + r * ldw_bytes, grp, lane);
        float w[8];
        D::decode(raw, lane, w);
        if constexpr (qblocks::scaled_v<D>) {
          const float scale = scales.values[static_cast<std::size_t>(
              r * scales.ld + D::pos(grp, lane, 0) / scales.cols)];
          for (float& v : w) v *= scale;
        }
        for (int run = 0; run < D::kRuns; ++run) {
          for (int i = 0; i < D::kRunLen; ++i) {
            out[static_cast<std::size_t>(r) * k + D::pos(grp, lane, run) + i] =
                testing::from_bf16(testing::to_bf16(w[run * D::kRunLen + i]));
          }
        }
      }
    }
  }
}

// [n, k] weights from the file's rows of `type` (Q6_K_R8 cases pass the
// Q6_K rows they repacked).
inline std::vector<float> host_decoded(QuantType type, const std::vector<std::uint8_t>& rows, int n,
                                       int k, std::int64_t ldw_bytes, const Fp8Scales& scales) {
  std::vector<float> out(static_cast<std::size_t>(n) * k);
  using namespace qblocks;  // NOLINT(google-build-using-namespace): the decoders
  switch (file_type(type)) {
    case QuantType::kQ4_0: decode_rows_as<Q4_0>(rows, n, k, ldw_bytes, scales, out); break;
    case QuantType::kQ4_1: decode_rows_as<Q4_1>(rows, n, k, ldw_bytes, scales, out); break;
    case QuantType::kQ5_0: decode_rows_as<Q5_0>(rows, n, k, ldw_bytes, scales, out); break;
    case QuantType::kQ5_1: decode_rows_as<Q5_1>(rows, n, k, ldw_bytes, scales, out); break;
    case QuantType::kQ8_0: decode_rows_as<Q8_0>(rows, n, k, ldw_bytes, scales, out); break;
    case QuantType::kQ2_K: decode_rows_as<Q2_K>(rows, n, k, ldw_bytes, scales, out); break;
    case QuantType::kQ3_K: decode_rows_as<Q3_K>(rows, n, k, ldw_bytes, scales, out); break;
    case QuantType::kQ4_K: decode_rows_as<Q4_K>(rows, n, k, ldw_bytes, scales, out); break;
    case QuantType::kQ5_K: decode_rows_as<Q5_K>(rows, n, k, ldw_bytes, scales, out); break;
    case QuantType::kQ6_K: decode_rows_as<Q6_K>(rows, n, k, ldw_bytes, scales, out); break;
    case QuantType::kIQ4_XS: decode_rows_as<IQ4_XS>(rows, n, k, ldw_bytes, scales, out); break;
    case QuantType::kF8_E4M3: decode_rows_as<F8_E4M3>(rows, n, k, ldw_bytes, scales, out); break;
    case QuantType::kQ6_K_R8: ADD_FAILURE() << "Q6_K_R8 rows decode as their file's Q6_K"; break;
  }
  return out;
}

// A call validate() accepts, over static host buffers it never reads: Q4_K,
// n = 4, k = 256 (one super-block a row), float output, `m` rows. The
// refusal tests change one field at a time.
inline QGemvParams valid_small_call(int m) {
  alignas(16) static bf16 a[4096];
  alignas(16) static std::uint8_t w[8192];
  alignas(16) static float out[64];
  QGemvParams p;
  p.a = a;
  p.w = w;
  p.out = out;
  p.out_f32 = true;
  p.type = QuantType::kQ4_K;
  p.m = m;
  p.n = 4;
  p.k = 256;
  p.lda = 256;
  p.ldw_bytes = 144;
  p.ldc = 4;
  return p;
}

// The [m, n] corner of an [m, ldc] output read back as floats; the columns
// past n, poisoned before the launch, must still be NaN (nothing stored
// outside [m, n]).
inline std::vector<float> inside_columns(const std::vector<float>& got, int m, int n, int ldc) {
  std::vector<float> inside(static_cast<std::size_t>(m) * n);
  for (int row = 0; row < m; ++row) {
    for (int col = 0; col < ldc; ++col) {
      const float v = got[static_cast<std::size_t>(row) * ldc + col];
      if (col < n) {
        inside[static_cast<std::size_t>(row) * n + col] = v;
      } else {
        EXPECT_TRUE(std::isnan(v)) << "store outside [m, n] at row " << row << " col " << col;
      }
    }
  }
  return inside;
}

// The activation quantization as the kernel defines it: per 32-block,
// d = max|x| / 127, code = rint(x * (127 / max)), s = d * sum(codes).
struct HostQ8 {
  std::vector<std::int8_t> q;  // [m, k]
  std::vector<float> d, s;     // [m, k / 32]
};
inline HostQ8 quantize_host(const std::vector<float>& a, int m, int k, int lda) {
  HostQ8 out;
  out.q.resize(static_cast<std::size_t>(m) * k);
  out.d.resize(static_cast<std::size_t>(m) * (k / 32));
  out.s.resize(out.d.size());
  for (int r = 0; r < m; ++r) {
    for (int b = 0; b < k / 32; ++b) {
      const float* x = a.data() + static_cast<std::size_t>(r) * lda + 32 * b;
      float amax = 0.0f;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
      const float d = amax / 127.0f;
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      int sum = 0;
      for (int i = 0; i < 32; ++i) {
        const int q = static_cast<int>(std::nearbyint(x[i] * inv));
        sum += q;
        out.q[static_cast<std::size_t>(r) * k + 32 * b + i] = static_cast<std::int8_t>(q);
      }
      const std::size_t at = static_cast<std::size_t>(r) * (k / 32) + b;
      out.d[at] = d;
      out.s[at] = d * static_cast<float>(sum);
    }
  }
  return out;
}

}  // namespace cellm::cuda::qgemv_test
