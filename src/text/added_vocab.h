// Added tokens (special or not) of a tokenizer and the matcher that finds them
// in input text before the model sees it: leftmost-longest, honouring each
// token's lstrip / rstrip / single_word flags as HF AddedVocabulary does.
//
// Thread-safety: immutable after construction; split() is const.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cellm::text {

struct AddedToken {
  std::int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;
};

// One piece of a split: either plain text [begin, end) or an added token.
struct Segment {
  std::size_t begin;
  std::size_t end;
  std::int32_t token_id;  // -1 for plain text
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  bool empty() const { return tokens_.empty(); }
  // Cuts `s` into plain-text and added-token segments covering all of it.
  void split(std::string_view s, std::vector<Segment>& out) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, std::int32_t>> children;  // sorted by byte
    std::int32_t token = -1;  // index into tokens_ when a token ends here
  };
  std::int32_t child(std::int32_t node, unsigned char b) const;
  // Index of the longest token that starts at s[i], or -1; its length in *len.
  std::int32_t longest_at(std::string_view s, std::size_t i, std::size_t* len) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;
  std::array<bool, 256> first_byte_{};
};

}  // namespace cellm::text
