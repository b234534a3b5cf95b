#include "backend/cuda/gemm.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <unordered_map>

#include "backend/cuda/kernels/validate_util.h"
#include "backend/cuda/lt_common.h"

namespace cellm::cuda {
namespace {

struct PlanKey {
  std::int64_t m, n, k, lda, ldb, ldc;
  DType out_dtype;
  bool bias;
  bool accumulate;
  bool autotune;
  int candidates;
  friend bool operator==(const PlanKey&, const PlanKey&) = default;
};

struct PlanKeyHash {
  std::size_t operator()(const PlanKey& key) const {
    std::size_t h = 1469598103934665603ull;
    for (const std::int64_t v :
         {key.m, key.n, key.k, key.lda, key.ldb, key.ldc, static_cast<std::int64_t>(key.out_dtype),
          static_cast<std::int64_t>(key.bias), static_cast<std::int64_t>(key.accumulate),
          static_cast<std::int64_t>(key.autotune), static_cast<std::int64_t>(key.candidates)}) {
      h = (h ^ std::hash<std::int64_t>{}(v)) * 1099511628211ull;
    }
    return h;
  }
};

using lt::lt_status;
using lt::Plan;
using lt::PrefPtr;

constexpr int kTimedRuns = 5;  // per candidate; the fastest counts
// Another candidate replaces the heuristic's first only when this much
// faster: smaller gaps are within the timing's noise, and a choice that
// flips between runs makes step times flip with it.
constexpr float kRequiredGain = 0.95f;
constexpr std::size_t kFlushBytes = std::size_t{256} << 20;  // > 4x the H200's L2

struct EventDeleter {
  void operator()(cudaEvent_t e) const noexcept { cudaEventDestroy(e); }
};
using EventPtr = std::unique_ptr<CUevent_st, EventDeleter>;

Status cuda_status(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    return internal_error("cuda gemm: {} failed: {}", what, cudaGetErrorString(error));
  }
  return Status::ok();
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &status) != cudaSuccess ||
         status != cudaStreamCaptureStatusNone;
}

}  // namespace

struct GemmRunner::Impl : lt::RunnerState<PlanKey, PlanKeyHash> {
  // Written between an autotune's timed runs so each starts with a cold L2, as
  // a decode step's weights do. Allocated by the first autotune (at warm-up).
  std::unique_ptr<void, decltype(&cudaFree)> flush{nullptr, &cudaFree};

  Status set_bias(const Plan& plan, const GemmArgs& args) {
    if (args.bias == nullptr) return Status::ok();
    return lt_status(
        cublasLtMatmulDescSetAttribute(plan.desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                       &args.bias, sizeof(args.bias)),
        "set BIAS_POINTER");
  }

  cublasStatus_t matmul(const Plan& plan, const cublasLtMatmulAlgo_t& algo, const GemmArgs& args,
                        void* workspace, cudaStream_t stream) {
    const float alpha = 1.0f;
    const float beta = args.accumulate ? 1.0f : 0.0f;
    return cublasLtMatmul(handle.get(), plan.desc.get(), &alpha, args.b, plan.a_layout.get(),
                          args.a, plan.b_layout.get(), &beta, args.out, plan.c_layout.get(),
                          args.out, plan.c_layout.get(), &algo, workspace, workspace_bytes, stream);
  }

  // The candidate that ran fastest on these operands; candidates that fail
  // to run are skipped. Outputs are overwritten (beta = 0), so the operands
  // end as one plain run leaves them.
  Result<int> fastest(const Plan& plan, const cublasLtMatmulHeuristicResult_t* results, int count,
                      const GemmArgs& args, void* workspace, cudaStream_t stream) {
    if (!flush) {
      void* raw = nullptr;
      if (cudaMalloc(&raw, kFlushBytes) != cudaSuccess) {
        cudaGetLastError();  // no room to flush L2: keep the heuristic's choice
        return 0;
      }
      flush.reset(raw);
    }
    cudaEvent_t raw_start = nullptr;
    cudaEvent_t raw_stop = nullptr;
    CELLM_RETURN_IF_ERROR(cuda_status(cudaEventCreate(&raw_start), "cudaEventCreate"));
    EventPtr start(raw_start);
    CELLM_RETURN_IF_ERROR(cuda_status(cudaEventCreate(&raw_stop), "cudaEventCreate"));
    EventPtr stop(raw_stop);
    CELLM_RETURN_IF_ERROR(set_bias(plan, args));
    int best = 0;
    float best_ms = std::numeric_limits<float>::infinity();
    for (int c = 0; c < count; ++c) {
      float ms = std::numeric_limits<float>::infinity();
      for (int run = 0; run < kTimedRuns; ++run) {
        CELLM_RETURN_IF_ERROR(
            cuda_status(cudaMemsetAsync(flush.get(), run, kFlushBytes, stream), "L2 flush"));
        CELLM_RETURN_IF_ERROR(cuda_status(cudaEventRecord(start.get(), stream), "event"));
        if (matmul(plan, results[c].algo, args, workspace, stream) != CUBLAS_STATUS_SUCCESS) {
          ms = std::numeric_limits<float>::infinity();
          break;
        }
        CELLM_RETURN_IF_ERROR(cuda_status(cudaEventRecord(stop.get(), stream), "event"));
        CELLM_RETURN_IF_ERROR(cuda_status(cudaEventSynchronize(stop.get()), "event sync"));
        float elapsed = 0.0f;
        CELLM_RETURN_IF_ERROR(
            cuda_status(cudaEventElapsedTime(&elapsed, start.get(), stop.get()), "elapsed"));
        ms = std::min(ms, elapsed);
      }
      if (c == 0) {
        best_ms = ms * kRequiredGain;
      } else if (ms < best_ms) {
        best_ms = ms;
        best = c;
      }
    }
    CELLM_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream), "autotune"));
    return best;
  }

  Result<const Plan*> plan_for(const GemmArgs& args, void* workspace, cudaStream_t stream) {
    const bool autotune =
        args.autotune && !args.accumulate && args.m <= kAutotuneMaxRows && !capturing(stream);
    const PlanKey key{args.m,
                      args.n,
                      args.k,
                      args.lda,
                      args.ldb,
                      args.ldc,
                      args.out_dtype,
                      args.bias != nullptr,
                      args.accumulate,
                      args.autotune,
                      args.autotune_candidates};
    if (auto it = plans.find(key); it != plans.end()) {
      return &it->second;
    }
    CELLM_ASSIGN_OR_RETURN(Plan plan, lt::start_plan(CUDA_R_16BF, args));
    cublasLtMatmulDesc_t desc = plan.desc.get();

    CELLM_ASSIGN_OR_RETURN(PrefPtr pref, lt::make_preference(workspace_bytes));
    cublasLtMatmulHeuristicResult_t results[kMaxAutotuneCandidates] = {};
    int count = 0;
    CELLM_RETURN_IF_ERROR(lt_status(
        cublasLtMatmulAlgoGetHeuristic(handle.get(), desc, plan.a_layout.get(), plan.b_layout.get(),
                                       plan.c_layout.get(), plan.c_layout.get(), pref.get(),
                                       autotune ? args.autotune_candidates : 1, results, &count),
        "cublasLtMatmulAlgoGetHeuristic"));
    if (count == 0) {
      return not_supported("cuda gemm: no cuBLASLt algorithm for m={} n={} k={} ({} output)",
                           args.m, args.n, args.k, dtype_name(args.out_dtype));
    }
    int chosen = 0;
    if (autotune && count > 1) {
      CELLM_ASSIGN_OR_RETURN(chosen, fastest(plan, results, count, args, workspace, stream));
    }
    plan.algo = results[chosen].algo;
    auto [it, inserted] = plans.emplace(key, std::move(plan));
    return &it->second;
  }
};

Status GemmArgs::validate() const {
  CELLM_RETURN_IF_ERROR(require_ptr(a, "gemm", "a"));
  CELLM_RETURN_IF_ERROR(require_ptr(b, "gemm", "b"));
  CELLM_RETURN_IF_ERROR(require_ptr(out, "gemm", "out"));
  if (m <= 0 || n <= 0 || k <= 0 || lda < k || ldb < k || ldc < n) {
    return invalid_argument(
        "cuda gemm: m={} n={} k={} lda={} ldb={} ldc={} (need positive sizes, "
        "lda, ldb >= k and ldc >= n)",
        m, n, k, lda, ldb, ldc);
  }
  if (lda % 8 != 0 || ldb % 8 != 0 || ldc % 8 != 0) {
    return invalid_argument("cuda gemm: leading dims lda={} ldb={} ldc={} must be multiples of 8",
                            lda, ldb, ldc);
  }
  if (autotune_candidates < 1 || autotune_candidates > kMaxAutotuneCandidates) {
    return invalid_argument("cuda gemm: autotune_candidates={} (need 1..{})", autotune_candidates,
                            kMaxAutotuneCandidates);
  }
  if (out_dtype != DType::kBF16 && out_dtype != DType::kF32) {
    return not_supported("cuda gemm: output dtype {} (bf16 or f32 only)", dtype_name(out_dtype));
  }
  for (const void* ptr : {a, b, static_cast<const void*>(out)}) {
    CELLM_RETURN_IF_ERROR(require_aligned16(ptr, "gemm", "a/b/out"));
  }
  if (bias != nullptr) {
    if (out_dtype != DType::kBF16) {
      // cuBLASLt wants the bias in the output type; our biases are bf16.
      return not_supported("cuda gemm: a bias needs bf16 output (got {})", dtype_name(out_dtype));
    }
    CELLM_RETURN_IF_ERROR(require_aligned16(bias, "gemm", "bias"));
  }
  return Status::ok();
}

Result<GemmRunner> GemmRunner::create(std::size_t workspace_bytes) {
  auto impl = std::make_unique<Impl>();
  CELLM_RETURN_IF_ERROR(impl->start(workspace_bytes));
  return GemmRunner(std::move(impl));
}

GemmRunner::GemmRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GemmRunner::GemmRunner(GemmRunner&&) noexcept = default;
GemmRunner& GemmRunner::operator=(GemmRunner&&) noexcept = default;
GemmRunner::~GemmRunner() = default;

std::size_t GemmRunner::workspace_bytes() const {
  return impl_->workspace_bytes;
}
std::size_t GemmRunner::cached_plans() const {
  return impl_->plans.size();
}

Status GemmRunner::run(const GemmArgs& args, void* workspace, cudaStream_t stream) {
  CELLM_RETURN_IF_ERROR(args.validate());
  CELLM_RETURN_IF_ERROR(impl_->check_workspace(workspace, "cuda gemm"));
  CELLM_ASSIGN_OR_RETURN(const Plan* plan, impl_->plan_for(args, workspace, stream));
  CELLM_RETURN_IF_ERROR(impl_->set_bias(*plan, args));
  return lt_status(impl_->matmul(*plan, plan->algo, args, workspace, stream), "cublasLtMatmul");
}

}  // namespace cellm::cuda
