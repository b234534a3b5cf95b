#include "format/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cellm::format {

Result<std::shared_ptr<const MappedFile>> MappedFile::open(const std::filesystem::path& path) {
  const std::string name = path.string();
  const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return not_found("{}: no such file", name);
    return data_loss("{}: cannot open: {}", name, std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return data_loss("{}: not a regular file", name);
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->name_ = name;
  file->size_ = static_cast<std::size_t>(st.st_size);
  if (file->size_ > 0) {
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return data_loss("{}: cannot map {} bytes: {}", name, file->size_, std::strerror(err));
    }
    file->data_ = static_cast<const std::uint8_t*>(p);
    file->mapped_ = true;
  }
  ::close(fd);  // the mapping stays valid without the descriptor
  return std::shared_ptr<const MappedFile>(std::move(file));
}

std::shared_ptr<const MappedFile> MappedFile::from_bytes(std::span<const std::uint8_t> bytes,
                                                         std::string name) {
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->owned_.assign(bytes.begin(), bytes.end());
  file->data_ = file->owned_.data();
  file->size_ = file->owned_.size();
  file->name_ = std::move(name);
  return file;
}

MappedFile::~MappedFile() {
  if (mapped_ && data_ != nullptr) {
    ::munmap(const_cast<std::uint8_t*>(data_), size_);
  }
}

}  // namespace cellm::format
