// GGUF reader (versions 2 and 3, little-endian): metadata of every value type
// including nested arrays, the tensor table, the data area honouring
// general.alignment, and access to each tensor's raw bytes or its values
// dequantized to f32/bf16.
//
// Every count, length and offset is checked against the bytes that remain
// before anything is allocated or read, so a corrupt or hostile file yields a
// DataLoss naming the key, tensor or offset, never an over-read.
//
// Thread-safety: immutable after open; safe to read from any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cellm/status.h"
#include "core/tensor.h"
#include "format/ggml_types.h"
#include "format/mapped_file.h"

namespace cellm::format {

enum class GgufType : std::uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

std::string_view gguf_type_name(GgufType type);

// One metadata value. Scalars keep their widest natural form; arrays keep
// their elements in typed vectors so that a 262,144-entry vocabulary costs
// one vector, not 262,144 variants.
struct GgufValue {
  GgufType type = GgufType::kU8;
  // Scalars (the one matching `type` is set).
  std::uint64_t u = 0;  // unsigned integers
  std::int64_t i = 0;   // signed integers and bool (0/1)
  double f = 0.0;       // f32, f64
  std::string s;        // string
  // Arrays: `elem_type` says which vector holds the elements.
  GgufType elem_type = GgufType::kU8;
  std::vector<std::int64_t> ints;    // every integer type and bool (u64 above 2^63 wraps)
  std::vector<double> floats;        // f32, f64
  std::vector<std::string> strings;  // string
  std::vector<GgufValue> arrays;     // nested arrays

  bool is_array() const { return type == GgufType::kArray; }
  std::size_t array_size() const;
  // Numeric views of a scalar; nullopt when the type does not fit.
  std::optional<std::uint64_t> as_uint() const;
  std::optional<std::int64_t> as_int() const;
  std::optional<double> as_float() const;
  std::optional<bool> as_bool() const;
  const std::string* as_string() const { return type == GgufType::kString ? &s : nullptr; }
  // "u32 8192", "array<string>[49152]".
  std::string summary() const;
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<std::uint64_t> ne;  // GGML order: ne[0] is the contiguous dimension
  std::uint64_t offset = 0;       // inside the data area
  std::uint64_t nbytes = 0;

  // Row-major shape, outermost first (ne reversed): what PyTorch would call it.
  Shape shape() const;
  std::uint64_t numel() const;
};

class GgufFile {
 public:
  static Result<GgufFile> open(const std::filesystem::path& path);
  static Result<GgufFile> parse(std::shared_ptr<const MappedFile> file);

  std::uint32_t version() const { return version_; }
  std::uint64_t alignment() const { return alignment_; }
  const std::string& path() const { return file_->name(); }

  // Metadata in file order, and by key.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;
  // Typed lookups for loaders: nullopt when absent, InvalidArgument naming the
  // key when present with an incompatible type.
  Result<std::optional<std::uint64_t>> get_uint(std::string_view key) const;
  Result<std::optional<double>> get_float(std::string_view key) const;
  Result<std::optional<std::string>> get_string(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  std::span<const std::uint8_t> tensor_bytes(const GgufTensorInfo& info) const;
  // A zero-copy view for F32/F16/BF16 tensors (keeps the mapping alive);
  // NotSupported for block-quantized types.
  Result<Tensor> view(const GgufTensorInfo& info) const;
  // A new host tensor of dtype kF32 or kBF16 holding the decoded values.
  Result<Tensor> dequantize(const GgufTensorInfo& info, DType dtype) const;
  const std::shared_ptr<const MappedFile>& file() const { return file_; }

 private:
  std::shared_ptr<const MappedFile> file_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::uint64_t data_start_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::unordered_map<std::string, std::size_t> meta_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, std::size_t> tensor_index_;
};

}  // namespace cellm::format
