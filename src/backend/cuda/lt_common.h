// What the cuBLASLt runners (gemm.cpp: bf16, gemm_fp8.cpp: FP8) share: RAII
// owners of cuBLASLt's descriptors, the status translation, the plan both
// cache per shape and how it starts, the preference every plan asks the
// heuristic with, and the handle, workspace and plan cache their Impl hold.
// Internal to src/backend/cuda's .cpp files (it includes cublasLt.h).
//
// Thread-safety: pure functions and owners with no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "cellm/status.h"
#include "core/dtype.h"

namespace cellm::cuda::lt {

struct DescDeleter {
  void operator()(cublasLtMatmulDesc_t d) const noexcept { cublasLtMatmulDescDestroy(d); }
};
struct LayoutDeleter {
  void operator()(cublasLtMatrixLayout_t l) const noexcept { cublasLtMatrixLayoutDestroy(l); }
};
struct PrefDeleter {
  void operator()(cublasLtMatmulPreference_t p) const noexcept {
    cublasLtMatmulPreferenceDestroy(p);
  }
};
struct HandleDeleter {
  void operator()(cublasLtHandle_t h) const noexcept { cublasLtDestroy(h); }
};

using DescPtr = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using LayoutPtr = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDeleter>;
using PrefPtr = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PrefDeleter>;
using HandlePtr = std::unique_ptr<cublasLtContext, HandleDeleter>;

inline Status lt_status(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    // cublasGetStatusString lives in libcublas, which we do not link.
    return internal_error("cuda gemm: {} failed with cublasStatus_t {}", what,
                          static_cast<int>(status));
  }
  return Status::ok();
}

template <typename T>
Status set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value,
                const char* what) {
  return lt_status(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)), what);
}

// A matrix layout of `type`, `rows` x `cols` column-major, `ld` apart.
inline Result<LayoutPtr> make_layout(cudaDataType_t type, std::int64_t rows, std::int64_t cols,
                                     std::int64_t ld, const char* what) {
  cublasLtMatrixLayout_t layout = nullptr;
  CELLM_RETURN_IF_ERROR(
      lt_status(cublasLtMatrixLayoutCreate(&layout, type, static_cast<std::uint64_t>(rows),
                                           static_cast<std::uint64_t>(cols), ld),
                what));
  return LayoutPtr(layout);
}

// The preference every plan asks the heuristic with: at most
// `workspace_bytes` of workspace, and operands promised 16-byte aligned only
// (they may be column slices of fused buffers).
inline Result<PrefPtr> make_preference(std::size_t workspace_bytes) {
  cublasLtMatmulPreference_t raw_pref = nullptr;
  CELLM_RETURN_IF_ERROR(
      lt_status(cublasLtMatmulPreferenceCreate(&raw_pref), "cublasLtMatmulPreferenceCreate"));
  PrefPtr pref(raw_pref);
  const std::uint64_t max_workspace = workspace_bytes;
  CELLM_RETURN_IF_ERROR(lt_status(
      cublasLtMatmulPreferenceSetAttribute(raw_pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &max_workspace, sizeof(max_workspace)),
      "set MAX_WORKSPACE_BYTES"));
  const std::uint32_t alignment = 16;
  for (const auto attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    CELLM_RETURN_IF_ERROR(lt_status(
        cublasLtMatmulPreferenceSetAttribute(raw_pref, attr, &alignment, sizeof(alignment)),
        "set MIN_ALIGNMENT"));
  }
  return pref;
}

// A cached plan. cuBLASLt is column-major: the weight [n, k] row-major is
// its A (k x n column-major, transposed), the activations [m, k] its B (k x m,
// not transposed) and out[m, n] row-major its D (n x m). That "TN" form is
// also the only one FP8 operands take.
struct Plan {
  DescPtr desc;
  LayoutPtr a_layout;  // the weight
  LayoutPtr b_layout;  // the activations
  LayoutPtr c_layout;  // the output
  cublasLtMatmulAlgo_t algo{};
};

// What a plan for out[m, n] = act[m, k] . weight[n, k]^T starts as in both
// runners, for their args (GemmArgs, Fp8GemmArgs: m, n, k, lda, ldb, ldc,
// out_dtype, bias): f32 compute and scaling, the TN form, the bias epilogue
// (a bf16 bias) when there is a bias, and the layouts of operands of `in`
// and of the output (f32 or bf16). Each runner adds its own attributes and
// asks for the algorithm.
template <typename Args>
Result<Plan> start_plan(cudaDataType_t in, const Args& args) {
  Plan plan;
  cublasLtMatmulDesc_t desc = nullptr;
  CELLM_RETURN_IF_ERROR(lt_status(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                                  "cublasLtMatmulDescCreate"));
  plan.desc.reset(desc);
  CELLM_RETURN_IF_ERROR(set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T, "set TRANSA"));
  CELLM_RETURN_IF_ERROR(set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N, "set TRANSB"));
  if (args.bias != nullptr) {
    CELLM_RETURN_IF_ERROR(
        set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS, "set EPILOGUE"));
    CELLM_RETURN_IF_ERROR(
        set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_16BF, "set BIAS_DATA_TYPE"));
  }
  const cudaDataType_t out = args.out_dtype == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
  CELLM_ASSIGN_OR_RETURN(plan.a_layout, make_layout(in, args.k, args.n, args.ldb, "A layout"));
  CELLM_ASSIGN_OR_RETURN(plan.b_layout, make_layout(in, args.k, args.m, args.lda, "B layout"));
  CELLM_ASSIGN_OR_RETURN(plan.c_layout, make_layout(out, args.n, args.m, args.ldc, "C layout"));
  return plan;
}

// The state both runners' Impl hold: the handle, the size of every
// workspace run() is given, and the plans cached per Key.
template <typename Key, typename Hash>
struct RunnerState {
  HandlePtr handle;
  std::size_t workspace_bytes = 0;
  std::unordered_map<Key, Plan, Hash> plans;

  Status start(std::size_t workspace) {
    cublasLtHandle_t raw = nullptr;
    CELLM_RETURN_IF_ERROR(lt_status(cublasLtCreate(&raw), "cublasLtCreate"));
    handle.reset(raw);
    workspace_bytes = workspace;
    return Status::ok();
  }

  // run()'s workspace: required when create() was given a size.
  Status check_workspace(const void* workspace, const char* who) const {
    if (workspace == nullptr && workspace_bytes > 0) {
      return invalid_argument("{}: a workspace of {} bytes is required", who, workspace_bytes);
    }
    return Status::ok();
  }
};

}  // namespace cellm::cuda::lt
