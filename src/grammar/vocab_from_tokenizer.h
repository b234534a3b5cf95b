// The bytes each token id adds to generated text, from a Tokenizer: what a
// TokenVocabulary (token_vocab.h) needs to mask tokens by grammar. Special
// tokens and ids without text get no bytes (a grammar never allows them).
// A byte-fallback token (<0xAB>) stands for its one raw byte; any other
// token is its decoded text in the middle of a stream (so SentencePiece's
// leading "▁" is a space).
//
// Thread-safety: pure function over an immutable tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grammar/token_vocab.h"
#include "text/tokenizer.h"

namespace cellm::grammar {

// The bytes of every id, as above: token_bytes[id] (the table the engine
// matches stop strings on, RunnerOptions::token_bytes). Its size is the
// larger of `vocab_size` and tokenizer.vocab_size() (the model's logits may
// be wider; the extra ids get no bytes).
std::vector<std::string> token_bytes_from_tokenizer(const text::Tokenizer& tokenizer,
                                                    std::int64_t vocab_size);

// The same bytes arranged for masking.
std::shared_ptr<const TokenVocabulary> vocabulary_from_tokenizer(const text::Tokenizer& tokenizer,
                                                                 std::int64_t vocab_size);

}  // namespace cellm::grammar
