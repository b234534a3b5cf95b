// JsonPrefixScanner: checks, byte by byte, that text is a prefix of one JSON
// value (RFC 8259: objects, arrays, strings with their escapes and no raw
// control characters, numbers, true/false/null; \u escapes of UTF-16
// surrogates must pair, as nlohmann's parser requires) and says where the values
// and object keys in it begin and end. The tool-call streamer uses it to
// release a call's arguments while they are still being generated: every
// piece it releases keeps the arguments a valid JSON prefix, and it knows the
// exact byte where the arguments object closes.
//
// Numbers are the one thing whose end is not reported: a number ends at the
// byte after it, which the scanner reports as what it is (a ',', a closing
// bracket, ...). Strings must be valid UTF-8 (RFC 3629), as JSON parsers
// such as nlohmann's require.
//
// Thread-safety: a scanner is a plain value, used by one thread.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace cellm::server {

class JsonPrefixScanner {
 public:
  // What one byte did.
  struct Step {
    bool ok = true;       // false: the byte cannot continue a JSON value
    bool begins = false;  // it begins a value or an object key
    bool ends = false;    // it ends one (a closing quote or bracket, a literal's last letter)
    bool key = false;     // the value begun or ended is an object key
    // Containers around the value begun or ended: 0 for the top-level value,
    // 1 for a member of the top-level object or array, ...
    int level = 0;
  };

  // Feeds the next byte. After a byte that is not ok, or once the top-level
  // value is complete (done()), every further byte is refused.
  Step push(char c);

  bool done() const { return mode_ == Mode::kDone; }
  bool failed() const { return mode_ == Mode::kFailed; }
  // Open objects and arrays.
  int depth() const { return static_cast<int>(stack_.size()); }

 private:
  enum class Mode : std::uint8_t {
    kValue,         // a value must follow (start, after ':' or an array's ',')
    kValueOrClose,  // after '[': a value or ']'
    kKeyOrClose,    // after '{': a key or '}'
    kKey,           // after an object's ',': a key
    kColon,         // after a key
    kAfterValue,    // ',' or the container's closing bracket
    kString,
    kEscape,   // after a backslash
    kHex,      // in the 4 digits of \uXXXX
    kLiteral,  // in true/false/null
    kNumber,
    kDone,
    kFailed,
  };
  enum class Num : std::uint8_t { kMinus, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits };

  Step structural(char c);
  Step begin_value(char c);
  Step close_container();
  // Whether `c` continues the number; false leaves it to end there (or fail).
  bool number_continues(char c);
  bool number_can_end() const;
  // A UTF-8 lead byte in a string: sets up its continuation bytes.
  bool utf8_lead(unsigned char b);
  Mode after_value() const { return stack_.empty() ? Mode::kDone : Mode::kAfterValue; }
  Step fail();

  std::vector<char> stack_;  // '{' or '[' per open container
  Mode mode_ = Mode::kValue;
  Num num_ = Num::kInt;
  bool string_is_key_ = false;
  int hex_left_ = 0;
  int code_ = 0;                  // the \u escape's value so far
  bool need_low_ = false;         // after a high surrogate's escape: its low half must follow
  int utf8_left_ = 0;             // continuation bytes the current character still needs
  unsigned char utf8_lo_ = 0x80;  // the range of the next continuation byte
  unsigned char utf8_hi_ = 0xBF;
  std::string_view literal_rest_;  // the letters a literal still needs
};

}  // namespace cellm::server
