#include "app/model_path.h"

#include <cstdlib>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/env.h"

namespace cellm::app {
namespace {

namespace fs = std::filesystem;

struct Known {
  const char* name;
  const char* file;
};
constexpr Known kKnown[] = {
    {"smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"},
    {"gemma3", "gemma-3-270m-q4_k_m.gguf"},
};
constexpr const char* kDefaultName = "smollm2";

bool present(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

// A bare name: no folder part, so it can be looked up in the folders.
bool is_bare_name(const std::string& s) {
  return !s.empty() && s.find('/') == std::string::npos && s != "." && s != "..";
}

}  // namespace

std::optional<std::string> known_model_file(const std::string& name) {
  for (const Known& k : kKnown) {
    if (name == k.name) return std::string(k.file);
  }
  return std::nullopt;
}

std::optional<fs::path> data_models_folder(const char* xdg_data_home, const char* home) {
  // The XDG spec says a relative XDG_DATA_HOME is invalid and must be ignored.
  if (xdg_data_home != nullptr && xdg_data_home[0] == '/') {
    return fs::path(xdg_data_home) / "cellm" / "models";
  }
  if (home != nullptr && home[0] == '/') {
    return fs::path(home) / ".local" / "share" / "cellm" / "models";
  }
  return std::nullopt;
}

std::optional<fs::path> checkout_models_folder(const fs::path& executable) {
  if (executable.empty()) return std::nullopt;
  for (fs::path dir = executable.parent_path(); !dir.empty(); dir = dir.parent_path()) {
    if (present(dir / "scripts" / "fetch-model")) return dir / "models";
    if (dir == dir.root_path()) break;
  }
  return std::nullopt;
}

ModelSearch ModelSearch::from_process() {
  ModelSearch s;
  s.cellm_model = knobs().model;
  const std::optional<std::string> xdg = env_string("XDG_DATA_HOME");
  const std::optional<std::string> home = env_string("HOME");
  s.data_models =
      data_models_folder(xdg ? xdg->c_str() : nullptr, home ? home->c_str() : nullptr);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) s.checkout_models = checkout_models_folder(exe);
  return s;
}

std::vector<fs::path> ModelSearch::folders() const {
  std::vector<fs::path> out;
  if (data_models) out.push_back(*data_models);
  if (checkout_models && (!data_models || *checkout_models != *data_models)) {
    out.push_back(*checkout_models);
  }
  return out;
}

Result<fs::path> resolve_model(const std::string& argument, const ModelSearch& search) {
  std::string wanted = argument;
  std::string from = "the MODEL argument";
  if (wanted.empty() && search.cellm_model) {
    wanted = *search.cellm_model;
    from = "$CELLM_MODEL";
  }
  if (wanted.empty()) {
    wanted = kDefaultName;
    from = "the default";
  }
  std::vector<std::string> searched;
  if (present(wanted)) return fs::path(wanted);
  searched.push_back(fmt::format("{} (as a path from {})", wanted, fs::current_path().string()));
  std::optional<std::string> file;
  if (is_bare_name(wanted)) {
    file = known_model_file(wanted).value_or(wanted);
    for (const fs::path& folder : search.folders()) {
      const fs::path candidate = folder / *file;
      if (present(candidate)) return candidate;
      searched.push_back(candidate.string());
    }
  }
  std::string how;
  if (file && known_model_file(wanted)) {
    how = fmt::format("run `scripts/fetch-model {}` to fetch it", wanted);
  } else {
    how = "give a Hugging Face folder or a .gguf file, or a name (smollm2, gemma3) after "
          "`scripts/fetch-model NAME`";
  }
  if (!search.data_models) {
    how += " ($HOME and $XDG_DATA_HOME are unset, so there is no data folder to search)";
  }
  return not_found("model '{}' ({}) not found; searched, in order:\n  {}\n{}", wanted, from,
                   fmt::join(searched, "\n  "), how);
}

const char* model_search_help() {
  return "MODEL: a Hugging Face folder or .gguf file, or a name (smollm2, gemma3, or a file "
         "name) looked up in ${XDG_DATA_HOME:-$HOME/.local/share}/cellm/models (filled by "
         "scripts/fetch-model), then in the models/ folder of the cellm checkout the binary "
         "belongs to. Without MODEL: $CELLM_MODEL (a path or a name), else smollm2.";
}

}  // namespace cellm::app
