#include "cellm/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/clock.h"

namespace cellm {
namespace {

std::int64_t span(MetricsClock::time_point from, MetricsClock::time_point to) {
  return stamped(from) && stamped(to) ? us_between(from, to) : 0;
}

double ratio(double num, double den) {
  return den > 0 ? num / den : 0.0;
}

double per_sec(double count, std::int64_t us) {
  return us > 0 ? count * 1e6 / us : 0.0;
}

// "--" for an empty quantity so a report never shows a made-up zero.
std::string show(bool present, double value, const char* unit = "") {
  if (!present) return "--";
  return fmt::format("{:.1f}{}", value, unit);
}

std::string show_ms(bool present, double us) {
  return show(present, us / 1000.0, " ms");
}

}  // namespace

std::int64_t GenerationMetrics::ttft_us() const {
  return span(t_submit, t_first_token);
}
std::int64_t GenerationMetrics::queue_wait_us() const {
  return span(t_submit, t_first_step);
}
std::int64_t GenerationMetrics::prefill_span_us() const {
  return span(t_first_step, t_first_token);
}
std::int64_t GenerationMetrics::decode_span_us() const {
  return span(t_first_token, t_end);
}
std::int64_t GenerationMetrics::e2e_us() const {
  return span(t_submit, t_end);
}

double GenerationMetrics::itl_mean_us() const {
  return ratio(static_cast<double>(itl_sum_us), static_cast<double>(itl_count));
}

std::int64_t GenerationMetrics::min_itl_us() const {
  return itl_count > 0 ? itl_min_us : 0;
}

double GenerationMetrics::decode_tokens_per_sec() const {
  if (itl_count == 0) return 0.0;
  if (itl_sum_us == 0) return std::numeric_limits<double>::infinity();
  return per_sec(static_cast<double>(itl_count), itl_sum_us);
}

double GenerationMetrics::prefill_tokens_per_sec() const {
  return per_sec(static_cast<double>(n_prompt_tokens), prefill_span_us());
}

std::int64_t EngineMetrics::wall_us() const {
  return span(t_first_step, t_last_step);
}

double EngineMetrics::mean_admitted_decode_sessions() const {
  return ratio(static_cast<double>(decode_sessions_total), static_cast<double>(steps));
}
double EngineMetrics::mean_ready_decode_sessions() const {
  return ratio(static_cast<double>(ready_total), static_cast<double>(steps));
}
double EngineMetrics::mean_decode_step_sessions() const {
  return ratio(static_cast<double>(decode_sessions_total), static_cast<double>(steps_with_decode));
}
double EngineMetrics::mean_step_sessions() const {
  return ratio(static_cast<double>(decode_sessions_total + prefill_sessions_total),
               static_cast<double>(steps));
}
double EngineMetrics::admitted_ratio() const {
  return ratio(static_cast<double>(decode_sessions_total), static_cast<double>(ready_total));
}
std::int64_t EngineMetrics::model_input_tokens() const {
  return decode_tokens_total + prefill_tokens_total;
}
std::int64_t EngineMetrics::total_tokens() const {
  return total_prompt_tokens + total_generated_tokens;
}
double EngineMetrics::mean_step_tokens() const {
  return ratio(static_cast<double>(model_input_tokens()), static_cast<double>(steps));
}
double EngineMetrics::idle_fraction() const {
  const std::int64_t wall = wall_us();
  if (wall <= 0) return 0.0;
  return std::clamp(1.0 - static_cast<double>(step_latency_sum_us) / wall, 0.0, 1.0);
}
double EngineMetrics::generated_tokens_per_sec() const {
  return per_sec(static_cast<double>(total_generated_tokens), wall_us());
}
double EngineMetrics::model_input_tokens_per_sec() const {
  return per_sec(static_cast<double>(model_input_tokens()), wall_us());
}
std::int64_t EngineMetrics::mixed_steps() const {
  return std::max<std::int64_t>(0, steps_with_decode + steps_with_prefill - steps);
}
std::int64_t EngineMetrics::decode_only_steps() const {
  return steps - steps_with_prefill;
}
std::int64_t EngineMetrics::prefill_only_steps() const {
  return steps - steps_with_decode;
}
double EngineMetrics::mean_ttft_us() const {
  return ratio(static_cast<double>(ttft_sum_us), static_cast<double>(ttft_count));
}
std::int64_t EngineMetrics::min_ttft_us() const {
  return ttft_count > 0 ? ttft_min_us : 0;
}
double EngineMetrics::mean_decode_us_per_token() const {
  return ratio(static_cast<double>(decode_session_time_sum_us),
               static_cast<double>(decode_sessions_total));
}
double EngineMetrics::mean_decode_only_step_us() const {
  return ratio(static_cast<double>(decode_only_latency_sum_us),
               static_cast<double>(decode_only_steps()));
}
double EngineMetrics::mean_mixed_step_us() const {
  return ratio(static_cast<double>(mixed_latency_sum_us), static_cast<double>(mixed_steps()));
}
double EngineMetrics::mean_prefill_only_step_us() const {
  return ratio(static_cast<double>(prefill_only_latency_sum_us),
               static_cast<double>(prefill_only_steps()));
}
double EngineMetrics::decode_only_tokens_per_sec() const {
  return per_sec(static_cast<double>(decode_only_tokens), decode_only_latency_sum_us);
}
double EngineMetrics::mean_context_per_step() const {
  return ratio(static_cast<double>(context_sum), static_cast<double>(steps));
}

std::string format_report(const GenerationMetrics& m) {
  const bool first_token = stamped(m.t_first_token);
  const bool first_step = stamped(m.t_first_step);
  const bool ended = stamped(m.t_end);
  std::string out;
  out += fmt::format("session {}\n", m.sid);
  out += fmt::format("  tokens: prompt {}, prefilled {}, generated {}\n", m.n_prompt_tokens,
                     m.n_prefilled_tokens, m.n_generated_tokens);
  out += fmt::format("  steps: prefill {}, decode {}\n", m.n_prefill_steps, m.n_decode_steps);
  if (m.n_draft_tokens > 0) {
    out += fmt::format("  speculation: {} of {} drafts accepted ({:.0f}%)\n",
                       m.n_accepted_draft_tokens, m.n_draft_tokens,
                       100.0 * static_cast<double>(m.n_accepted_draft_tokens) /
                           static_cast<double>(m.n_draft_tokens));
  }
  out += fmt::format("  ttft: {}  queue wait: {}  prefill span: {}\n",
                     show_ms(first_token, static_cast<double>(m.ttft_us())),
                     show_ms(first_step, static_cast<double>(m.queue_wait_us())),
                     show_ms(first_token && first_step, static_cast<double>(m.prefill_span_us())));
  out += fmt::format("  decode span: {}  end to end: {}\n",
                     show_ms(first_token && ended, static_cast<double>(m.decode_span_us())),
                     show_ms(ended, static_cast<double>(m.e2e_us())));
  const bool itl = m.itl_count > 0;
  out +=
      fmt::format("  itl: mean {}  min {}  max {}  ({} samples)\n", show_ms(itl, m.itl_mean_us()),
                  show_ms(itl, static_cast<double>(m.min_itl_us())),
                  show_ms(itl, static_cast<double>(m.itl_max_us)), m.itl_count);
  const double decode_rate = m.decode_tokens_per_sec();
  out += fmt::format(
      "  rates: decode {} tok/s, prefill {} tok/s\n",
      itl ? (std::isinf(decode_rate) ? std::string("inf") : fmt::format("{:.1f}", decode_rate))
          : std::string("--"),
      show(first_token && first_step && m.prefill_span_us() > 0, m.prefill_tokens_per_sec()));
  return out;
}

std::string format_report(const EngineMetrics& m) {
  const bool any = m.steps > 0;
  std::string out;
  out += fmt::format("engine: {} steps ({} failed), wall {}, init {}, idle {}\n", m.steps,
                     m.steps_failed, show_ms(any, static_cast<double>(m.wall_us())),
                     show_ms(true, static_cast<double>(m.init_us)),
                     show(any && m.wall_us() > 0, 100.0 * m.idle_fraction(), "%"));
  out += fmt::format(
      "  generations: started {}, completed {} (stop {}, stop string {}, limit {}, "
      "cancelled {}, failed {}), peak concurrent {}, sessions refused {}\n",
      m.generations_started, m.generations_completed, m.finished_stop_token,
      m.finished_stop_string, m.finished_token_limit,
      m.finished_cancelled, m.finished_failed, m.peak_concurrent_generations, m.sessions_refused);
  out += fmt::format("  tokens: prompt {}, generated {}, model input {} (decode {}, prefill {})\n",
                     m.total_prompt_tokens, m.total_generated_tokens, m.model_input_tokens(),
                     m.decode_tokens_total, m.prefill_tokens_total);
  out += fmt::format("  rates: generated {} tok/s, model input {} tok/s, decode-only {} tok/s\n",
                     show(m.wall_us() > 0, m.generated_tokens_per_sec()),
                     show(m.wall_us() > 0, m.model_input_tokens_per_sec()),
                     show(m.decode_only_latency_sum_us > 0, m.decode_only_tokens_per_sec()));
  out += fmt::format(
      "  steps: decode-only {} (mean {}), mixed {} (mean {}), prefill-only {} "
      "(mean {}), max {}\n",
      m.decode_only_steps(), show_ms(m.decode_only_steps() > 0, m.mean_decode_only_step_us()),
      m.mixed_steps(), show_ms(m.mixed_steps() > 0, m.mean_mixed_step_us()), m.prefill_only_steps(),
      show_ms(m.prefill_only_steps() > 0, m.mean_prefill_only_step_us()),
      show_ms(any, static_cast<double>(m.step_latency_max_us)));
  out += fmt::format(
      "  per step: tokens {}, sessions {}, decode sessions {} admitted / {} ready "
      "(ratio {}), context {} (max {})\n",
      show(any, m.mean_step_tokens()), show(any, m.mean_step_sessions()),
      show(any, m.mean_admitted_decode_sessions()), show(any, m.mean_ready_decode_sessions()),
      show(m.ready_total > 0, m.admitted_ratio()), show(any, m.mean_context_per_step()),
      m.context_max);
  out += fmt::format("  decode: {} per token\n",
                     show_ms(m.decode_sessions_total > 0, m.mean_decode_us_per_token()));
  const bool ttft = m.ttft_count > 0;
  out += fmt::format("  ttft: mean {}, min {}, max {} ({} generations)\n",
                     show_ms(ttft, m.mean_ttft_us()),
                     show_ms(ttft, static_cast<double>(m.min_ttft_us())),
                     show_ms(ttft, static_cast<double>(m.ttft_max_us)), m.ttft_count);
  return out;
}

}  // namespace cellm
