// Tallying, the printed table and the JSON line of the HTTP mode.
#include "bench/http_report.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

namespace cellm::bench {
namespace {

constexpr int kMaxTimelineBins = 60;

std::string rate_text(double rate) {
  return std::isinf(rate) ? std::string("inf") : fmt::format("{:g}", rate);
}

double round_to(double v, double unit) {
  return std::round(v / unit) * unit;
}

}  // namespace

std::vector<double> quantiles(std::vector<double> values) {
  std::vector<double> q;
  if (values.empty()) return q;
  std::sort(values.begin(), values.end());
  q.reserve(101);
  for (int p = 0; p <= 100; ++p) q.push_back(percentile(values, p));
  return q;
}

void tally_http(const std::vector<RequestSpec>& requests, const std::vector<RequestRecord>& records,
                HttpBenchReport& r, bool exact_lengths) {
  std::vector<double> ttft, tpot, itl, e2e;
  double end_s = 0;
  // (time, tokens) of each text chunk of each completed request.
  struct Mark {
    double at_s;
    double tokens;
  };
  std::vector<Mark> marks;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const RequestRecord& rec = records[i];
    const RequestSpec& req = requests[i];
    if (!rec.ok) {
      if (r.failed++ == 0) r.first_error = fmt::format("request {}: {}", i, rec.error);
      continue;
    }
    ++r.completed;
    const std::int64_t out = rec.completion_tokens >= 0 ? rec.completion_tokens : rec.text_chunks;
    const std::int64_t in =
        rec.prompt_tokens >= 0 ? rec.prompt_tokens : static_cast<std::int64_t>(req.prompt.size());
    if (exact_lengths && out != req.output_len) ++r.length_mismatches;
    if (rec.completion_tokens < 0) ++r.usage_missing;
    r.output_tokens += out;
    r.input_tokens += in;
    end_s = std::max(end_s, rec.sent_s + rec.e2e_ms / 1e3);
    ttft.push_back(rec.ttft_ms);
    e2e.push_back(rec.e2e_ms);
    if (out > 1) tpot.push_back((rec.e2e_ms - rec.ttft_ms) / static_cast<double>(out - 1));
    itl.insert(itl.end(), rec.itl_ms.begin(), rec.itl_ms.end());
    // Spread the request's tokens evenly over its chunks.
    const double per_chunk =
        static_cast<double>(out) / static_cast<double>(std::max<std::int64_t>(rec.text_chunks, 1));
    double t = rec.sent_s + rec.ttft_ms / 1e3;
    marks.push_back({t, per_chunk});
    for (float gap : rec.itl_ms) {
      t += gap / 1e3;
      marks.push_back({t, per_chunk});
    }
  }
  r.duration_s = end_s;
  if (r.duration_s > 0) {
    r.request_throughput = r.completed / r.duration_s;
    r.output_tokens_per_s = static_cast<double>(r.output_tokens) / r.duration_s;
    r.total_tokens_per_s = static_cast<double>(r.input_tokens + r.output_tokens) / r.duration_s;
    // Bins of a whole number of tenths of a second, about kMaxTimelineBins of them.
    r.timeline_bin_s = std::max(0.1, std::ceil(r.duration_s / kMaxTimelineBins * 10) / 10);
    const auto bins = static_cast<std::size_t>(std::ceil(r.duration_s / r.timeline_bin_s));
    std::vector<double> tokens(std::max<std::size_t>(bins, 1), 0.0);
    for (const Mark& m : marks) {
      const auto b = std::min(tokens.size() - 1,
                              static_cast<std::size_t>(std::max(0.0, m.at_s / r.timeline_bin_s)));
      tokens[b] += m.tokens;
    }
    r.output_tps_timeline.clear();
    for (double v : tokens) r.output_tps_timeline.push_back(v / r.timeline_bin_s);
  }
  r.ttft_q = quantiles(ttft);
  r.tpot_q = quantiles(tpot);
  r.itl_q = quantiles(itl);
  r.e2e_q = quantiles(e2e);
  r.ttft_ms = summarize(std::move(ttft));
  r.tpot_ms = summarize(std::move(tpot));
  r.itl_ms = summarize(std::move(itl));
  r.e2e_ms = summarize(std::move(e2e));
}

std::optional<HttpBenchReport::Speculation> parse_spec_counters(std::string_view text) {
  constexpr std::string_view kDraft = "spec_decode_num_draft_tokens_total";
  constexpr std::string_view kAccepted = "spec_decode_num_accepted_tokens_total";
  auto ends_with = [](std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
  };
  HttpBenchReport::Speculation c;
  bool seen = false;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (line.empty() || line.front() == '#') continue;
    const std::size_t name_end = line.find_first_of("{ ");
    if (name_end == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, name_end);
    std::int64_t* sum = ends_with(name, kDraft)      ? &c.proposed
                        : ends_with(name, kAccepted) ? &c.accepted
                                                     : nullptr;
    if (sum == nullptr) continue;
    std::size_t value_at = name_end;
    if (line[name_end] == '{') {
      const std::size_t close = line.find('}', name_end);
      if (close == std::string_view::npos) continue;
      value_at = close + 1;
    }
    std::string value(line.substr(value_at));
    const std::size_t first = value.find_first_not_of(' ');
    if (first == std::string::npos) continue;
    value = value.substr(first, value.find(' ', first) - first);
    // Counters are printed as floats ("12" or "1.2e+03").
    char* parsed_end = nullptr;
    const double v = std::strtod(value.c_str(), &parsed_end);
    if (parsed_end == value.c_str() || !std::isfinite(v)) continue;
    *sum += static_cast<std::int64_t>(std::llround(v));
    seen = true;
  }
  if (!seen) return std::nullopt;
  return c;
}

std::string format_http_report(const HttpBenchOptions& o, const HttpBenchReport& r) {
  std::string t;
  auto row = [&t](std::string_view name, const std::string& value) {
    t += fmt::format("| {} | {} |\n", name, value);
  };
  t += fmt::format("\n| {} over HTTP ({}) on {} ({}) | |\n|---|---|\n", r.model, r.target, r.device,
                   r.backend);
  row("requests completed / failed", fmt::format("{} / {}", r.completed, r.failed));
  if (!r.first_error.empty()) row("first failure", r.first_error);
  if (r.length_mismatches > 0) {
    row("completed with another output length", fmt::format("{}", r.length_mismatches));
  }
  if (r.usage_missing > 0) {
    row("completed without usage (text chunks counted)", fmt::format("{}", r.usage_missing));
  }
  if (!o.dataset.empty()) {
    row("dataset", fmt::format("{} ({} requests in the file, {})", o.dataset_path, o.dataset.size(),
                               o.ignore_eos ? "ignore_eos" : "each ends where the model ends it"));
  } else {
    row("lengths in / out",
        fmt::format(
            "{} / {}{}{}", o.load.input_len, o.load.output_len,
            o.load.range_ratio > 0 ? fmt::format(" (range ratio {:g})", o.load.range_ratio) : "",
            o.prompt_format == PromptFormat::kText ? ", text prompts" : ", token-id prompts"));
  }
  if (r.target == "in-process") {
    row("K/V dtype", std::string(dtype_name(o.load.kv_dtype)));
    row("speculative decoding",
        o.speculate == "off" ? std::string("off")
                             : fmt::format("{}{}, up to {} drafts a step", o.speculate,
                                           o.draft_model.empty() ? "" : " (" + o.draft_model + ")",
                                           o.speculate_tokens));
  }
  if (r.speculation) {
    row("draft tokens proposed / accepted",
        fmt::format("{} / {} (acceptance {:.3f})", r.speculation->proposed, r.speculation->accepted,
                    r.speculation->acceptance()));
  }
  if (!o.json_schema.empty()) {
    row("response_format", fmt::format("json_schema ({})", o.json_schema_file));
  }
  row("request rate / max concurrency",
      fmt::format(
          "{} req/s / {}", rate_text(o.load.request_rate),
          o.load.max_concurrency > 0 ? std::to_string(o.load.max_concurrency) : "unlimited"));
  row("duration", fmt::format("{:.2f} s", r.duration_s));
  row("input / output tokens", fmt::format("{} / {}", r.input_tokens, r.output_tokens));
  row("request throughput", fmt::format("{:.2f} req/s", r.request_throughput));
  row("output throughput", fmt::format("{:.1f} tok/s", r.output_tokens_per_s));
  row("total throughput", fmt::format("{:.1f} tok/s", r.total_tokens_per_s));
  if (r.inprocess) {
    const ServeBenchReport& in = *r.inprocess;
    row("in-process output throughput (same load)",
        fmt::format("{:.1f} tok/s", in.output_tokens_per_s));
    if (in.output_tokens_per_s > 0) {
      row("HTTP / in-process output throughput",
          fmt::format("{:.3f}", r.output_tokens_per_s / in.output_tokens_per_s));
    }
  }
  t += kLatencyTableHeader;
  auto lat = [&t](std::string_view name, const LatencySummary& s) { t += latency_row(name, s); };
  lat("TTFT", r.ttft_ms);
  lat("TPOT", r.tpot_ms);
  lat("ITL", r.itl_ms);
  lat("E2E", r.e2e_ms);
  if (r.inprocess) {
    lat("in-process TTFT", r.inprocess->ttft_ms);
    lat("in-process TPOT", r.inprocess->tpot_ms);
    lat("in-process ITL", r.inprocess->itl_ms);
  }
  return t;
}

nlohmann::json http_report_json(const HttpBenchOptions& o, const HttpBenchReport& r,
                                const std::string& commit) {
  const ServeBenchOptions& l = o.load;
  nlohmann::json j{{"bench", "serve_http"},
                   {"gpu", r.device},
                   {"commit", commit},
                   // The --model of an in-process server (a path or shape name);
                   // against --url, what the endpoint serves.
                   {"model", r.target == "in-process" ? l.model : r.model},
                   {"served_model", r.model},
                   {"backend", r.backend},
                   {"target", r.target},
                   {"prompt_format", !o.dataset.empty()                       ? "dataset"
                                     : o.prompt_format == PromptFormat::kText ? "text"
                                                                              : "ids"},
                   {"ignore_eos", o.ignore_eos},
                   {"requests", l.requests},
                   {"request_rate", rate_text(l.request_rate)},
                   {"max_concurrency", l.max_concurrency},
                   {"warmup", l.warmup_requests},
                   {"temperature", l.temperature},
                   {"seed", l.seed},
                   {"completed", r.completed},
                   {"failed", r.failed},
                   {"length_mismatches", r.length_mismatches},
                   {"usage_missing", r.usage_missing},
                   {"duration_s", r.duration_s},
                   {"input_tokens", r.input_tokens},
                   {"output_tokens", r.output_tokens},
                   {"request_throughput", r.request_throughput},
                   {"output_tokens_per_s", r.output_tokens_per_s},
                   {"total_tokens_per_s", r.total_tokens_per_s}};
  if (o.dataset.empty()) {
    j["input_len"] = l.input_len;
    j["output_len"] = l.output_len;
    j["range_ratio"] = l.range_ratio;
    j["prefix_len"] = l.prefix_len;
  } else {
    // The lengths are the file's: its prompts, and outputs that end at EOS
    // or at each line's max_tokens.
    j["dataset"] = o.dataset_path;
    j["dataset_requests"] = o.dataset.size();
  }
  // What the in-process server was started with; a --url server's own
  // settings are unknown here (its counters below still say whether it
  // speculated).
  if (r.target == "in-process") {
    j["kv_dtype"] = dtype_name(l.kv_dtype);
    j["quantize"] = model::quantize_name(l.quantize);
    j["keep_quantized"] = l.keep_quantized || l.quantize == model::Quantize::kFp8;
    j["speculate"] = o.speculate;
    j["speculate_tokens"] =
        o.speculate == "off" ? nlohmann::json(nullptr) : nlohmann::json(o.speculate_tokens);
    j["draft_model"] =
        o.draft_model.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.draft_model);
  }
  if (r.speculation) {
    j["spec_proposed_tokens"] = r.speculation->proposed;
    j["spec_accepted_tokens"] = r.speculation->accepted;
    j["spec_acceptance_rate"] = r.speculation->proposed > 0
                                    ? nlohmann::json(r.speculation->acceptance())
                                    : nlohmann::json(nullptr);
  }
  // Whether the load was constrained, so that two lines compare at a glance.
  j["response_format"] = o.json_schema.empty() ? "text" : "json_schema";
  if (!o.json_schema.empty()) j["json_schema_file"] = o.json_schema_file;
  if (r.target == "in-process") {
    j["prefill_chunk"] = effective_prefill_chunk(l);
    j["max_batch_tokens"] = l.max_batch_tokens;
    j["prefix_cache_entries"] = o.prefix_cache_entries;
  }
  if (!r.first_error.empty()) j["first_error"] = r.first_error;
  auto put = [&j](const std::string& name, const LatencySummary& s, const std::vector<double>& q) {
    if (s.count == 0) return;  // absent, never a made-up zero
    j[name + "_mean"] = s.mean;
    j[name + "_p50"] = s.p50;
    j[name + "_p90"] = s.p90;
    j[name + "_p99"] = s.p99;
    nlohmann::json qs = nlohmann::json::array();
    for (double v : q) qs.push_back(round_to(v, 1e-3));
    j[name + "_quantiles"] = std::move(qs);
  };
  put("ttft_ms", r.ttft_ms, r.ttft_q);
  put("tpot_ms", r.tpot_ms, r.tpot_q);
  put("itl_ms", r.itl_ms, r.itl_q);
  put("e2e_ms", r.e2e_ms, r.e2e_q);
  if (!r.output_tps_timeline.empty()) {
    j["timeline_bin_s"] = r.timeline_bin_s;
    nlohmann::json tl = nlohmann::json::array();
    for (double v : r.output_tps_timeline) tl.push_back(round_to(v, 0.1));
    j["output_tps_timeline"] = std::move(tl);
  }
  if (r.inprocess) {
    j["inprocess"] = report_json(l, *r.inprocess, commit);
    if (r.inprocess->output_tokens_per_s > 0) {
      j["http_over_inprocess"] = r.output_tokens_per_s / r.inprocess->output_tokens_per_s;
    }
  }
  return j;
}

}  // namespace cellm::bench
