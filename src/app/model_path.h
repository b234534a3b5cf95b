// Where `cellm run`, `cellm chat` and `cellm serve` find a model, whatever the
// current directory. In order:
//   1. the MODEL argument: a path (a Hugging Face folder or a .gguf file), or
//      a name (smollm2, gemma3, or a file name) looked up in the folders below;
//   2. without an argument, $CELLM_MODEL (a path or a name, the same way);
//   3. without either, smollm2 (SmolLM2-135M-Instruct) in the folders below;
// folders searched for names:
//   a. ${XDG_DATA_HOME:-$HOME/.local/share}/cellm/models, which
//      scripts/fetch-model fills;
//   b. the models/ folder of the cellm checkout holding the running binary
//      (found from /proc/self/exe, not the current directory).
// A miss lists every place searched and how to fetch.
//
// Thread-safety: from_process() reads the environment (call it before
// starting threads that change it); the rest are pure functions.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cellm/status.h"

namespace cellm::app {

struct ModelSearch {
  std::optional<std::string> cellm_model;               // $CELLM_MODEL (empty counts as unset)
  std::optional<std::filesystem::path> data_models;     // a.
  std::optional<std::filesystem::path> checkout_models;  // b.

  // From the environment and the executable's location.
  static ModelSearch from_process();
  // The folders names are looked up in, in order.
  std::vector<std::filesystem::path> folders() const;
};

// The file a short name stands for ("smollm2" -> SmolLM2-135M-Instruct.Q4_1.gguf),
// or nullopt when `name` is no known short name.
std::optional<std::string> known_model_file(const std::string& name);

// `argument` empty: no MODEL given.
Result<std::filesystem::path> resolve_model(const std::string& argument, const ModelSearch& search);

// ${XDG_DATA_HOME:-$HOME/.local/share}/cellm/models for the given values
// (nullptr: unset); nullopt when neither gives an absolute folder.
std::optional<std::filesystem::path> data_models_folder(const char* xdg_data_home,
                                                        const char* home);
// <checkout>/models for the checkout holding `executable` (the first folder
// above it with scripts/fetch-model), or nullopt.
std::optional<std::filesystem::path> checkout_models_folder(const std::filesystem::path& executable);

// For --help: the search order in a few lines.
const char* model_search_help();

}  // namespace cellm::app
