#include "format/safetensors.h"

#include <algorithm>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "core/files.h"

namespace cellm::format {
namespace {

using nlohmann::json;

// safetensors itself refuses headers above 100 MB; anything larger is corrupt.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
constexpr std::size_t kMaxRank = 8;

struct StDtype {
  DType dtype;
  Encoding encoding = Encoding::kPlain;
};

Result<StDtype> parse_st_dtype(const std::string& path, const std::string& tensor,
                               const std::string& name) {
  if (name == "F32") return StDtype{DType::kF32};
  if (name == "F16") return StDtype{DType::kF16};
  if (name == "BF16") return StDtype{DType::kBF16};
  if (name == "I32") return StDtype{DType::kI32};
  if (name == "I64") return StDtype{DType::kI64};
  if (name == "U8") return StDtype{DType::kU8};
  if (name == "F8_E4M3") return StDtype{DType::kU8, Encoding::kF8E4M3};
  if (name == "F8_E5M2") return StDtype{DType::kU8, Encoding::kF8E5M2};
  static const std::set<std::string> kKnownOthers = {"F64", "I8",      "I16",     "U16",
                                                     "U32", "U64",     "BOOL",    "F8_E8M0",
                                                     "F4",  "F6_E2M3", "F6_E3M2", "C64"};
  if (kKnownOthers.count(name) != 0) {
    return not_supported(
        "{}: tensor '{}' has dtype {}, which cellm does not read "
        "(F32, F16, BF16, I32, I64, U8, F8_E4M3 are supported)",
        path, tensor, name);
  }
  return data_loss("{}: tensor '{}' has unknown dtype '{}'", path, tensor, name);
}

Status parse_entry(const std::string& path, const std::string& name, const json& v,
                   std::uint64_t data_size, SafetensorsEntry& out) {
  if (!v.is_object()) return data_loss("{}: header entry '{}' is not an object", path, name);
  const auto dtype_it = v.find("dtype");
  const auto shape_it = v.find("shape");
  const auto offsets_it = v.find("data_offsets");
  if (dtype_it == v.end() || !dtype_it->is_string()) {
    return data_loss("{}: tensor '{}' lacks a string 'dtype'", path, name);
  }
  if (shape_it == v.end() || !shape_it->is_array()) {
    return data_loss("{}: tensor '{}' lacks an array 'shape'", path, name);
  }
  if (offsets_it == v.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
    return data_loss("{}: tensor '{}' lacks 'data_offsets' as two unsigned integers", path, name);
  }
  out.name = name;
  CELLM_ASSIGN_OR_RETURN(const StDtype st,
                         parse_st_dtype(path, name, dtype_it->get<std::string>()));
  out.dtype = st.dtype;
  out.encoding = st.encoding;
  if (shape_it->size() > kMaxRank) {
    return data_loss("{}: tensor '{}' has rank {} (at most {} supported)", path, name,
                     shape_it->size(), kMaxRank);
  }
  // Bounding the product as we multiply keeps absurd dimensions from
  // overflowing; the byte-size check below then catches any other mismatch.
  const std::uint64_t elem = dtype_size(out.dtype);
  const std::uint64_t max_elems = (std::uint64_t{1} << 62) / elem;
  std::uint64_t numel = 1;
  for (const json& d : *shape_it) {
    if (!d.is_number_unsigned()) {
      return data_loss("{}: tensor '{}' has a shape entry that is not a non-negative integer", path,
                       name);
    }
    const std::uint64_t dim = d.get<std::uint64_t>();
    if (dim != 0 && numel > max_elems / dim) {
      return data_loss("{}: tensor '{}' has absurd shape {}", path, name, shape_it->dump());
    }
    numel *= dim;
    out.shape.push_back(static_cast<std::int64_t>(dim));
  }
  out.begin = (*offsets_it)[0].get<std::uint64_t>();
  out.end = (*offsets_it)[1].get<std::uint64_t>();
  if (out.begin > out.end || out.end > data_size) {
    return data_loss("{}: tensor '{}' spans bytes [{}, {}) outside the data area of {} bytes", path,
                     name, out.begin, out.end, data_size);
  }
  if (out.end - out.begin != numel * elem) {
    return data_loss("{}: tensor '{}' is {} {} but spans {} bytes (expected {})", path, name,
                     dtype_it->get<std::string>(), shape_string(out.shape), out.end - out.begin,
                     numel * elem);
  }
  return Status::ok();
}

}  // namespace

std::string_view encoding_name(Encoding encoding) {
  switch (encoding) {
    case Encoding::kPlain: return "plain";
    case Encoding::kF8E4M3: return "F8_E4M3";
    case Encoding::kF8E5M2: return "F8_E5M2";
  }
  return "?";
}

Result<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  CELLM_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  return parse(std::move(file));
}

Result<SafetensorsFile> SafetensorsFile::parse(std::shared_ptr<const MappedFile> file) {
  const std::string& path = file->name();
  const auto bytes = file->bytes();
  if (bytes.size() < 8) {
    return data_loss(
        "{}: {} bytes is too short for a safetensors file (the header length "
        "alone takes 8)",
        path, bytes.size());
  }
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[static_cast<std::size_t>(i)];
  if (header_len > bytes.size() - 8) {
    return data_loss(
        "{}: header length {} runs past the end of the file ({} bytes); the file "
        "is truncated or not safetensors",
        path, header_len, bytes.size());
  }
  if (header_len > kMaxHeaderBytes) {
    return data_loss("{}: header length {} exceeds the {}-byte limit", path, header_len,
                     kMaxHeaderBytes);
  }
  const char* begin = reinterpret_cast<const char*>(bytes.data() + 8);
  json header = json::parse(begin, begin + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return data_loss("{}: header is not valid JSON", path);
  if (!header.is_object()) return data_loss("{}: header is not a JSON object", path);

  SafetensorsFile out;
  out.file_ = std::move(file);
  out.data_start_ = 8 + static_cast<std::size_t>(header_len);
  const std::uint64_t data_size = bytes.size() - out.data_start_;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return data_loss("{}: __metadata__ is not an object", path);
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) return data_loss("{}: __metadata__ '{}' is not a string", path, mk);
        out.metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    SafetensorsEntry entry;
    CELLM_RETURN_IF_ERROR(parse_entry(path, key, value, data_size, entry));
    out.by_name_.emplace(key, out.entries_.size());
    out.entries_.push_back(std::move(entry));
  }
  // Overlaps: sorted by start, each non-empty range must begin at or after the previous end.
  std::vector<const SafetensorsEntry*> sorted;
  for (const auto& e : out.entries_) {
    if (e.end > e.begin) sorted.push_back(&e);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const auto* a, const auto* b) { return a->begin < b->begin; });
  for (std::size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i]->begin < sorted[i - 1]->end) {
      return data_loss("{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", path,
                       sorted[i - 1]->name, sorted[i - 1]->begin, sorted[i - 1]->end,
                       sorted[i]->name, sorted[i]->begin, sorted[i]->end);
    }
  }
  return out;
}

const SafetensorsEntry* SafetensorsFile::find(std::string_view name) const {
  const auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

Result<Tensor> SafetensorsFile::tensor(std::string_view name) const {
  const SafetensorsEntry* e = find(name);
  if (e == nullptr) return not_found("{}: no tensor named '{}'", path(), name);
  const std::uint8_t* p = file_->bytes().data() + data_start_ + e->begin;
  const std::size_t elem = dtype_size(e->dtype);
  if (reinterpret_cast<std::uintptr_t>(p) % elem != 0) {
    // The format does not promise aligned data; typed reads need it, so copy.
    Tensor copy = Tensor::empty(e->dtype, e->shape);
    if (copy.nbytes() > 0) std::memcpy(copy.data(), p, copy.nbytes());
    return copy;
  }
  return Tensor::view_owned(const_cast<std::uint8_t*>(p), e->dtype, e->shape, Device::kCpu,
                            keep_alive(file_));
}

Result<SafetensorsCheckpoint> SafetensorsCheckpoint::open(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path index_path;
  std::filesystem::path single_path;
  if (std::filesystem::is_directory(path, ec)) {
    if (std::filesystem::exists(path / "model.safetensors.index.json", ec)) {
      index_path = path / "model.safetensors.index.json";
    } else if (std::filesystem::exists(path / "model.safetensors", ec)) {
      single_path = path / "model.safetensors";
    } else {
      return not_found("{}: neither model.safetensors.index.json nor model.safetensors found",
                       path.string());
    }
  } else if (path.string().ends_with(".index.json")) {
    index_path = path;
  } else {
    single_path = path;
  }

  SafetensorsCheckpoint out;
  if (!single_path.empty()) {
    CELLM_ASSIGN_OR_RETURN(auto file, SafetensorsFile::open(single_path));
    for (const auto& e : file.entries()) out.shard_of_.emplace(e.name, 0);
    out.shards_.push_back(std::move(file));
    out.description_ = single_path.filename().string();
    return out;
  }

  const std::string ipath = index_path.string();
  CELLM_ASSIGN_OR_RETURN(std::string text, read_file(index_path));
  json index = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object()) {
    return data_loss("{}: not a JSON object", ipath);
  }
  const auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object()) {
    return data_loss("{}: lacks the 'weight_map' object", ipath);
  }
  std::map<std::string, std::size_t> shard_index;
  const std::filesystem::path dir = index_path.parent_path();
  for (const auto& [tensor, shard] : wm->items()) {
    if (!shard.is_string()) {
      return data_loss("{}: weight_map entry '{}' is not a file name", ipath, tensor);
    }
    const std::string shard_name = shard.get<std::string>();
    // Shards live beside the index; a path that climbs out is refused.
    if (shard_name.empty() || shard_name.find('/') != std::string::npos ||
        shard_name.find('\\') != std::string::npos || shard_name == "." || shard_name == "..") {
      return data_loss(
          "{}: weight_map entry '{}' names shard '{}', which is not a plain file "
          "name",
          ipath, tensor, shard_name);
    }
    auto it = shard_index.find(shard_name);
    if (it == shard_index.end()) {
      auto opened = SafetensorsFile::open(dir / shard_name);
      if (!opened.ok()) return opened.status().with_context(ipath);
      it = shard_index.emplace(shard_name, out.shards_.size()).first;
      out.shards_.push_back(std::move(opened).value());
    }
    if (out.shards_[it->second].find(tensor) == nullptr) {
      return data_loss("{}: weight_map puts '{}' in {}, which has no such tensor", ipath, tensor,
                       shard_name);
    }
    out.shard_of_.emplace(tensor, it->second);
  }
  // Tensors present in a shard but missing from the map would be silently lost.
  for (std::size_t s = 0; s < out.shards_.size(); ++s) {
    for (const auto& e : out.shards_[s].entries()) {
      const auto found = out.shard_of_.find(e.name);
      if (found == out.shard_of_.end()) {
        return data_loss("{}: tensor '{}' is in {} but not in the weight_map", ipath, e.name,
                         out.shards_[s].path());
      }
      if (found->second != s) {
        return data_loss("{}: tensor '{}' appears in both {} and {}", ipath, e.name,
                         out.shards_[found->second].path(), out.shards_[s].path());
      }
    }
  }
  out.description_ =
      fmt::format("{} shard(s) via {}", out.shards_.size(), index_path.filename().string());
  return out;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> names;
  names.reserve(shard_of_.size());
  for (const auto& [name, shard] : shard_of_) names.push_back(name);
  return names;
}

const SafetensorsEntry* SafetensorsCheckpoint::find(std::string_view name) const {
  const auto it = shard_of_.find(name);
  return it == shard_of_.end() ? nullptr : shards_[it->second].find(name);
}

Result<Tensor> SafetensorsCheckpoint::tensor(std::string_view name) const {
  const auto it = shard_of_.find(name);
  if (it == shard_of_.end()) return not_found("checkpoint has no tensor named '{}'", name);
  return shards_[it->second].tensor(name);
}

}  // namespace cellm::format
