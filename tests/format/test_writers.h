// Builders for small safetensors and GGUF files in tests and seed corpora:
// valid by default, with hooks to corrupt any part (header text, counts,
// offsets) so that error paths can be exercised on otherwise sane bytes.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace cellm::testing {

using Bytes = std::vector<std::uint8_t>;

template <typename T>
void put(Bytes& b, T v) {
  // resize + memcpy rather than insert(end, p, p + n): GCC 12's -Wstringop-overflow
  // misreads the inlined insert of a small fixed-size range as an overflow.
  const std::size_t at = b.size();
  b.resize(at + sizeof(T));
  std::memcpy(b.data() + at, &v, sizeof(T));
}
inline void put_str(Bytes& b, const std::string& s) {
  put<std::uint64_t>(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}
template <typename T>
Bytes bytes_of(const std::vector<T>& v) {
  Bytes b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

inline void write_file(const std::filesystem::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}
inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// safetensors: tensors are laid out back to back in insertion order.
class SafetensorsBuilder {
 public:
  struct Item {
    std::string name, dtype;
    std::vector<std::int64_t> shape;
    Bytes data;
  };
  SafetensorsBuilder& add(std::string name, std::string dtype, std::vector<std::int64_t> shape,
                          Bytes data) {
    items_.push_back({std::move(name), std::move(dtype), std::move(shape), std::move(data)});
    return *this;
  }
  SafetensorsBuilder& add_f32(std::string name, std::vector<std::int64_t> shape,
                              const std::vector<float>& values) {
    return add(std::move(name), "F32", std::move(shape), bytes_of(values));
  }
  // The JSON header this builder would write (edit it to corrupt offsets etc.).
  std::string header() const {
    std::string h = "{\"__metadata__\":{\"format\":\"pt\"}";
    std::uint64_t at = 0;
    for (const auto& it : items_) {
      h += fmt::format(",\"{}\":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                       it.name, it.dtype, fmt::join(it.shape, ","), at, at + it.data.size());
      at += it.data.size();
    }
    return h + "}";
  }
  Bytes data() const {
    Bytes d;
    for (const auto& it : items_) d.insert(d.end(), it.data.begin(), it.data.end());
    return d;
  }
  Bytes build() const { return assemble(header(), data()); }
  // Header padded with spaces to a multiple of 8, as the reference writer does.
  static Bytes assemble(std::string header, const Bytes& data) {
    while (header.size() % 8 != 0) header += ' ';
    // One allocation of the final size: growing the vector piece by piece
    // trips GCC 12's -Warray-bounds / -Wstringop-overflow false positives.
    const std::uint64_t n = header.size();
    Bytes b(sizeof(n) + header.size() + data.size());
    std::memcpy(b.data(), &n, sizeof(n));
    std::memcpy(b.data() + sizeof(n), header.data(), header.size());
    if (!data.empty()) std::memcpy(b.data() + sizeof(n) + header.size(), data.data(), data.size());
    return b;
  }

 private:
  std::vector<Item> items_;
};

// GGUF v3 (or v2): metadata values are given as raw type + payload bytes.
class GgufBuilder {
 public:
  enum Type : std::uint32_t {
    kU8 = 0,
    kI8,
    kU16,
    kI16,
    kU32,
    kI32,
    kF32,
    kBool,
    kString,
    kArray,
    kU64,
    kI64,
    kF64
  };
  explicit GgufBuilder(std::uint32_t version = 3) : version_(version) {}

  GgufBuilder& kv_raw(const std::string& key, std::uint32_t type, Bytes payload) {
    kvs_.push_back({key, type, std::move(payload)});
    return *this;
  }
  GgufBuilder& kv_u32(const std::string& key, std::uint32_t v) {
    Bytes p;
    put(p, v);
    return kv_raw(key, kU32, p);
  }
  GgufBuilder& kv_f32(const std::string& key, float v) {
    Bytes p;
    put(p, v);
    return kv_raw(key, kF32, p);
  }
  GgufBuilder& kv_str(const std::string& key, const std::string& v) {
    Bytes p;
    put_str(p, v);
    return kv_raw(key, kString, p);
  }
  GgufBuilder& kv_bool(const std::string& key, bool v) {
    Bytes p;
    put<std::uint8_t>(p, v ? 1 : 0);
    return kv_raw(key, kBool, p);
  }
  GgufBuilder& kv_strs(const std::string& key, const std::vector<std::string>& v) {
    Bytes p;
    put<std::uint32_t>(p, kString);
    put<std::uint64_t>(p, v.size());
    for (const auto& s : v) put_str(p, s);
    return kv_raw(key, kArray, p);
  }
  GgufBuilder& kv_f32s(const std::string& key, const std::vector<float>& v) {
    Bytes p;
    put<std::uint32_t>(p, kF32);
    put<std::uint64_t>(p, v.size());
    for (float x : v) put(p, x);
    return kv_raw(key, kArray, p);
  }
  GgufBuilder& kv_i32s(const std::string& key, const std::vector<std::int32_t>& v) {
    Bytes p;
    put<std::uint32_t>(p, kI32);
    put<std::uint64_t>(p, v.size());
    for (auto x : v) put(p, x);
    return kv_raw(key, kArray, p);
  }
  // ne in GGML order (ne[0] contiguous); data must match type and shape.
  GgufBuilder& tensor(const std::string& name, std::vector<std::uint64_t> ne, std::uint32_t type,
                      Bytes data) {
    tensors_.push_back({name, std::move(ne), type, std::move(data)});
    return *this;
  }
  GgufBuilder& alignment(std::uint32_t a) {
    alignment_ = a;
    return kv_u32("general.alignment", a);
  }

  Bytes build() const {
    Bytes b;
    put<std::uint32_t>(b, 0x46554747);
    put<std::uint32_t>(b, version_);
    put<std::uint64_t>(b, tensors_.size());
    put<std::uint64_t>(b, kvs_.size());
    for (const auto& kv : kvs_) {
      put_str(b, kv.key);
      put<std::uint32_t>(b, kv.type);
      b.insert(b.end(), kv.payload.begin(), kv.payload.end());
    }
    std::uint64_t at = 0;
    std::vector<std::uint64_t> offsets;
    for (const auto& t : tensors_) {
      put_str(b, t.name);
      put<std::uint32_t>(b, static_cast<std::uint32_t>(t.ne.size()));
      for (auto d : t.ne) put<std::uint64_t>(b, d);
      put<std::uint32_t>(b, t.type);
      put<std::uint64_t>(b, at);
      offsets.push_back(at);
      at = (at + t.data.size() + alignment_ - 1) / alignment_ * alignment_;
    }
    while (b.size() % alignment_ != 0) b.push_back(0);
    const std::size_t data_start = b.size();
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      b.resize(data_start + offsets[i]);
      b.insert(b.end(), tensors_[i].data.begin(), tensors_[i].data.end());
    }
    return b;
  }

 private:
  struct Kv {
    std::string key;
    std::uint32_t type;
    Bytes payload;
  };
  struct T {
    std::string name;
    std::vector<std::uint64_t> ne;
    std::uint32_t type;
    Bytes data;
  };
  std::uint32_t version_;
  std::uint32_t alignment_ = 32;
  std::vector<Kv> kvs_;
  std::vector<T> tensors_;
};

}  // namespace cellm::testing
