// `cellm`: run, chat with, serve, benchmark and inspect language models.
// Dispatch only; each subcommand lives in its own cmd_*.cpp.
#include <cstdio>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "core/env.h"
#include "core/log.h"

int main(int argc, char** argv) {
  CLI::App app{"cellm: serve large language models to many users at once"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "cellm 0.1.0");
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  std::string log_format = "text";
  app.add_option("--log-format", log_format,
                 "text (plain lines, colored only on a terminal) or json (one object per line "
                 "with time, level and message)")
      ->capture_default_str();

  std::vector<std::pair<CLI::App*, cellm::cli::Command>> commands;
  auto add = [&](cellm::cli::Command (*fn)(CLI::App&)) {
    const std::size_t before = app.get_subcommands({}).size();
    cellm::cli::Command run = fn(app);
    if (run) commands.emplace_back(app.get_subcommands({}).at(before), std::move(run));
  };
  add(cellm::cli::add_run);
  add(cellm::cli::add_chat);
#ifdef CELLM_HAVE_SERVER
  add(cellm::cli::add_serve);
#endif
  add(cellm::cli::add_bench);
  add(cellm::cli::add_inspect);
  add(cellm::cli::add_perplexity);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  auto level = cellm::parse_log_level(log_level);
  if (!level.ok()) {
    std::fprintf(stderr, "cellm: %s\n", std::string(level.status().message()).c_str());
    return 2;
  }
  auto format = cellm::parse_log_format(log_format);
  if (!format.ok()) {
    std::fprintf(stderr, "cellm: %s\n", std::string(format.status().message()).c_str());
    return 2;
  }
  cellm::set_log_level(*level);
  cellm::set_log_format(*format);
  // Before any work: a mistyped CELLM_* name or value must stop the run, not
  // let it measure or serve with the default (core/env.h).
  if (cellm::Status env = cellm::check_process_environment(); !env.is_ok()) {
    std::fprintf(stderr, "cellm: %s\n", std::string(env.message()).c_str());
    return 1;
  }
  for (auto& [sub, run] : commands) {
    if (sub->parsed()) return run();
  }
  return 2;
}
