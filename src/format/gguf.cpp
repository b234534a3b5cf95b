#include "format/gguf.h"

#include <algorithm>
#include <cstring>

namespace cellm::format {
namespace {

constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxArrayDepth = 8;
constexpr std::uint32_t kMaxDims = 4;

// A bounded little-endian cursor: every read checks the bytes that remain and
// reports the offset where the file ran out.
class Cursor {
 public:
  Cursor(std::span<const std::uint8_t> bytes, const std::string& path)
      : bytes_(bytes), path_(path) {}

  std::uint64_t offset() const { return pos_; }
  std::uint64_t remaining() const { return bytes_.size() - pos_; }

  template <typename T>
  Status read(T& out, std::string_view what) {
    if (remaining() < sizeof(T)) {
      return data_loss("{}: file ends at byte {} while reading {} ({} bytes needed)", path_,
                       bytes_.size(), what, sizeof(T));
    }
    std::memcpy(&out, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::ok();
  }

  Status read_string(std::string& out, std::string_view what) {
    std::uint64_t len = 0;
    CELLM_RETURN_IF_ERROR(read(len, what));
    if (len > remaining()) {
      return data_loss("{}: {} at byte {} claims {} bytes but only {} remain", path_, what,
                       pos_ - 8, len, remaining());
    }
    out.assign(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<std::size_t>(len));
    pos_ += len;
    return Status::ok();
  }

  const std::string& path() const { return path_; }

 private:
  std::span<const std::uint8_t> bytes_;
  const std::string& path_;
  std::uint64_t pos_ = 0;
};

// The fewest bytes one serialized value of `type` can take (strings: their length).
std::uint64_t min_value_bytes(GgufType type) {
  switch (type) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool: return 1;
    case GgufType::kU16:
    case GgufType::kI16: return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32: return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64: return 8;
    case GgufType::kString: return 8;
    case GgufType::kArray: return 12;  // element type + count
  }
  return 1;
}

bool valid_type(std::uint32_t raw) {
  return raw <= static_cast<std::uint32_t>(GgufType::kF64);
}

Status read_value(Cursor& c, GgufType type, GgufValue& out, const std::string& key, int depth);

template <typename T>
Status read_scalar(Cursor& c, const std::string& key, T& v) {
  return c.read(v, fmt::format("the value of '{}'", key));
}

// Reads a T and widens it both ways: signed values sign-extend into `u`,
// u64 values wrap into `i`, as the file's readers of either type expect.
template <typename T>
Status read_widened(Cursor& c, const std::string& key, std::int64_t& i, std::uint64_t& u) {
  T v{};  // value-initialized: GCC 12 cannot see that a failed read returns first
  CELLM_RETURN_IF_ERROR(read_scalar(c, key, v));
  i = static_cast<std::int64_t>(v);
  u = static_cast<std::uint64_t>(v);
  return Status::ok();
}

Status read_integer(Cursor& c, GgufType type, const std::string& key, std::int64_t& i,
                    std::uint64_t& u) {
  switch (type) {
    case GgufType::kU8: return read_widened<std::uint8_t>(c, key, i, u);
    case GgufType::kI8: return read_widened<std::int8_t>(c, key, i, u);
    case GgufType::kU16: return read_widened<std::uint16_t>(c, key, i, u);
    case GgufType::kI16: return read_widened<std::int16_t>(c, key, i, u);
    case GgufType::kU32: return read_widened<std::uint32_t>(c, key, i, u);
    case GgufType::kI32: return read_widened<std::int32_t>(c, key, i, u);
    case GgufType::kU64: return read_widened<std::uint64_t>(c, key, i, u);
    case GgufType::kI64: return read_widened<std::int64_t>(c, key, i, u);
    case GgufType::kBool: {
      CELLM_RETURN_IF_ERROR(read_widened<std::uint8_t>(c, key, i, u));
      if (u > 1) return data_loss("{}: bool '{}' holds {}", c.path(), key, u);
      return Status::ok();
    }
    case GgufType::kF32:
    case GgufType::kF64:
    case GgufType::kString:
    case GgufType::kArray: return internal_error("read_integer on a non-integer type");
  }
  return internal_error("read_integer on an unknown type");
}

bool is_integer(GgufType t) {
  return t != GgufType::kF32 && t != GgufType::kF64 && t != GgufType::kString &&
         t != GgufType::kArray;
}

Status read_array(Cursor& c, GgufValue& out, const std::string& key, int depth) {
  if (depth >= kMaxArrayDepth) {
    return data_loss("{}: '{}' nests arrays deeper than {}", c.path(), key, kMaxArrayDepth);
  }
  std::uint32_t raw = 0;
  std::uint64_t count = 0;
  CELLM_RETURN_IF_ERROR(c.read(raw, fmt::format("the element type of '{}'", key)));
  if (!valid_type(raw)) {
    return data_loss("{}: array '{}' has unknown element type {}", c.path(), key, raw);
  }
  CELLM_RETURN_IF_ERROR(c.read(count, fmt::format("the length of '{}'", key)));
  const auto elem = static_cast<GgufType>(raw);
  if (count > c.remaining() / min_value_bytes(elem)) {
    return data_loss("{}: array '{}' claims {} elements of {} but only {} bytes remain", c.path(),
                     key, count, gguf_type_name(elem), c.remaining());
  }
  out.elem_type = elem;
  const auto n = static_cast<std::size_t>(count);
  if (is_integer(elem)) {
    out.ints.resize(n);
    for (std::size_t k = 0; k < n; ++k) {
      std::uint64_t u = 0;
      CELLM_RETURN_IF_ERROR(read_integer(c, elem, key, out.ints[k], u));
    }
  } else if (elem == GgufType::kF32) {
    out.floats.resize(n);
    for (std::size_t k = 0; k < n; ++k) {
      float v;
      CELLM_RETURN_IF_ERROR(read_scalar(c, key, v));
      out.floats[k] = v;
    }
  } else if (elem == GgufType::kF64) {
    out.floats.resize(n);
    for (std::size_t k = 0; k < n; ++k) CELLM_RETURN_IF_ERROR(read_scalar(c, key, out.floats[k]));
  } else if (elem == GgufType::kString) {
    out.strings.resize(n);
    for (std::size_t k = 0; k < n; ++k) {
      CELLM_RETURN_IF_ERROR(
          c.read_string(out.strings[k], fmt::format("element {} of '{}'", k, key)));
    }
  } else {
    out.arrays.resize(n);
    for (std::size_t k = 0; k < n; ++k) {
      CELLM_RETURN_IF_ERROR(read_value(c, GgufType::kArray, out.arrays[k], key, depth + 1));
    }
  }
  return Status::ok();
}

Status read_value(Cursor& c, GgufType type, GgufValue& out, const std::string& key, int depth) {
  out.type = type;
  switch (type) {
    case GgufType::kF32: {
      float v;
      CELLM_RETURN_IF_ERROR(read_scalar(c, key, v));
      out.f = v;
      return Status::ok();
    }
    case GgufType::kF64: return read_scalar(c, key, out.f);
    case GgufType::kString: return c.read_string(out.s, fmt::format("the string '{}'", key));
    case GgufType::kArray: return read_array(c, out, key, depth);
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kBool: return read_integer(c, type, key, out.i, out.u);
  }
  return internal_error("unreachable gguf type");
}

bool is_signed(GgufType t) {
  return t == GgufType::kI8 || t == GgufType::kI16 || t == GgufType::kI32 || t == GgufType::kI64;
}

}  // namespace

std::string_view gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::kU8: return "u8";
    case GgufType::kI8: return "i8";
    case GgufType::kU16: return "u16";
    case GgufType::kI16: return "i16";
    case GgufType::kU32: return "u32";
    case GgufType::kI32: return "i32";
    case GgufType::kF32: return "f32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kU64: return "u64";
    case GgufType::kI64: return "i64";
    case GgufType::kF64: return "f64";
  }
  return "?";
}

std::size_t GgufValue::array_size() const {
  if (!is_array()) return 0;
  return ints.size() + floats.size() + strings.size() + arrays.size();
}

std::optional<std::uint64_t> GgufValue::as_uint() const {
  if (!is_integer(type) || type == GgufType::kBool) return std::nullopt;
  if (is_signed(type) && i < 0) return std::nullopt;
  return u;
}

std::optional<std::int64_t> GgufValue::as_int() const {
  if (!is_integer(type) || type == GgufType::kBool) return std::nullopt;
  if (type == GgufType::kU64 && u > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
  return i;
}

std::optional<double> GgufValue::as_float() const {
  if (type == GgufType::kF32 || type == GgufType::kF64) return f;
  if (is_integer(type) && type != GgufType::kBool) {
    return is_signed(type) ? static_cast<double>(i) : static_cast<double>(u);
  }
  return std::nullopt;
}

std::optional<bool> GgufValue::as_bool() const {
  if (type == GgufType::kBool) return i != 0;
  return std::nullopt;
}

std::string GgufValue::summary() const {
  switch (type) {
    case GgufType::kString:
      return s.size() > 60 ? fmt::format("string({} bytes)", s.size()) : fmt::format("\"{}\"", s);
    case GgufType::kArray:
      return fmt::format("array<{}>[{}]", gguf_type_name(elem_type), array_size());
    case GgufType::kF32:
    case GgufType::kF64: return fmt::format("{} {}", gguf_type_name(type), f);
    case GgufType::kBool: return i ? "true" : "false";
    case GgufType::kU8:
    case GgufType::kU16:
    case GgufType::kU32:
    case GgufType::kU64: return fmt::format("{} {}", gguf_type_name(type), u);
    case GgufType::kI8:
    case GgufType::kI16:
    case GgufType::kI32:
    case GgufType::kI64: return fmt::format("{} {}", gguf_type_name(type), i);
  }
  return "?";
}

Shape GgufTensorInfo::shape() const {
  Shape s;
  for (auto it = ne.rbegin(); it != ne.rend(); ++it) s.push_back(static_cast<std::int64_t>(*it));
  return s;
}

std::uint64_t GgufTensorInfo::numel() const {
  std::uint64_t n = 1;
  for (auto d : ne) n *= d;
  return n;
}

Result<GgufFile> GgufFile::open(const std::filesystem::path& path) {
  CELLM_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  return parse(std::move(file));
}

Result<GgufFile> GgufFile::parse(std::shared_ptr<const MappedFile> file) {
  GgufFile out;
  out.file_ = std::move(file);
  const std::string& path = out.file_->name();
  const auto bytes = out.file_->bytes();
  Cursor c(bytes, path);

  std::uint32_t magic = 0;
  CELLM_RETURN_IF_ERROR(c.read(magic, "the magic"));
  if (magic != kMagic) return data_loss("{}: not a GGUF file (bad magic)", path);
  CELLM_RETURN_IF_ERROR(c.read(out.version_, "the version"));
  if (out.version_ != 2 && out.version_ != 3) {
    if ((out.version_ & 0xFFFF) == 0 && out.version_ != 0) {
      return not_supported("{}: big-endian GGUF is not supported", path);
    }
    return not_supported("{}: GGUF version {} is not supported (2 and 3 are)", path, out.version_);
  }
  std::uint64_t tensor_count = 0;
  std::uint64_t kv_count = 0;
  CELLM_RETURN_IF_ERROR(c.read(tensor_count, "the tensor count"));
  CELLM_RETURN_IF_ERROR(c.read(kv_count, "the metadata count"));
  // A key-value pair takes at least 13 bytes, a tensor info at least 24.
  if (kv_count > c.remaining() / 13) {
    return data_loss("{}: claims {} metadata entries but only {} bytes remain", path, kv_count,
                     c.remaining());
  }
  if (tensor_count > c.remaining() / 24) {
    return data_loss("{}: claims {} tensors but only {} bytes remain", path, tensor_count,
                     c.remaining());
  }

  out.metadata_.reserve(static_cast<std::size_t>(kv_count));
  for (std::uint64_t k = 0; k < kv_count; ++k) {
    std::string key;
    CELLM_RETURN_IF_ERROR(c.read_string(key, fmt::format("metadata key #{}", k)));
    std::uint32_t raw = 0;
    CELLM_RETURN_IF_ERROR(c.read(raw, fmt::format("the type of '{}'", key)));
    if (!valid_type(raw)) return data_loss("{}: metadata '{}' has unknown type {}", path, key, raw);
    GgufValue value;
    CELLM_RETURN_IF_ERROR(read_value(c, static_cast<GgufType>(raw), value, key, 0));
    if (out.meta_index_.count(key) != 0) {
      return data_loss("{}: metadata key '{}' appears twice", path, key);
    }
    out.meta_index_.emplace(key, out.metadata_.size());
    out.metadata_.emplace_back(std::move(key), std::move(value));
  }

  if (const GgufValue* a = out.find("general.alignment")) {
    const auto v = a->as_uint();
    if (!v || *v == 0 || (*v & (*v - 1)) != 0 || *v > (1u << 20)) {
      return data_loss("{}: general.alignment is {}, not a power of two", path, a->summary());
    }
    out.alignment_ = *v;
  }

  out.tensors_.reserve(static_cast<std::size_t>(tensor_count));
  for (std::uint64_t t = 0; t < tensor_count; ++t) {
    GgufTensorInfo info;
    CELLM_RETURN_IF_ERROR(c.read_string(info.name, fmt::format("the name of tensor #{}", t)));
    std::uint32_t n_dims = 0;
    CELLM_RETURN_IF_ERROR(c.read(n_dims, fmt::format("the rank of '{}'", info.name)));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return data_loss("{}: tensor '{}' has rank {} (1 to {} allowed)", path, info.name, n_dims,
                       kMaxDims);
    }
    std::uint64_t numel = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      std::uint64_t dim = 0;
      CELLM_RETURN_IF_ERROR(c.read(dim, fmt::format("the shape of '{}'", info.name)));
      // No tensor can hold more elements than the file has bits.
      if (dim == 0 || numel > (bytes.size() * 8) / dim) {
        return data_loss("{}: tensor '{}' has absurd dimension {} for a {}-byte file", path,
                         info.name, dim, bytes.size());
      }
      numel *= dim;
      info.ne.push_back(dim);
    }
    std::uint32_t raw_type = 0;
    CELLM_RETURN_IF_ERROR(c.read(raw_type, fmt::format("the type of '{}'", info.name)));
    const auto type_info = ggml_type_info(raw_type);
    if (!type_info) {
      return data_loss("{}: tensor '{}' has unknown GGML type {}", path, info.name, raw_type);
    }
    info.type = type_info->type;
    if (info.ne[0] % type_info->block_elems != 0) {
      return data_loss(
          "{}: tensor '{}' ({}) has a row of {} elements, not a multiple of the "
          "block size {}",
          path, info.name, type_info->name, info.ne[0], type_info->block_elems);
    }
    info.nbytes = numel / type_info->block_elems * type_info->block_bytes;
    CELLM_RETURN_IF_ERROR(c.read(info.offset, fmt::format("the offset of '{}'", info.name)));
    if (info.offset % out.alignment_ != 0) {
      return data_loss(
          "{}: tensor '{}' starts at data offset {}, not a multiple of the "
          "alignment {}",
          path, info.name, info.offset, out.alignment_);
    }
    if (out.tensor_index_.count(info.name) != 0) {
      return data_loss("{}: tensor '{}' appears twice", path, info.name);
    }
    out.tensor_index_.emplace(info.name, out.tensors_.size());
    out.tensors_.push_back(std::move(info));
  }

  const std::uint64_t header_end = c.offset();
  out.data_start_ = (header_end + out.alignment_ - 1) / out.alignment_ * out.alignment_;
  if (out.data_start_ > bytes.size() && !out.tensors_.empty()) {
    return data_loss("{}: the data area would start at byte {}, past the end ({} bytes)", path,
                     out.data_start_, bytes.size());
  }
  const std::uint64_t data_size =
      bytes.size() > out.data_start_ ? bytes.size() - out.data_start_ : 0;
  std::vector<const GgufTensorInfo*> sorted;
  for (const auto& t : out.tensors_) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      return data_loss(
          "{}: tensor '{}' needs bytes [{}, {}) of a data area of {} bytes; the "
          "file is truncated",
          path, t.name, t.offset, t.offset + t.nbytes, data_size);
    }
    sorted.push_back(&t);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (std::size_t k = 1; k < sorted.size(); ++k) {
    if (sorted[k]->offset < sorted[k - 1]->offset + sorted[k - 1]->nbytes) {
      return data_loss("{}: tensors '{}' and '{}' overlap at data offset {}", path,
                       sorted[k - 1]->name, sorted[k]->name, sorted[k]->offset);
    }
  }
  return out;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = meta_index_.find(std::string(key));
  return it == meta_index_.end() ? nullptr : &metadata_[it->second].second;
}

Result<std::optional<std::uint64_t>> GgufFile::get_uint(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::optional<std::uint64_t>();
  const auto u = v->as_uint();
  if (!u)
    return invalid_argument("{}: metadata '{}' is {}, not a non-negative integer", path(), key,
                            v->summary());
  return std::optional<std::uint64_t>(*u);
}

Result<std::optional<double>> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::optional<double>();
  const auto f = v->as_float();
  if (!f)
    return invalid_argument("{}: metadata '{}' is {}, not a number", path(), key, v->summary());
  return std::optional<double>(*f);
}

Result<std::optional<std::string>> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::optional<std::string>();
  if (v->as_string() == nullptr) {
    return invalid_argument("{}: metadata '{}' is {}, not a string", path(), key, v->summary());
  }
  return std::optional<std::string>(v->s);
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const std::uint8_t> GgufFile::tensor_bytes(const GgufTensorInfo& info) const {
  return file_->bytes().subspan(static_cast<std::size_t>(data_start_ + info.offset),
                                static_cast<std::size_t>(info.nbytes));
}

Result<Tensor> GgufFile::view(const GgufTensorInfo& info) const {
  DType dtype = DType::kF32;
  if (info.type == GgmlType::kF16) {
    dtype = DType::kF16;
  } else if (info.type == GgmlType::kBF16) {
    dtype = DType::kBF16;
  } else if (info.type != GgmlType::kF32) {
    return not_supported("{}: tensor '{}' is {}, which has no direct view", path(), info.name,
                         ggml_type_name(info.type));
  }
  const auto bytes = tensor_bytes(info);
  if (reinterpret_cast<std::uintptr_t>(bytes.data()) % dtype_size(dtype) != 0) {
    Tensor copy = Tensor::empty(dtype, info.shape());
    if (!bytes.empty()) std::memcpy(copy.data(), bytes.data(), bytes.size());
    return copy;
  }
  return Tensor::view_owned(const_cast<std::uint8_t*>(bytes.data()), dtype, info.shape(),
                            Device::kCpu, keep_alive(file_));
}

Result<Tensor> GgufFile::dequantize(const GgufTensorInfo& info, DType dtype) const {
  const auto bytes = tensor_bytes(info);
  if (dtype == DType::kF32) {
    Tensor out = Tensor::empty(DType::kF32, info.shape());
    const Status s = dequantize_f32(info.type, bytes, out.span<float>());
    if (!s.is_ok()) return s.with_context(fmt::format("{}: tensor '{}'", path(), info.name));
    return out;
  }
  if (dtype == DType::kBF16) {
    Tensor out = Tensor::empty(DType::kBF16, info.shape());
    const Status s = dequantize_bf16(info.type, bytes, out.span<std::uint16_t>());
    if (!s.is_ok()) return s.with_context(fmt::format("{}: tensor '{}'", path(), info.name));
    return out;
  }
  return invalid_argument("dequantize '{}': target dtype {} is not f32 or bf16", info.name,
                          dtype_name(dtype));
}

}  // namespace cellm::format
