// The `cellm` command's subcommands. Each registers its options on the
// CLI11 app and returns the function that runs it; main() only dispatches.
//
// Thread-safety: used from main() only.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace cellm::cli {

// Runs a parsed subcommand; returns the process exit code.
using Command = std::function<int()>;

Command add_run(CLI::App& app);
Command add_chat(CLI::App& app);
Command add_bench(CLI::App& app);
Command add_inspect(CLI::App& app);
#ifdef CELLM_HAVE_SERVER
Command add_serve(CLI::App& app);
#endif

// The fetched SmolLM2 that run, chat and serve use when no model is named.
const char* default_model_path();

}  // namespace cellm::cli
