// A stand-in for `cellm serve` used by the e2e tests until (or unless) the CLI
// provides it: the same run_serve() behind the same flag names, parsed by hand
// so the tests do not depend on the CLI. "serve" as the first argument is
// accepted and ignored and the model may be positional, so `driver serve
// MODEL --port 0` reads like the CLI.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "server/serve_main.h"

int main(int argc, char** argv) {
  cellm::server::ServeArgs a;
  int i = 1;
  if (i < argc && std::string(argv[i]) == "serve") ++i;
  for (; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag.rfind("--", 0) != 0) {  // the model, positional as in `cellm serve MODEL`
      a.model = flag;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "serve_driver: %s needs a value\n", flag.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    if (flag == "--model") a.model = v;
    else if (flag == "--host") a.host = v;
    else if (flag == "--port") a.port = std::stoi(v);
    else if (flag == "--backend") a.backend = v;
    else if (flag == "--max-sessions") a.max_sessions = std::stoi(v);
    else if (flag == "--max-session-tokens") a.max_session_tokens = std::stoi(v);
    else if (flag == "--prefix-cache") a.prefix_cache_entries = std::stoi(v);
    else if (flag == "--max-queue") a.max_queue = std::stoi(v);
    else if (flag == "--body-limit") a.body_limit = std::stoul(v);
    else if (flag == "--served-model-name") a.served_model_name = v;
    else if (flag == "--drain-timeout") a.drain_timeout_s = std::stoi(v);
    else {
      std::fprintf(stderr, "serve_driver: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (a.model.empty()) {
    std::fprintf(stderr, "serve_driver: --model is required\n");
    return 2;
  }
  return cellm::server::run_serve(a);
}
