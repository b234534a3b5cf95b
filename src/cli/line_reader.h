// Where `cellm chat` reads its lines, and how it keeps the terminal sane while
// an answer streams.
//
// On a terminal (stdin and stderr both ttys) lines come from libedit: line
// editing, a history persisted in a file and recalled with Up, and Ctrl-C at
// the prompt reported as an interruption rather than a signal. Anywhere else
// (a pipe, a file) lines are read plainly with no prompt, so scripts see only
// the answers on stdout.
//
// Thread-safety: everything here belongs to the thread that runs the chat.
// The interrupt flag is the exception: the SIGINT handler sets it and any
// thread may read it.
#pragma once

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>

namespace cellm::cli {

struct ReadResult {
  enum class Kind { kLine, kInterrupted, kEnd };
  Kind kind = Kind::kEnd;
  std::string line;  // kLine: without its newline
};

class LineReader {
 public:
  virtual ~LineReader() = default;
  virtual bool interactive() const = 0;
  // The next line; kInterrupted when Ctrl-C abandoned it (terminal only;
  // `line` then holds what had been typed);
  // kEnd at end of input (Ctrl-D on an empty line).
  virtual ReadResult read(const std::string& prompt) = 0;
  // Adds a line to the history and saves the history file (terminal only).
  virtual void remember(const std::string& line) = 0;
};

// A libedit reader when stdin and stderr are terminals, else a plain one.
// `history_file` may be empty (no history kept on disk); a history file that
// cannot be read or written costs only a warning, through `warn`.
std::unique_ptr<LineReader> make_line_reader(const std::filesystem::path& history_file,
                                             void (*warn)(const std::string&));

// $XDG_STATE_HOME/cellm/chat_history, else ~/.local/state/cellm/chat_history;
// empty when neither variable is set.
std::filesystem::path default_history_file();

// While alive, SIGINT (Ctrl-C outside the prompt) sets interrupt_flag()
// instead of ending the process. Not nestable.
class InterruptCatcher {
 public:
  InterruptCatcher();
  ~InterruptCatcher();
  InterruptCatcher(const InterruptCatcher&) = delete;
  InterruptCatcher& operator=(const InterruptCatcher&) = delete;
};
std::atomic<bool>& interrupt_flag();

// Spans one streamed answer on a terminal: keystrokes are not echoed over
// the answer, and whatever was typed meanwhile is discarded (tcflush) when
// the answer ends, so it never turns up at the next prompt. The terminal's
// settings are restored at the end, and on SIGTERM/SIGHUP meanwhile. Does
// nothing when `terminal` is false.
class AnswerInputGuard {
 public:
  explicit AnswerInputGuard(bool terminal);
  ~AnswerInputGuard();
  AnswerInputGuard(const AnswerInputGuard&) = delete;
  AnswerInputGuard& operator=(const AnswerInputGuard&) = delete;

 private:
  bool active_ = false;
};

}  // namespace cellm::cli
