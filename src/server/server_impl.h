// Server internals shared by http_server.cpp (lifecycle, small endpoints) and
// generation_endpoint.cpp (completions and chat).
//
// Thread-safety: `ready` and the run registry are guarded by their mutexes;
// the httplib server is driven by serve() and stop().
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <httplib.h>

#include "server/access_control.h"
#include "server/admission.h"
#include "server/anthropic_request.h"
#include "server/generation_run.h"
#include "server/http_server.h"
#include "server/server_metrics.h"

namespace cellm::server {

// What exists once the model is loaded; immutable afterwards.
struct ReadyState {
  std::shared_ptr<GenerationService> service;
  std::shared_ptr<AdmissionQueue> admission;
  std::string model_name;
};

struct Server::Impl {
  explicit Impl(ServerOptions o)
      : options(std::move(o)), access(options.api_keys, options.cors_origins) {}

  ServerOptions options;
  const AccessControl access;
  httplib::Server http;
  ServerMetrics metrics;
  int port = -1;
  int listen_fd = -1;  // the listening socket, once created
  bool bound = false;

  mutable std::mutex state_mu;
  std::shared_ptr<const ReadyState> ready;  // null while loading
  std::string load_error;
  std::atomic<bool> draining{false};

  std::mutex runs_mu;
  std::condition_variable runs_cv;
  std::map<GenerationRun*, std::weak_ptr<GenerationRun>> runs;
  bool aborting = false;

  std::mutex stop_mu;  // serialises stop()
  bool stopped = false;

  std::shared_ptr<const ReadyState> ready_state() const {
    std::lock_guard lock(state_mu);
    return ready;
  }
  // Answers 503 while loading, 500 after a failed load; null then.
  std::shared_ptr<const ReadyState> ready_or_reply(httplib::Response& res);

  void register_run(const std::shared_ptr<GenerationRun>& run);
  void unregister_run(GenerationRun* run);

  void install_routes();
  // CORS preflights and headers, when origins are configured.
  void install_cors();
  // `handler` behind the API key check (401 in the OpenAI error shape, or
  // Anthropic's with `anthropic_errors`).
  httplib::Server::Handler with_key(httplib::Server::Handler handler,
                                    bool anthropic_errors = false);
  // False after answering 401 when the request lacks a valid key (sent as
  // "Authorization: Bearer KEY" or "x-api-key: KEY").
  bool authorize(const httplib::Request& req, httplib::Response& res,
                 bool anthropic_errors = false) const;
  nlohmann::json model_json(const ReadyState& state) const;
  // `anthropic`: a /v1/messages request already translated to a chat body;
  // refusals and the answer then take Anthropic's shapes.
  void handle_generation(RequestKind kind, const httplib::Request& req, httplib::Response& res,
                         const AnthropicRequest* anthropic = nullptr);
  // POST /v1/messages: translate, then handle_generation (anthropic_endpoint.cpp).
  void handle_messages(const httplib::Request& req, httplib::Response& res);
  void handle_tokenize(const httplib::Request& req, httplib::Response& res);
  void handle_detokenize(const httplib::Request& req, httplib::Response& res);
};

// The OpenAI message list as the chat template sees it.
nlohmann::ordered_json chat_messages_json(const GenerationRequest& r);

void reply_json(httplib::Response& res, int status, const nlohmann::json& body);
void reply_error(httplib::Response& res, const Status& status, std::string_view param = {});

}  // namespace cellm::server
