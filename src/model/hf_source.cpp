#include "model/hf_source.h"

namespace cellm::model {
namespace {

// Stored-name prefixes of the text model, most specific first.
constexpr std::string_view kTextPrefixes[] = {"model.language_model.", "language_model.model.",
                                              "model."};
constexpr std::string_view kHeadPrefixes[] = {"language_model.lm_head.", "lm_head."};
constexpr std::string_view kSkippedPrefixes[] = {"vision_tower.", "model.vision_tower.",
                                                 "multi_modal_projector.",
                                                 "model.multi_modal_projector."};

std::optional<std::string> canonical(std::string_view stored) {
  for (auto p : kSkippedPrefixes) {
    if (stored.starts_with(p)) return std::nullopt;
  }
  for (auto p : kHeadPrefixes) {
    if (stored.starts_with(p)) return "lm_head." + std::string(stored.substr(p.size()));
  }
  for (auto p : kTextPrefixes) {
    if (stored.starts_with(p)) return "model." + std::string(stored.substr(p.size()));
  }
  return std::string(stored);  // unknown layout: kept, and reported as unexpected if unused
}

}  // namespace

Result<HfTensorSource> HfTensorSource::open(const std::filesystem::path& folder) {
  HfTensorSource out;
  CELLM_ASSIGN_OR_RETURN(out.checkpoint_, format::SafetensorsCheckpoint::open(folder));
  for (const auto& stored : out.checkpoint_.names()) {
    auto name = canonical(stored);
    if (!name) {
      ++out.skipped_;
      continue;
    }
    const auto [it, inserted] = out.file_name_.emplace(*name, stored);
    if (!inserted) {
      return invalid_argument("{}: tensors '{}' and '{}' both map to '{}'", folder.string(),
                              it->second, stored, *name);
    }
  }
  out.description_ = fmt::format("{} ({})", folder.string(), out.checkpoint_.description());
  return out;
}

std::vector<std::string> HfTensorSource::names() const {
  std::vector<std::string> out;
  for (const auto& [name, stored] : file_name_) out.push_back(name);
  return out;
}

std::optional<Shape> HfTensorSource::shape(std::string_view name) const {
  const auto it = file_name_.find(name);
  if (it == file_name_.end()) return std::nullopt;
  return checkpoint_.find(it->second)->shape;
}

std::string HfTensorSource::stored_type(std::string_view name) const {
  const auto it = file_name_.find(name);
  if (it == file_name_.end()) return "absent";
  return std::string(dtype_name(checkpoint_.find(it->second)->dtype));
}

Result<Tensor> HfTensorSource::load(std::string_view name) const {
  const auto it = file_name_.find(name);
  if (it == file_name_.end()) return not_found("{}: no tensor '{}'", description_, name);
  return checkpoint_.tensor(it->second);
}

}  // namespace cellm::model
