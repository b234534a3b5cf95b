// POST /v1/completions and /v1/chat/completions: parse, build the prompt,
// check it against the context, queue for capacity, start the job and answer
// with JSON or an SSE stream.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <random>

#include <fmt/format.h>

#include "core/log.h"
#include "server/anthropic_response.h"
#include "server/connection_probe.h"
#include "server/server_impl.h"
#include "server/structured_output.h"

namespace cellm::server {
namespace {

using nlohmann::json;

std::string random_id(std::string_view prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), static_cast<std::uint32_t>(rng()));
}

// Token ids, or a refusal with the parameter it concerns.
struct PromptResult {
  std::vector<Token> tokens;
  Status status;
  std::string param;
};

PromptResult build_prompt(const GenerationService& svc, const GenerationRequest& r) {
  PromptResult out;
  if (r.kind == RequestKind::kChat) {
    const nlohmann::ordered_json messages = chat_messages_json(r);
    nlohmann::ordered_json extra = r.chat_template_kwargs.is_object()
                                       ? r.chat_template_kwargs
                                       : nlohmann::ordered_json::object();
    if (!r.tools.is_null()) extra["tools"] = r.tools;
    Result<std::string> text = svc.render_chat(messages, extra, r.add_generation_prompt);
    if (!text.ok()) {
      out.status =
          text.status().code() == StatusCode::kNotFound
              ? invalid_argument("this model has no chat template; use /v1/completions")
              : invalid_argument("rendering the chat template failed: {}", text.status().message());
      out.param = "messages";
      return out;
    }
    // The template writes the special tokens it wants (BOS included).
    Result<std::vector<Token>> ids = svc.tokenize(*text, /*add_special=*/false);
    if (!ids.ok()) {
      out.status = ids.status();
      out.param = "messages";
      return out;
    }
    out.tokens = std::move(*ids);
  } else if (r.prompt_tokens) {
    const std::int64_t vocab = svc.vocab_size();
    for (std::size_t i = 0; i < r.prompt_tokens->size(); ++i) {
      const std::int64_t id = (*r.prompt_tokens)[i];
      if (id < 0 || id >= vocab) {
        out.status = invalid_argument(
            "prompt token {} (at index {}) is outside the vocabulary of {}", id, i, vocab);
        out.param = "prompt";
        return out;
      }
      out.tokens.push_back(static_cast<Token>(id));
    }
  } else {
    Result<std::vector<Token>> ids = svc.tokenize(r.prompt_text.value_or(""), /*add_special=*/true);
    if (!ids.ok()) {
      out.status = ids.status();
      out.param = "prompt";
      return out;
    }
    out.tokens = std::move(*ids);
  }
  if (out.tokens.empty()) {
    out.status = invalid_argument("the prompt is empty: it must hold at least one token");
    out.param = r.kind == RequestKind::kChat ? "messages" : "prompt";
  }
  return out;
}

Outcome outcome_for(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOutOfResources: return Outcome::kQueueFull;
    case StatusCode::kUnavailable: return Outcome::kUnavailable;
    case StatusCode::kCancelled: return Outcome::kCancelled;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kNotSupported: return Outcome::kInvalid;
    case StatusCode::kOk:
    case StatusCode::kInternal:
    case StatusCode::kInvalidProgram:
    case StatusCode::kInvalidType:
    case StatusCode::kDataLoss:
    case StatusCode::kDeadlineExceeded: return Outcome::kFailed;
  }
  return Outcome::kFailed;
}

}  // namespace

nlohmann::ordered_json chat_messages_json(const GenerationRequest& r) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (const ChatMessage& m : r.messages) {
    nlohmann::ordered_json msg = nlohmann::ordered_json::object();
    msg["role"] = m.role;
    msg["content"] = m.content;
    if (m.extra.is_object()) {
      for (auto it = m.extra.begin(); it != m.extra.end(); ++it) msg[it.key()] = it.value();
    }
    messages.push_back(std::move(msg));
  }
  return messages;
}

void Server::Impl::handle_generation(RequestKind kind, const httplib::Request& req,
                                     httplib::Response& res, const AnthropicRequest* anthropic) {
  const auto arrival = std::chrono::steady_clock::now();
  const Endpoint endpoint = kind == RequestKind::kChat ? Endpoint::kChat : Endpoint::kCompletions;
  auto refuse = [&](const Status& s, std::string_view param = {}) {
    metrics.record_request(endpoint, outcome_for(s));
    if (anthropic == nullptr) return reply_error(res, s, param);
    auto [status, body] = anthropic_error(s, anthropic_param_name(param));
    reply_json(res, status, body);
  };

  std::shared_ptr<const ReadyState> state = ready_state();
  if (state == nullptr) {
    metrics.record_request(endpoint, Outcome::kUnavailable);
    ready_or_reply(res);
    return;
  }
  if (draining.load()) return refuse(unavailable("the server is shutting down"));

  RequestError error;
  // /v1/messages arrives translated into a chat body: the same parser checks it.
  const std::string translated = anthropic ? anthropic->chat.dump() : std::string();
  std::optional<GenerationRequest> parsed =
      parse_request(kind, anthropic ? std::string_view(translated) : std::string_view(req.body),
                    options.limits, &error);
  if (!parsed) return refuse(error.status, error.param);
  const GenerationRequest& r = *parsed;
  GenerationService& svc = *state->service;

  if (!r.model.empty() && r.model != state->model_name) {
    return refuse(not_found("the model '{}' does not exist here; this server serves '{}'", r.model,
                            state->model_name),
                  "model");
  }

  PromptResult prompt = build_prompt(svc, r);
  if (!prompt.status.is_ok()) return refuse(prompt.status, prompt.param);
  const std::int64_t context = svc.context_length();
  const auto prompt_len = static_cast<std::int64_t>(prompt.tokens.size());
  if (prompt_len >= context) {
    return refuse(
        invalid_argument("the prompt has {} tokens but the context holds {}: it must leave "
                         "room for at least one generated token",
                         prompt_len, context),
        prompt.param.empty() ? (kind == RequestKind::kChat ? "messages" : "prompt") : prompt.param);
  }
  // Without max_tokens: the server's default cap, within what the context leaves.
  const std::int64_t room = context - prompt_len;
  // echo with max_tokens 0 shows the prompt alone: the engine still runs the
  // prompt (its logprobs need the forward) and draws one token, dropped.
  const bool prompt_only = r.echo && r.max_tokens && *r.max_tokens == 0;
  const std::int64_t max_new =
      prompt_only    ? 1
      : r.max_tokens ? *r.max_tokens
                     : (options.limits.default_max_tokens > 0
                            ? std::min<std::int64_t>(options.limits.default_max_tokens, room)
                            : room);
  if (prompt_len + max_new > context) {
    return refuse(
        invalid_argument("max_tokens {} plus the prompt's {} tokens exceed the context of "
                         "{} tokens; ask for at most {}",
                         max_new, prompt_len, context, context - prompt_len),
        kind == RequestKind::kChat && req.body.find("max_completion_tokens") != std::string::npos
            ? "max_completion_tokens"
            : "max_tokens");
  }

  if (r.min_tokens > max_new) {
    return refuse(invalid_argument("min_tokens {} exceeds the {} tokens this prompt can still "
                                   "generate (max_tokens or what the context leaves)",
                                   r.min_tokens, max_new),
                  "min_tokens");
  }

  // Ids the request names must exist in the model's vocabulary.
  const std::int64_t vocab = svc.vocab_size();
  for (const auto& [id, bias] : r.logit_bias) {
    if (vocab > 0 && id >= vocab) {
      return refuse(invalid_argument("'logit_bias' names token {}, outside the vocabulary of {} "
                                     "tokens",
                                     id, vocab),
                    "logit_bias");
    }
  }
  for (std::int64_t id : r.stop_token_ids) {
    if (vocab > 0 && id >= vocab) {
      return refuse(invalid_argument("'stop_token_ids' names token {}, outside the vocabulary of "
                                     "{} tokens",
                                     id, vocab),
                    "stop_token_ids");
    }
  }

  if (r.min_tokens > 0 && (!r.ignore_eos || !r.stop_token_ids.empty())) {
    // Until min_tokens every stop token is suppressed in sampling, which
    // some device samplers cannot do at all and a policy does for only so
    // many ids; refused here rather than failing once the run has started.
    std::vector<Token> stops = r.ignore_eos ? std::vector<Token>{} : svc.stop_tokens();
    stops.insert(stops.end(), r.stop_token_ids.begin(), r.stop_token_ids.end());
    std::sort(stops.begin(), stops.end());
    stops.erase(std::unique(stops.begin(), stops.end()), stops.end());
    if (!stops.empty() && !svc.can_suppress_tokens()) {
      return refuse(invalid_argument("min_tokens {} needs the model's stop tokens held back "
                                     "until it is reached, but this server's sampler cannot "
                                     "suppress token ids (its device sample method takes none); "
                                     "drop min_tokens or set ignore_eos",
                                     r.min_tokens),
                    "min_tokens");
    }
    if (stops.size() > kMaxSuppressedTokens) {
      return refuse(invalid_argument("min_tokens needs the model's {} stop tokens held back until "
                                     "it is reached, but at most {} can be; drop min_tokens or "
                                     "set ignore_eos",
                                     stops.size(), kMaxSuppressedTokens),
                    "min_tokens");
    }
  }

  // Structured outputs and forced tool calls: compiled (or found in the
  // cache) before anything starts; a bad schema is a 400 naming it.
  StructuredOutput structured = structured_constraint(r, svc.tool_format(), svc.token_vocabulary());
  if (!structured.status.is_ok()) return refuse(structured.status, structured.param);

  GenerationSpec spec;
  spec.constraint = std::move(structured.constraint);
  RunSetup setup;
  if (r.echo) {
    setup.echo = true;
    setup.prompt_only = prompt_only;
    setup.echo_tokens = prompt.tokens;
    setup.echo_text = r.prompt_text ? *r.prompt_text : svc.detokenize(prompt.tokens);
    // Every prompt token is fed and scored: a cached prefix would be skipped.
    spec.sampling.prompt_logprobs = r.logprobs >= 0;
    spec.use_prefix_cache = !spec.sampling.prompt_logprobs;
  }
  spec.prompt = std::move(prompt.tokens);
  spec.n = r.n;
  spec.max_new_tokens = max_new;
  spec.min_new_tokens = r.min_tokens;
  spec.sampling.temperature = r.temperature;
  spec.sampling.top_p = r.top_p;
  spec.sampling.top_k = r.top_k;
  spec.sampling.presence_penalty = r.presence_penalty;
  spec.sampling.frequency_penalty = r.frequency_penalty;
  spec.sampling.repetition_penalty = r.repetition_penalty;
  spec.sampling.min_p = r.min_p;
  spec.sampling.logprobs = r.logprobs;
  if (!r.logit_bias.empty()) {
    std::vector<LogitBias> bias;
    bias.reserve(r.logit_bias.size());
    for (const auto& [id, value] : r.logit_bias) bias.push_back({static_cast<Token>(id), value});
    // The policy's list is sorted by id, one entry an id (JSON keys are
    // unique, but "7" and "07" name the same id: the later one wins).
    std::stable_sort(bias.begin(), bias.end(),
                     [](const LogitBias& a, const LogitBias& b) { return a.token < b.token; });
    std::vector<LogitBias> unique;
    for (const LogitBias& b : bias) {
      if (!unique.empty() && unique.back().token == b.token) {
        unique.back() = b;
      } else {
        unique.push_back(b);
      }
    }
    spec.sampling.logit_bias = std::make_shared<const std::vector<LogitBias>>(std::move(unique));
  }
  spec.stop_token_ids.assign(r.stop_token_ids.begin(), r.stop_token_ids.end());
  spec.stop_strings = r.stop;
  apply_sampling_defaults(svc.sampling_defaults(), r.given, spec.sampling);
  spec.seed = r.seed;
  spec.ignore_eos = r.ignore_eos;

  setup.kind = kind;
  setup.ids.id = random_id(anthropic ? "msg_" : kind == RequestKind::kChat ? "chatcmpl-" : "cmpl-");
  setup.ids.created = static_cast<std::int64_t>(std::time(nullptr));
  setup.ids.model = state->model_name;
  setup.n = r.n;
  setup.include_usage = r.include_usage;
  setup.prompt_tokens = prompt_len;
  setup.stop = r.stop;
  setup.logprobs = r.logprobs;
  setup.arrival = arrival;
  setup.record_prefix_lookup = svc.prefix_caching() && spec.use_prefix_cache;
  // tool_choice "none" cleared r.tools: no tools rendered, nothing parsed.
  if (kind == RequestKind::kChat && !r.tools.is_null()) setup.tool_format = svc.tool_format();
  if (structured.tool_format) setup.tool_format = *structured.tool_format;
  Result<std::shared_ptr<GenerationRun>> created = GenerationRun::create(setup, svc, metrics);
  if (!created.ok()) return refuse(created.status(), "stop");
  std::shared_ptr<GenerationRun> run = std::move(*created);

  auto probe = std::make_shared<ConnectionProbe>(req.local_addr, req.local_port, req.remote_addr,
                                                 req.remote_port);
  auto gone = [probe] { return probe->closed(); };
  // Registered before it can start: a stop() from here on drains this run
  // instead of finding no run and aborting it as soon as it registers.
  register_run(run);
  Result<AdmissionQueue::Ticket> ticket = state->admission->acquire(r.n, gone);
  if (!ticket.ok()) {
    unregister_run(run.get());
    return refuse(ticket.status(),
                  ticket.status().code() == StatusCode::kInvalidArgument ? "n" : "");
  }
  Result<std::unique_ptr<GenerationJob>> job = svc.start(spec, run->sink());
  if (!job.ok()) {
    CELLM_LOG_WARN("server: could not start a generation: {}", job.status().to_string());
    unregister_run(run.get());
    return refuse(job.status());
  }
  run->attach(std::move(*job), std::move(*ticket));

  if (!r.stream) {
    auto [status, body] = run->collect(gone);
    const int stop_index = run->stop_string_index(0);
    unregister_run(run.get());
    if (anthropic != nullptr) {
      std::tie(status, body) =
          status == 200 ? anthropic_message_from_chat(
                              body, stop_sequence_at(anthropic->stop_sequences, stop_index))
                        : anthropic_error_from_chat(status, body);
    }
    reply_json(res, status, body);
    return;
  }
  std::shared_ptr<AnthropicStream> shape;
  if (anthropic != nullptr) {
    // Asked on the HTTP thread inside run->stream(), while the run is alive.
    GenerationRun* raw = run.get();
    shape = std::make_shared<AnthropicStream>(
        setup.ids.id, setup.ids.model, prompt_len, [raw, stops = anthropic->stop_sequences] {
          return stop_sequence_at(stops, raw->stop_string_index(0));
        });
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, run, gone, shape](std::size_t, httplib::DataSink& sink) {
        auto write = [&sink](std::string_view s) { return sink.write(s.data(), s.size()); };
        if (shape) {
          run->stream(
              [&](std::string_view s) {
                const std::string events = shape->feed(s);
                return events.empty() || write(events);
              },
              gone);
        } else {
          run->stream(write, gone);
        }
        unregister_run(run.get());
        sink.done();
        return true;
      },
      [this, run](bool) {
        // Also reached when the provider never ran (the client left first).
        run->finish();
        unregister_run(run.get());
      });
}

}  // namespace cellm::server
