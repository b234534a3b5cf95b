// MappedFile: the read-only bytes of a file, memory-mapped (or, for tests and
// fuzzing, copied from a buffer). Readers hand out tensors that view these
// bytes and share ownership of the MappedFile, so a mapping lives exactly as
// long as the last tensor that points into it.
//
// Thread-safety: immutable after open; safe to read from any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cellm/status.h"

namespace cellm::format {

class MappedFile {
 public:
  // Maps `path` read-only. A missing file is NotFound; an unreadable one DataLoss.
  static Result<std::shared_ptr<const MappedFile>> open(const std::filesystem::path& path);
  // Wraps a copy of `bytes`; `name` stands in for the path in error messages.
  static std::shared_ptr<const MappedFile> from_bytes(std::span<const std::uint8_t> bytes,
                                                      std::string name);

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::uint8_t> bytes() const { return {data_, size_}; }
  std::size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  MappedFile() = default;

  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  bool mapped_ = false;              // munmap on destruction
  std::vector<std::uint8_t> owned_;  // from_bytes storage
  std::string name_;
};

// The shared_ptr<void> that tensors viewing `file` keep alive.
inline std::shared_ptr<void> keep_alive(const std::shared_ptr<const MappedFile>& file) {
  return std::const_pointer_cast<MappedFile>(file);
}

}  // namespace cellm::format
