#include "cli/line_reader.h"

#include <clocale>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <histedit.h>
#include <iostream>
#include <string_view>
#include <system_error>
#include <termios.h>
#include <unistd.h>

#include "core/env.h"

namespace cellm::cli {
namespace {

// Lines kept in the history file; older ones fall off.
constexpr int kHistoryLines = 1000;

class PlainLineReader final : public LineReader {
 public:
  bool interactive() const override { return false; }
  ReadResult read(const std::string& /*prompt*/) override {
    ReadResult r;
    if (!std::getline(std::cin, r.line)) return r;
    if (!r.line.empty() && r.line.back() == '\r') r.line.pop_back();
    r.kind = ReadResult::Kind::kLine;
    return r;
  }
  void remember(const std::string& /*line*/) override {}
};

class EditLineReader final : public LineReader {
 public:
  EditLineReader(std::filesystem::path history_file, void (*warn)(const std::string&))
      : history_file_(std::move(history_file)), warn_(warn) {
    // libedit decodes keystrokes with the C library's multibyte functions:
    // without a UTF-8 character type, anything past ASCII is mangled.
    const char* ctype = std::setlocale(LC_CTYPE, "");
    if (ctype == nullptr || std::strcmp(ctype, "C") == 0 || std::strcmp(ctype, "POSIX") == 0) {
      std::setlocale(LC_CTYPE, "C.UTF-8");
    }
    history_ = history_init();
    history(history_, &event_, H_SETSIZE, kHistoryLines);
    history(history_, &event_, H_SETUNIQUE, 1);
    load_history();

    // Editing output goes to stderr, keeping stdout for the answers.
    el_ = el_init("cellm", stdin, stderr, stderr);
    el_set(el_, EL_CLIENTDATA, this);
    el_set(el_, EL_EDITOR, "emacs");
    el_set(el_, EL_PROMPT, &EditLineReader::prompt_of);
    el_set(el_, EL_HIST, history, history_);
    // libedit restores the terminal on fatal signals and follows resizes.
    el_set(el_, EL_SIGNAL, 1);
    // While editing, Ctrl-C is a key (it abandons the line) rather than a
    // signal, so it never interrupts libedit halfway through a redraw.
    el_set(el_, EL_SETTY, "-d", "-isig", nullptr);
    el_set(el_, EL_ADDFN, "cellm-interrupt", "abandon the line", &EditLineReader::on_interrupt);
    el_set(el_, EL_BIND, "^C", "cellm-interrupt", nullptr);
    el_source(el_, nullptr);  // the user's ~/.editrc, if any
  }

  ~EditLineReader() override {
    el_end(el_);
    history_end(history_);
  }

  EditLineReader(const EditLineReader&) = delete;
  EditLineReader& operator=(const EditLineReader&) = delete;

  bool interactive() const override { return true; }

  ReadResult read(const std::string& prompt) override {
    prompt_ = prompt;
    interrupted_ = false;
    int count = 0;
    const char* line = el_gets(el_, &count);
    ReadResult r;
    if (interrupted_) {
      std::fputs("^C\n", stderr);
      r.kind = ReadResult::Kind::kInterrupted;
      r.line = abandoned_;
      return r;
    }
    if (line == nullptr || count <= 0) {
      std::fputc('\n', stderr);  // Ctrl-D leaves the cursor after the prompt
      return r;
    }
    r.kind = ReadResult::Kind::kLine;
    r.line.assign(line, static_cast<std::size_t>(count));
    while (!r.line.empty() && (r.line.back() == '\n' || r.line.back() == '\r')) r.line.pop_back();
    return r;
  }

  void remember(const std::string& line) override {
    history(history_, &event_, H_ENTER, line.c_str());
    save_history();
  }

 private:
  static EditLineReader* self(EditLine* el) {
    void* data = nullptr;
    el_get(el, EL_CLIENTDATA, &data);
    return static_cast<EditLineReader*>(data);
  }
  static char* prompt_of(EditLine* el) { return self(el)->prompt_.data(); }
  static unsigned char on_interrupt(EditLine* el, int /*ch*/) {
    EditLineReader* reader = self(el);
    reader->interrupted_ = true;
    const LineInfo* info = el_line(el);
    reader->abandoned_.assign(info->buffer,
                              static_cast<std::size_t>(info->lastchar - info->buffer));
    return CC_NEWLINE;  // ends el_gets; read() discards the line
  }

  void load_history() {
    if (history_file_.empty()) return;
    std::error_code ec;
    if (!std::filesystem::exists(history_file_, ec)) return;
    if (history(history_, &event_, H_LOAD, history_file_.c_str()) < 0) {
      // Never overwrite a file we could not read: it may be someone else's.
      warn_("cannot read the chat history " + history_file_.string() +
            "; history will not be saved this time (move the file away to start a new one)");
      history_file_.clear();
    }
  }

  void save_history() {
    if (history_file_.empty()) return;
    std::error_code ec;
    const auto dir = history_file_.parent_path();
    if (!dir.empty() && !std::filesystem::exists(dir, ec)) {
      std::filesystem::create_directories(dir, ec);
      // Typed lines can be private: the folder and file are the user's only.
      std::filesystem::permissions(dir, std::filesystem::perms::owner_all,
                                   std::filesystem::perm_options::replace, ec);
    }
    if (history(history_, &event_, H_SAVE, history_file_.c_str()) < 0) {
      warn_("cannot write the chat history " + history_file_.string() +
            "; history will not be saved this time");
      history_file_.clear();
      return;
    }
    std::filesystem::permissions(
        history_file_, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write,
        std::filesystem::perm_options::replace, ec);
  }

  std::filesystem::path history_file_;
  void (*warn_)(const std::string&);
  EditLine* el_ = nullptr;
  History* history_ = nullptr;
  HistEvent event_{};
  std::string prompt_;
  bool interrupted_ = false;
  std::string abandoned_;  // the line Ctrl-C abandoned
};

std::atomic<bool> g_interrupted{false};
struct sigaction g_previous_int {};

void on_sigint(int /*sig*/) {
  g_interrupted.store(true);
}

// The terminal settings an AnswerInputGuard restores, readable from a
// signal handler.
struct termios g_saved_termios {};
volatile std::sig_atomic_t g_termios_saved = 0;
struct sigaction g_previous_term {};
struct sigaction g_previous_hup {};

void restore_terminal_and_die(int sig) {
  if (g_termios_saved != 0) tcsetattr(STDIN_FILENO, TCSANOW, &g_saved_termios);
  std::signal(sig, SIG_DFL);
  std::raise(sig);  // delivered, with the default action, once this returns
}

}  // namespace

std::unique_ptr<LineReader> make_line_reader(const std::filesystem::path& history_file,
                                             void (*warn)(const std::string&)) {
  if (isatty(STDIN_FILENO) == 1 && isatty(STDERR_FILENO) == 1) {
    return std::make_unique<EditLineReader>(history_file, warn);
  }
  return std::make_unique<PlainLineReader>();
}

std::filesystem::path default_history_file() {
  const std::optional<std::string> state = env_string("XDG_STATE_HOME");
  if (state && state->front() == '/')
    return std::filesystem::path(*state) / "cellm" / "chat_history";
  if (const std::optional<std::string> home = env_string("HOME")) {
    return std::filesystem::path(*home) / ".local" / "state" / "cellm" / "chat_history";
  }
  return {};
}

InterruptCatcher::InterruptCatcher() {
  g_interrupted.store(false);
  struct sigaction action {};
  action.sa_handler = on_sigint;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, &g_previous_int);
}

InterruptCatcher::~InterruptCatcher() {
  sigaction(SIGINT, &g_previous_int, nullptr);
}

std::atomic<bool>& interrupt_flag() {
  return g_interrupted;
}

AnswerInputGuard::AnswerInputGuard(bool terminal) {
  if (!terminal || tcgetattr(STDIN_FILENO, &g_saved_termios) != 0) return;
  g_termios_saved = 1;
  struct sigaction action {};
  action.sa_handler = restore_terminal_and_die;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, &g_previous_term);
  sigaction(SIGHUP, &action, &g_previous_hup);
  struct termios quiet = g_saved_termios;
  quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO | ECHONL);
  tcsetattr(STDIN_FILENO, TCSANOW, &quiet);
  active_ = true;
}

AnswerInputGuard::~AnswerInputGuard() {
  if (!active_) return;
  tcflush(STDIN_FILENO, TCIFLUSH);  // what was typed during the answer
  tcsetattr(STDIN_FILENO, TCSANOW, &g_saved_termios);
  g_termios_saved = 0;
  sigaction(SIGTERM, &g_previous_term, nullptr);
  sigaction(SIGHUP, &g_previous_hup, nullptr);
}

}  // namespace cellm::cli
