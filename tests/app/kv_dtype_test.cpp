// `--kv-dtype` at the executor factory (unit, no model is read): the CPU
// program keeps f32 K/V and refuses fp8 with a message that names the CUDA
// backend; a dtype no backend stores is refused naming the ones they do.
#include <string>

#include <gtest/gtest.h>

#include "app/executor_factory.h"

namespace cellm::app {
namespace {

CudaExecutorConfig cpu_config(DType kv_dtype) {
  CudaExecutorConfig config;
  config.backend = "cpu";
  config.kv_dtype = kv_dtype;
  return config;
}

TEST(KvDtypeConfigTest, TheCpuRefusesFp8) {
  // Refused before the (empty) model is looked at.
  auto loaded = create_executor(model::LoadedModel{}, cpu_config(DType::kF8E4M3));
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kNotSupported) << loaded.status().to_string();
  const std::string message(loaded.status().message());
  EXPECT_NE(message.find("--kv-dtype fp8"), std::string::npos) << message;
  EXPECT_NE(message.find("CUDA"), std::string::npos) << message;
}

TEST(KvDtypeConfigTest, DtypesNoBackendStoresAreRefusedNamingTheOthers) {
  for (const DType dtype : {DType::kI32, DType::kF16, DType::kU8}) {
    auto loaded = create_executor(model::LoadedModel{}, cpu_config(dtype));
    ASSERT_FALSE(loaded.ok()) << dtype_name(dtype);
    const std::string message(loaded.status().message());
    for (const char* accepted : {"bf16", "fp8", "f32"}) {
      EXPECT_NE(message.find(accepted), std::string::npos) << message;
    }
  }
}

}  // namespace
}  // namespace cellm::app
