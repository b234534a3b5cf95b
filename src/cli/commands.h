// The `cellm` command's subcommands. Each registers its options on the
// CLI11 app and returns the function that runs it; main() only dispatches.
//
// Thread-safety: used from main() only.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace cellm::cli {

// Runs a parsed subcommand; returns the process exit code.
using Command = std::function<int()>;

Command add_run(CLI::App& app);
Command add_chat(CLI::App& app);
Command add_bench(CLI::App& app);
Command add_inspect(CLI::App& app);
Command add_perplexity(CLI::App& app);
#ifdef CELLM_HAVE_SERVER
Command add_serve(CLI::App& app);
#endif

// The model run, chat and serve use: MODEL (empty: none given) resolved
// through the search path of app/model_path.h; on a miss, prints the places
// searched and how to fetch, and returns nullopt.
std::optional<std::filesystem::path> find_model_or_report(const std::string& model);

}  // namespace cellm::cli
