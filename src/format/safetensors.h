// Safetensors reader: parses and validates one .safetensors file (8-byte
// header length, JSON header, tensor table) and hands out tensors that view
// the memory-mapped data. SafetensorsCheckpoint joins the shards of a
// Hugging Face checkpoint through model.safetensors.index.json.
//
// FP8 tensors (F8_E4M3, F8_E5M2) have no DType of their own: they are handed
// out as u8 tensors of the same shape holding the raw codes, and the entry's
// `encoding` says how to read them (format/fp8.h decodes E4M3). Keeping the
// codes raw lets a backend use them as stored.
//
// Validation happens once, at open: every entry's dtype is known, its shape is
// sane, its byte range lies inside the data area, matches shape × dtype and
// overlaps no other. After that, tensor() cannot fail on a listed name.
//
// Thread-safety: immutable after open; safe to read from any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cellm/status.h"
#include "core/tensor.h"
#include "format/mapped_file.h"

namespace cellm::format {

// How the bytes of a tensor encode its elements beyond its DType.
enum class Encoding : std::uint8_t {
  kPlain,   // the DType says it all
  kF8E4M3,  // u8 codes of OCP FP8 E4M3FN (safetensors "F8_E4M3")
  kF8E5M2,  // u8 codes of OCP FP8 E5M2 (safetensors "F8_E5M2"); no decoder yet
};
std::string_view encoding_name(Encoding encoding);  // "F8_E4M3", ...

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;  // kU8 for FP8 codes
  Encoding encoding = Encoding::kPlain;
  Shape shape;
  std::uint64_t begin = 0;  // byte offsets inside the data area
  std::uint64_t end = 0;
};

class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const std::filesystem::path& path);
  static Result<SafetensorsFile> parse(std::shared_ptr<const MappedFile> file);

  // Entries sorted by name (the JSON header is an unordered object).
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const SafetensorsEntry* find(std::string_view name) const;
  // A view of the named tensor that keeps the mapping alive (a copy when the
  // data is not aligned to its element size). NotFound for an unknown name.
  Result<Tensor> tensor(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return file_->name(); }

 private:
  std::shared_ptr<const MappedFile> file_;
  std::size_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::unordered_map<std::string, std::size_t> by_name_;
  std::map<std::string, std::string> metadata_;
};

// The tensors of a checkpoint spread over one or several safetensors files.
class SafetensorsCheckpoint {
 public:
  // `path` is a folder holding model.safetensors.index.json or
  // model.safetensors, a .index.json file, or one .safetensors file.
  static Result<SafetensorsCheckpoint> open(const std::filesystem::path& path);

  // Every tensor name, sorted.
  std::vector<std::string> names() const;
  const SafetensorsEntry* find(std::string_view name) const;
  Result<Tensor> tensor(std::string_view name) const;
  std::size_t shard_count() const { return shards_.size(); }
  // "model.safetensors" or "3 shards via model.safetensors.index.json".
  const std::string& description() const { return description_; }

 private:
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, std::size_t, std::less<>> shard_of_;
  std::string description_;
};

}  // namespace cellm::format
