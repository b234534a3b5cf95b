#include "app/chat_probe.h"

#include <optional>
#include <string>
#include <system_error>

#include "app/model_text.h"
#include "chat/chat_template.h"
#include "format/gguf.h"

namespace cellm::app {

Status probe_chat_template(const std::filesystem::path& path) {
  const std::string name =
      path.filename().empty() ? path.parent_path().filename().string() : path.filename().string();
  std::error_code ec;
  const bool folder = std::filesystem::is_directory(path, ec);
  // A file is read as GGUF, the only single-file format the loader takes.
  std::optional<format::GgufFile> gguf;
  if (!folder) {
    auto opened = format::GgufFile::open(path);
    if (!opened.ok()) return opened.status();
    gguf.emplace(std::move(opened).value());
  }
  auto source = load_chat_template_source(path, gguf ? &*gguf : nullptr);
  if (!source.ok()) return source.status();
  if (!source->has_value()) return not_found("{} has no chat template", name);
  auto parsed = chat::ChatTemplate::parse(**source);
  if (!parsed.ok()) {
    return not_supported("{} has a chat template cellm cannot run: {}", name,
                         parsed.status().message());
  }
  return Status::ok();
}

}  // namespace cellm::app
