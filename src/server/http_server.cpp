#include "server/http_server.h"

#include <algorithm>
#include <chrono>
#include <sys/socket.h>
#include <vector>

#include "core/log.h"
#include "server/anthropic_response.h"
#include "server/chat_page.h"
#include "server/listen_socket.h"
#include "server/server_impl.h"

namespace cellm::server {
namespace {

using nlohmann::json;

constexpr std::chrono::seconds kAbortGrace(10);

}  // namespace

void reply_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void reply_error(httplib::Response& res, const Status& status, std::string_view param) {
  reply_json(res, http_status(status.code()), error_json(status, param));
}

std::shared_ptr<const ReadyState> Server::Impl::ready_or_reply(httplib::Response& res) {
  std::lock_guard lock(state_mu);
  if (ready) return ready;
  if (!load_error.empty()) {
    reply_error(res, unavailable("the model failed to load: {}", load_error));
  } else {
    reply_error(res, unavailable("the model is still loading; retry when GET /health answers 200"));
  }
  return nullptr;
}

void Server::Impl::register_run(const std::shared_ptr<GenerationRun>& run) {
  bool abort_now = false;
  {
    std::lock_guard lock(runs_mu);
    runs[run.get()] = run;
    abort_now = aborting;
  }
  if (abort_now) run->abort();
}

void Server::Impl::unregister_run(GenerationRun* run) {
  {
    std::lock_guard lock(runs_mu);
    runs.erase(run);
  }
  runs_cv.notify_all();
}

void Server::Impl::handle_tokenize(const httplib::Request& req, httplib::Response& res) {
  std::shared_ptr<const ReadyState> state = ready_or_reply(res);
  if (!state) return;
  const GenerationService& svc = *state->service;
  const auto body = nlohmann::ordered_json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return reply_error(res, invalid_argument("the request body must be a JSON object"));
  }
  Result<std::vector<Token>> ids = invalid_argument("unset");
  if (body.contains("messages")) {
    // Reuse the chat parser so /tokenize counts exactly what a chat request would.
    nlohmann::ordered_json chat = nlohmann::ordered_json::object();
    chat["messages"] = body["messages"];
    if (body.contains("add_generation_prompt"))
      chat["add_generation_prompt"] = body["add_generation_prompt"];
    RequestError error;
    std::optional<GenerationRequest> r =
        parse_request(RequestKind::kChat, chat.dump(), options.limits, &error);
    if (!r) return reply_error(res, error.status, error.param);
    Result<std::string> text = svc.render_chat(
        chat_messages_json(*r), nlohmann::ordered_json::object(), r->add_generation_prompt);
    if (!text.ok())
      return reply_error(res, invalid_argument("{}", text.status().message()), "messages");
    ids = svc.tokenize(*text, false);
  } else {
    auto prompt = body.find("prompt");
    if (prompt == body.end() || !prompt->is_string()) {
      return reply_error(res, invalid_argument("'prompt' (a string) or 'messages' is required"),
                         "prompt");
    }
    bool add_special = true;
    if (auto a = body.find("add_special_tokens"); a != body.end()) {
      if (!a->is_boolean()) {
        return reply_error(res, invalid_argument("'add_special_tokens' must be a boolean"),
                           "add_special_tokens");
      }
      add_special = a->get<bool>();
    }
    ids = svc.tokenize(prompt->get<std::string>(), add_special);
  }
  if (!ids.ok()) return reply_error(res, ids.status());
  reply_json(
      res, 200,
      json{{"tokens", *ids}, {"count", ids->size()}, {"max_model_len", svc.context_length()}});
}

void Server::Impl::handle_detokenize(const httplib::Request& req, httplib::Response& res) {
  std::shared_ptr<const ReadyState> state = ready_or_reply(res);
  if (!state) return;
  const GenerationService& svc = *state->service;
  const json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return reply_error(res, invalid_argument("the request body must be a JSON object"));
  }
  auto tokens = body.find("tokens");
  if (tokens == body.end() || !tokens->is_array()) {
    return reply_error(res, invalid_argument("'tokens' must be a list of token ids"), "tokens");
  }
  std::vector<Token> ids;
  for (const json& t : *tokens) {
    if (!t.is_number_integer() || t.get<std::int64_t>() < 0 ||
        t.get<std::int64_t>() >= svc.vocab_size()) {
      return reply_error(
          res, invalid_argument("'tokens' entries must be ids in [0, {})", svc.vocab_size()),
          "tokens");
    }
    ids.push_back(static_cast<Token>(t.get<std::int64_t>()));
  }
  reply_json(res, 200, json{{"prompt", svc.detokenize(ids)}});
}

bool Server::Impl::authorize(const httplib::Request& req, httplib::Response& res,
                             bool anthropic_errors) const {
  const AccessControl::KeyCheck check = access.check_request(req.get_header_value("Authorization"),
                                                             req.get_header_value("x-api-key"));
  if (check == AccessControl::KeyCheck::kOk) return true;
  const bool missing = check == AccessControl::KeyCheck::kMissing;
  if (anthropic_errors) {
    reply_json(res, 401,
               anthropic_error_json("authentication_error",
                                    missing ? "this server requires an API key: send the header "
                                              "'x-api-key: <key>'"
                                            : "the API key is not valid for this server"));
    return false;
  }
  reply_json(res, 401,
             json{{"error",
                   {{"message", missing ? "this server requires an API key: send the header "
                                          "'Authorization: Bearer <key>'"
                                        : "the API key is not valid for this server"},
                    {"type", "authentication_error"},
                    {"param", nullptr},
                    {"code", "invalid_api_key"}}}});
  res.set_header("WWW-Authenticate", missing ? R"(Bearer realm="cellm")"
                                             : R"(Bearer realm="cellm", error="invalid_token")");
  return false;
}

httplib::Server::Handler Server::Impl::with_key(httplib::Server::Handler handler,
                                                bool anthropic_errors) {
  if (!access.requires_key()) return handler;
  return [this, handler = std::move(handler), anthropic_errors](const httplib::Request& req,
                                                                httplib::Response& res) {
    if (authorize(req, res, anthropic_errors)) handler(req, res);
  };
}

void Server::Impl::install_cors() {
  if (!access.cors_enabled()) return;
  // Preflights carry no credentials, so they are answered before any key check.
  http.Options(R"(/.*)", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string origin = req.get_header_value("Origin");
    const std::string allowed = access.allowed_origin(origin);
    if (allowed.empty()) {
      return reply_json(
          res, 403,
          error_json(invalid_argument("the origin '{}' may not call this server (see --cors)",
                                      origin)));
    }
    res.status = 204;
    res.set_header("Access-Control-Allow-Origin", allowed);
    if (allowed != "*") res.set_header("Vary", "Origin");
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    res.set_header("Access-Control-Allow-Headers",
                   cors_allow_headers(req.get_header_value("Access-Control-Request-Headers")));
    res.set_header("Access-Control-Max-Age", "600");
  });
  // Every other answer (errors and streams included) names the origin when
  // it is allowed; the headers are written after this runs.
  http.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (res.has_header("Access-Control-Allow-Origin")) return;
    const std::string allowed = access.allowed_origin(req.get_header_value("Origin"));
    if (allowed.empty()) return;
    res.set_header("Access-Control-Allow-Origin", allowed);
    if (allowed != "*") res.set_header("Vary", "Origin");
  });
}

json Server::Impl::model_json(const ReadyState& state) const {
  return json{{"id", state.model_name},
              {"object", "model"},
              {"created", 0},
              {"owned_by", "cellm"},
              {"max_model_len", state.service->context_length()}};
}

void Server::Impl::install_routes() {
  install_cors();
  // The chat page and /health stay public: the page is static (its API calls
  // are what need the key), and load balancers probe /health without one.
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(std::string(chat_page_html()), "text/html; charset=utf-8");
  });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    std::lock_guard lock(state_mu);
    if (ready && !draining.load()) return reply_json(res, 200, json{{"status", "ok"}});
    if (ready) return reply_json(res, 503, json{{"status", "stopping"}});
    if (!load_error.empty()) {
      return reply_json(res, 500, json{{"status", "failed"}, {"error", load_error}});
    }
    reply_json(res, 503, json{{"status", "loading"}});
  });
  httplib::Server::Handler metrics_handler = [this](const httplib::Request&,
                                                    httplib::Response& res) {
    Gauges g;
    if (std::shared_ptr<const ReadyState> state = ready_state()) {
      g.ready = true;
      g.running_requests = state->admission->running_requests();
      g.running_sequences = state->admission->running_sequences();
      g.waiting_requests = state->admission->waiting_requests();
      const ServiceStats stats = state->service->stats();
      g.kv_cells_used = stats.kv_cells_used;
      g.kv_cells_total = stats.kv_cells_total;
      g.snapshot_sessions = stats.snapshot_sessions;
      g.spec_draft_tokens = stats.spec_draft_tokens;
      g.spec_accepted_tokens = stats.spec_accepted_tokens;
    }
    res.set_content(metrics.render(g), "text/plain; version=0.0.4; charset=utf-8");
  };
  http.Get("/metrics",
           options.metrics_open ? metrics_handler : with_key(std::move(metrics_handler)));
  http.Get("/v1/models", with_key([this](const httplib::Request&, httplib::Response& res) {
             std::shared_ptr<const ReadyState> state = ready_or_reply(res);
             if (!state) return;
             reply_json(res, 200,
                        json{{"object", "list"}, {"data", json::array({model_json(*state)})}});
           }));
  // Ids may contain '/' (org/name), so the rest of the path is the id.
  http.Get(R"(/v1/models/(.+))",
           with_key([this](const httplib::Request& req, httplib::Response& res) {
             std::shared_ptr<const ReadyState> state = ready_or_reply(res);
             if (!state) return;
             const std::string id = req.matches[1];
             if (id != state->model_name) {
               return reply_error(res,
                                  not_found("the model '{}' does not exist: this server serves '{}'",
                                            id, state->model_name),
                                  "model");
             }
             reply_json(res, 200, model_json(*state));
           }));
  http.Post("/v1/completions",
            with_key([this](const httplib::Request& req, httplib::Response& res) {
              handle_generation(RequestKind::kCompletion, req, res);
            }));
  http.Post("/v1/chat/completions",
            with_key([this](const httplib::Request& req, httplib::Response& res) {
              handle_generation(RequestKind::kChat, req, res);
            }));
  http.Post("/v1/messages", with_key([this](const httplib::Request& req,
                                            httplib::Response& res) { handle_messages(req, res); },
                                     /*anthropic_errors=*/true));
  http.Post("/tokenize", with_key([this](const httplib::Request& req, httplib::Response& res) {
              handle_tokenize(req, res);
            }));
  http.Post("/detokenize", with_key([this](const httplib::Request& req, httplib::Response& res) {
              handle_detokenize(req, res);
            }));
  // httplib answers unknown routes (404) and oversized bodies (413) itself
  // with an empty body; give those the OpenAI error shape. Bodies our
  // handlers wrote are left alone.
  http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                     httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    Status s;
    if (res.status == 404) {
      s = not_found("no route for {} {}", req.method, req.path);
    } else if (res.status == 413) {
      s = invalid_argument("the request body exceeds the limit of {} bytes", options.body_limit);
    } else {
      s = invalid_argument("the request could not be handled (HTTP {})", res.status);
    }
    const int code = res.status;
    if (req.path == "/v1/messages") {
      // Anthropic clients read their own error shape (e.g. a 413 body).
      reply_json(res, code, anthropic_error_json(anthropic_error_kind(code).second, s.message()));
    } else {
      reply_json(res, code, error_json(s));
    }
    return httplib::Server::HandlerResponse::Handled;
  }));
}

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  Impl& s = *impl_;
  const std::int32_t threads = s.options.threads > 0
                                   ? s.options.threads
                                   : std::min<std::int32_t>(s.options.max_queue + 128, 1024);
  s.http.new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<std::size_t>(threads));
  };
  s.http.set_payload_max_length(s.options.body_limit);
  s.http.set_keep_alive_timeout(2);
  s.http.set_read_timeout(30, 0);
  s.http.set_write_timeout(30, 0);
  // cpp-httplib closes a keep-alive connection after 5 requests; clients
  // that keep connections (the OpenAI clients, cellm bench serve) would
  // reconnect every 5 requests, in bursts when requests end together.
  s.http.set_keep_alive_max_count(1 << 20);
  s.http.set_socket_options([&s](socket_t fd) {
    set_listen_socket_options(fd);
    s.listen_fd = fd;
  });
  s.install_routes();
}

Server::~Server() {
  stop();
}

Status Server::bind() {
  Impl& s = *impl_;
  if (s.bound) return Status::ok();
  if (s.options.port == 0) {
    s.port = s.http.bind_to_any_port(s.options.host);
  } else if (s.http.bind_to_port(s.options.host, s.options.port)) {
    s.port = s.options.port;
  }
  if (s.port <= 0) {
    s.port = -1;
    Status why = diagnose_listen_failure(s.options.host, s.options.port);
    if (why.is_ok()) {
      why = invalid_argument("cannot listen on {}:{} (the port may have been taken meanwhile): "
                             "retry, or pass --port N (0 picks a free port)",
                             s.options.host, s.options.port);
    }
    return why;
  }
  // The packaged cpp-httplib listens with a backlog of 5: a burst of new
  // connections (256 clients starting at once) overflows it and the dropped
  // SYNs are retried a second later, which clients see as a 1 s TTFT. A
  // second listen() on the bound socket only raises the backlog.
  if (s.listen_fd >= 0) ::listen(s.listen_fd, SOMAXCONN);
  s.bound = true;
  return Status::ok();
}

int Server::port() const {
  return impl_->port;
}

Status Server::serve() {
  CELLM_RETURN_IF_ERROR(bind());
  {
    std::lock_guard lock(impl_->stop_mu);
    if (impl_->stopped) return Status::ok();
  }
  if (!impl_->http.listen_after_bind()) {
    std::lock_guard lock(impl_->stop_mu);
    if (!impl_->stopped) return internal_error("the HTTP listener on port {} failed", impl_->port);
  }
  return Status::ok();
}

void Server::stop() {
  Impl& s = *impl_;
  std::lock_guard stop_lock(s.stop_mu);
  if (s.stopped) return;
  s.stopped = true;
  s.draining.store(true);
  if (std::shared_ptr<const ReadyState> state = s.ready_state()) state->admission->close();

  std::unique_lock lock(s.runs_mu);
  if (!s.runs_cv.wait_for(lock, s.options.drain_timeout, [&] { return s.runs.empty(); })) {
    CELLM_LOG_WARN("server: {} requests still running after the drain timeout; cancelling them",
                   s.runs.size());
  }
  s.aborting = true;
  std::vector<std::shared_ptr<GenerationRun>> left;
  for (auto& [ptr, weak] : s.runs) {
    if (std::shared_ptr<GenerationRun> run = weak.lock()) left.push_back(std::move(run));
  }
  lock.unlock();
  for (const auto& run : left) run->abort();
  left.clear();
  lock.lock();
  s.runs_cv.wait_for(lock, kAbortGrace, [&] { return s.runs.empty(); });
  lock.unlock();
  s.http.stop();
}

void Server::set_service(std::shared_ptr<GenerationService> service) {
  Impl& s = *impl_;
  auto state = std::make_shared<ReadyState>();
  const std::int32_t capacity =
      s.options.max_running > 0 ? s.options.max_running : service->max_sequences();
  state->admission = std::make_shared<AdmissionQueue>(capacity, s.options.max_queue);
  state->model_name = s.options.model_name.empty() ? service->model_name() : s.options.model_name;
  state->service = std::move(service);
  if (s.draining.load()) state->admission->close();
  std::lock_guard lock(s.state_mu);
  s.ready = std::move(state);
}

void Server::set_load_failed(std::string message) {
  std::lock_guard lock(impl_->state_mu);
  impl_->load_error = std::move(message);
}

}  // namespace cellm::server
