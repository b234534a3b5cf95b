// What the cuBLASLt runners (gemm.cpp: bf16, gemm_fp8.cpp: FP8) share: RAII
// owners of cuBLASLt's descriptors, the status translation and the
// preference every plan asks the heuristic with. Internal to
// src/backend/cuda's .cpp files (it includes cublasLt.h).
//
// Thread-safety: pure functions and owners with no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "cellm/status.h"

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

}  // namespace cellm::cuda::lt
