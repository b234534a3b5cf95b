#include "backend/cuda/gemm_fp8.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/cuda/kernels/validate_util.h"
#include "backend/cuda/lt_common.h"
#include "backend/cuda/resources.h"

namespace cellm::cuda {
namespace {

using lt::lt_status;
using lt::set_desc;

struct PlanKey {
  std::int64_t m, n, k, lda, ldb, ldc;
  DType out_dtype;
  bool bias;
  bool fast_accum;
  friend bool operator==(const PlanKey&, const PlanKey&) = default;
};

struct PlanKeyHash {
  std::size_t operator()(const PlanKey& key) const {
    std::size_t h = 1469598103934665603ull;
    for (const std::int64_t v :
         {key.m, key.n, key.k, key.lda, key.ldb, key.ldc, static_cast<std::int64_t>(key.out_dtype),
          static_cast<std::int64_t>(key.bias)}) {
      h = (h ^ std::hash<std::int64_t>{}(v)) * 1099511628211ull;
    }
    return h;
  }
};

// The plans are lt::Plan's TN form, in which cuBLASLt's M is our n: its A
// scales are the weight's row scales, its B scales the activations'.
using lt::Plan;

// The self-check's product: small, but past one tile in every dimension.
constexpr std::int64_t kCheckM = 24, kCheckN = 80, kCheckK = 256;

// A normal E4M3 code's value: 2^(e - 7) * (1 + mantissa / 8).
double e4m3_normal_value(std::uint8_t code) {
  const int e = (code >> 3) & 0xF;
  const double v = std::ldexp(1.0 + (code & 7) / 8.0, e - 7);
  return (code & 0x80) != 0 ? -v : v;
}

float bf16_bits_to_float(std::uint16_t bits) {
  const std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
  float f = 0.0f;
  std::memcpy(&f, &wide, sizeof(f));
  return f;
}

}  // namespace

struct Fp8GemmRunner::Impl : lt::RunnerState<PlanKey, PlanKeyHash> {
  // Shapes cuBLASLt has no algorithm for, so later calls fail at once
  // (capture included) instead of asking its heuristic again.
  std::unordered_set<PlanKey, PlanKeyHash> unsupported;

  Result<const Plan*> plan_for(const Fp8GemmArgs& args) {
    const PlanKey key{args.m,         args.n,   args.k,         args.lda,
                      args.ldb,       args.ldc, args.out_dtype, args.bias != nullptr,
                      args.fast_accum};
    if (auto it = plans.find(key); it != plans.end()) return &it->second;
    if (unsupported.count(key) != 0) {
      return not_supported("cuda fp8 gemm: no cuBLASLt FP8 algorithm for m={} n={} k={}", args.m,
                           args.n, args.k);
    }
    CELLM_ASSIGN_OR_RETURN(Plan plan, lt::start_plan(CUDA_R_8F_E4M3, args));
    cublasLtMatmulDesc_t desc = plan.desc.get();
    // One float per row of each operand, multiplied into the float sums
    // before the bias and the output conversion.
    const std::int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    CELLM_RETURN_IF_ERROR(
        set_desc(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, outer, "set A_SCALE_MODE"));
    CELLM_RETURN_IF_ERROR(
        set_desc(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, outer, "set B_SCALE_MODE"));
    const std::int8_t fast_accum = args.fast_accum ? 1 : 0;
    CELLM_RETURN_IF_ERROR(
        set_desc(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast_accum, "set FAST_ACCUM"));
    // The scale pointers are set per run (they differ per projection); the
    // heuristic needs them set to something of the right kind.
    CELLM_RETURN_IF_ERROR(set_scales(plan, args));
    CELLM_ASSIGN_OR_RETURN(lt::PrefPtr pref, lt::make_preference(workspace_bytes));
    cublasLtMatmulHeuristicResult_t result = {};
    int count = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        handle.get(), desc, plan.a_layout.get(), plan.b_layout.get(), plan.c_layout.get(),
        plan.c_layout.get(), pref.get(), 1, &result, &count);
    // Older GPUs and libraries reject the scale mode itself rather than
    // return no algorithm: both mean "not here".
    if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE ||
        (status == CUBLAS_STATUS_SUCCESS && count == 0)) {
      unsupported.insert(key);
      return not_supported(
          "cuda fp8 gemm: no cuBLASLt FP8 algorithm with per-row scales for m={} n={} k={} "
          "({} output; cublasStatus_t {})",
          args.m, args.n, args.k, dtype_name(args.out_dtype), static_cast<int>(status));
    }
    CELLM_RETURN_IF_ERROR(lt_status(status, "cublasLtMatmulAlgoGetHeuristic"));
    plan.algo = result.algo;
    auto [it, inserted] = plans.emplace(key, std::move(plan));
    return &it->second;
  }

  // Host-side descriptor writes only: nothing is enqueued, so a captured
  // run bakes in the pointers of its call.
  static Status set_scales(const Plan& plan, const Fp8GemmArgs& args) {
    const void* weight_scales = args.b_scales;
    const void* act_scales = args.a_scales;
    CELLM_RETURN_IF_ERROR(set_desc(plan.desc.get(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                   weight_scales, "set A_SCALE_POINTER"));
    CELLM_RETURN_IF_ERROR(set_desc(plan.desc.get(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                   act_scales, "set B_SCALE_POINTER"));
    if (args.bias == nullptr) return Status::ok();
    return set_desc(plan.desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, args.bias,
                    "set BIAS_POINTER");
  }

  Status run(const Fp8GemmArgs& args, void* workspace, cudaStream_t stream) {
    CELLM_ASSIGN_OR_RETURN(const Plan* plan, plan_for(args));
    CELLM_RETURN_IF_ERROR(set_scales(*plan, args));
    const float alpha = 1.0f;
    const float beta = 0.0f;
    return lt_status(
        cublasLtMatmul(handle.get(), plan->desc.get(), &alpha, args.b, plan->a_layout.get(), args.a,
                       plan->b_layout.get(), &beta, args.out, plan->c_layout.get(), args.out,
                       plan->c_layout.get(), &plan->algo, workspace, workspace_bytes, stream),
        "cublasLtMatmul (fp8)");
  }
};

Status Fp8GemmArgs::validate() const {
  CELLM_RETURN_IF_ERROR(require_ptr(a, "fp8 gemm", "a"));
  CELLM_RETURN_IF_ERROR(require_ptr(b, "fp8 gemm", "b"));
  CELLM_RETURN_IF_ERROR(require_ptr(a_scales, "fp8 gemm", "a_scales"));
  CELLM_RETURN_IF_ERROR(require_ptr(b_scales, "fp8 gemm", "b_scales"));
  CELLM_RETURN_IF_ERROR(require_ptr(out, "fp8 gemm", "out"));
  if (m <= 0 || n <= 0 || k <= 0 || lda < k || ldb < k || ldc < n) {
    return invalid_argument(
        "cuda fp8 gemm: m={} n={} k={} lda={} ldb={} ldc={} (need positive sizes, "
        "lda, ldb >= k and ldc >= n)",
        m, n, k, lda, ldb, ldc);
  }
  // FP8 operands are read 16 bytes at a time: 16 codes.
  if (k % 16 != 0 || lda % 16 != 0 || ldb % 16 != 0 || ldc % 8 != 0) {
    return invalid_argument(
        "cuda fp8 gemm: k={} lda={} ldb={} must be multiples of 16 and ldc={} of 8", k, lda, ldb,
        ldc);
  }
  if (out_dtype != DType::kBF16 && out_dtype != DType::kF32) {
    return not_supported("cuda fp8 gemm: output dtype {} (bf16 or f32 only)",
                         dtype_name(out_dtype));
  }
  for (const void* ptr : {a, b, static_cast<const void*>(out)}) {
    CELLM_RETURN_IF_ERROR(require_aligned16(ptr, "fp8 gemm", "a/b/out"));
  }
  for (const void* ptr : {static_cast<const void*>(a_scales), static_cast<const void*>(b_scales)}) {
    if (reinterpret_cast<std::uintptr_t>(ptr) % alignof(float) != 0) {
      return invalid_argument("cuda fp8 gemm: a scale vector is not float-aligned");
    }
  }
  if (bias != nullptr) {
    if (out_dtype != DType::kBF16) {
      return not_supported("cuda fp8 gemm: a bias needs bf16 output (got {})",
                           dtype_name(out_dtype));
    }
    CELLM_RETURN_IF_ERROR(require_aligned16(bias, "fp8 gemm", "bias"));
  }
  return Status::ok();
}

Result<Fp8GemmRunner> Fp8GemmRunner::create(std::size_t workspace_bytes) {
  auto impl = std::make_unique<Impl>();
  CELLM_RETURN_IF_ERROR(impl->start(workspace_bytes));
  return Fp8GemmRunner(std::move(impl));
}

Fp8GemmRunner::Fp8GemmRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Fp8GemmRunner::Fp8GemmRunner(Fp8GemmRunner&&) noexcept = default;
Fp8GemmRunner& Fp8GemmRunner::operator=(Fp8GemmRunner&&) noexcept = default;
Fp8GemmRunner::~Fp8GemmRunner() = default;

std::size_t Fp8GemmRunner::workspace_bytes() const {
  return impl_->workspace_bytes;
}
std::size_t Fp8GemmRunner::cached_plans() const {
  return impl_->plans.size();
}

Status Fp8GemmRunner::run(const Fp8GemmArgs& args, void* workspace, cudaStream_t stream) {
  CELLM_RETURN_IF_ERROR(args.validate());
  CELLM_RETURN_IF_ERROR(impl_->check_workspace(workspace, "cuda fp8 gemm"));
  return impl_->run(args, workspace, stream);
}

Status Fp8GemmRunner::self_check(void* workspace, cudaStream_t stream) {
  constexpr std::int64_t m = kCheckM, n = kCheckN, k = kCheckK;
  // Normal codes only (exponent fields 4..10: magnitudes 1/8 to 15), signs
  // mixed, from a fixed LCG; every row and column its own scale, so scales
  // that are ignored, swapped or read per the wrong operand show.
  std::vector<std::uint8_t> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(n * k));
  std::uint32_t state = 12345u;
  auto next_code = [&state]() {
    state = state * 1664525u + 1013904223u;
    const std::uint32_t r = state >> 8;
    return static_cast<std::uint8_t>(((r & 1u) << 7) | ((4u + (r >> 1) % 7u) << 3) |
                                     ((r >> 4) & 7u));
  };
  for (auto& c : a) c = next_code();
  for (auto& c : b) c = next_code();
  std::vector<float> sa(static_cast<std::size_t>(m)), sb(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < m; ++i)
    sa[static_cast<std::size_t>(i)] = 0.25f * static_cast<float>(i + 1);
  for (std::int64_t j = 0; j < n; ++j)
    sb[static_cast<std::size_t>(j)] = std::ldexp(1.0f, static_cast<int>(j % 9) - 6);

  CELLM_ASSIGN_OR_RETURN(auto d_a, DeviceBuffer<std::uint8_t>::allocate(a.size()));
  CELLM_ASSIGN_OR_RETURN(auto d_b, DeviceBuffer<std::uint8_t>::allocate(b.size()));
  CELLM_ASSIGN_OR_RETURN(auto d_sa, DeviceBuffer<float>::allocate(sa.size()));
  CELLM_ASSIGN_OR_RETURN(auto d_sb, DeviceBuffer<float>::allocate(sb.size()));
  CELLM_ASSIGN_OR_RETURN(auto d_out,
                         DeviceBuffer<std::uint16_t>::allocate(static_cast<std::size_t>(m * n)));
  const auto copy = [](void* to, const void* from, std::size_t bytes) {
    const cudaError_t e = cudaMemcpy(to, from, bytes, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? Status::ok()
                            : internal_error("cuda fp8 gemm check: {}", cudaGetErrorString(e));
  };
  CELLM_RETURN_IF_ERROR(copy(d_a.data(), a.data(), a.size()));
  CELLM_RETURN_IF_ERROR(copy(d_b.data(), b.data(), b.size()));
  CELLM_RETURN_IF_ERROR(copy(d_sa.data(), sa.data(), sa.size() * sizeof(float)));
  CELLM_RETURN_IF_ERROR(copy(d_sb.data(), sb.data(), sb.size() * sizeof(float)));
  Fp8GemmArgs args;
  args.a = d_a.data();
  args.a_scales = d_sa.data();
  args.b = d_b.data();
  args.b_scales = d_sb.data();
  args.out = d_out.data();
  args.m = m;
  args.n = n;
  args.k = k;
  args.lda = k;
  args.ldb = k;
  args.ldc = n;
  CELLM_RETURN_IF_ERROR(run(args, workspace, stream));
  std::vector<std::uint16_t> got(static_cast<std::size_t>(m * n));
  if (const cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) {
    return internal_error("cuda fp8 gemm check: {}", cudaGetErrorString(e));
  }
  if (const cudaError_t e = cudaMemcpy(got.data(), d_out.data(), got.size() * sizeof(std::uint16_t),
                                       cudaMemcpyDeviceToHost);
      e != cudaSuccess) {
    return internal_error("cuda fp8 gemm check: {}", cudaGetErrorString(e));
  }
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double sum = 0.0, magnitude = 0.0;
      for (std::int64_t c = 0; c < k; ++c) {
        const double p = e4m3_normal_value(a[static_cast<std::size_t>(i * k + c)]) *
                         e4m3_normal_value(b[static_cast<std::size_t>(j * k + c)]);
        sum += p;
        magnitude += std::fabs(p);
      }
      const double scale = static_cast<double>(sa[static_cast<std::size_t>(i)]) *
                           static_cast<double>(sb[static_cast<std::size_t>(j)]);
      const double want = sum * scale;
      const double have = bf16_bits_to_float(got[static_cast<std::size_t>(i * n + j)]);
      // The bf16 rounding of the result (2^-9 of it) and the tensor cores'
      // narrower partial sums (2^-13 of the terms' magnitude or so), far
      // below what a misapplied scale (a factor of 2 or more) makes.
      if (!(std::fabs(have - want) <= 4e-3 * std::fabs(want) + 1e-3 * magnitude * scale)) {
        return internal_error(
            "cuda fp8 gemm check: out[{}, {}] = {} where the codes and scales give {}: cuBLASLt's "
            "per-row scales are not applied as expected",
            i, j, have, want);
      }
    }
  }
  return Status::ok();
}

}  // namespace cellm::cuda
