#include "backend/cuda/device_quant.h"

#include <map>
#include <span>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/cuda/arena.h"
#include "backend/cuda/cuda_check.h"
#include "format/ggml_types.h"
#include "model/gguf_model.h"

namespace cellm::cuda {
namespace {

// One GGUF tensor of a projection: `rows` output rows of `cols` inputs.
struct Piece {
  const format::GgufTensorInfo* info = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int32_t rotary_heads = 0;  // > 0: Q/K rows to reorder
  std::int64_t row_bytes = 0;
};

struct Projection {
  DeviceQuant* target = nullptr;
  std::vector<Piece> pieces;
  std::size_t offset = 0;  // into the storage
};

using ByName = std::map<std::string, const format::GgufTensorInfo*, std::less<>>;

// The pieces of a projection if every one is in a block type the kernels
// decode; nullopt when one is missing or of another type (the projection
// then stays bf16); an error when one has the type but not the shape.
Result<std::optional<std::vector<Piece>>> find_pieces(const ByName& by_name,
                                                      std::vector<Piece> wanted,
                                                      const std::vector<std::string>& names) {
  for (std::size_t i = 0; i < wanted.size(); ++i) {
    const auto it = by_name.find(names[i]);
    if (it == by_name.end()) return std::optional<std::vector<Piece>>();
    const format::GgufTensorInfo& info = *it->second;
    if (!quant_type_supported(static_cast<std::uint32_t>(info.type))) {
      return std::optional<std::vector<Piece>>();
    }
    Piece& p = wanted[i];
    if (info.ne.size() != 2 || static_cast<std::int64_t>(info.ne[0]) != p.cols ||
        static_cast<std::int64_t>(info.ne[1]) != p.rows) {
      return invalid_argument(
          "GGUF tensor '{}' ({}) has {} dimensions [{}]; '{}' should be [{}, {}]", info.name,
          format::ggml_type_name(info.type), info.ne.size(), fmt::join(info.ne, ", "), names[i],
          p.rows, p.cols);
    }
    const auto type = static_cast<QuantType>(info.type);
    p.info = &info;
    p.row_bytes = p.cols / quant_block_elems(type) * quant_block_bytes(type);
  }
  return std::optional<std::vector<Piece>>(std::move(wanted));
}

// Adds `piece` as a part at `row0`, merged into the previous part when it is
// of the same type and row size (its rows then follow in memory).
void add_part(DeviceQuant& q, const Piece& piece, const std::uint8_t* blocks, std::int64_t row0) {
  const auto type = static_cast<QuantType>(piece.info->type);
  if (!q.parts.empty()) {
    DeviceQuantPart& last = q.parts.back();
    if (last.type == type && last.row_bytes == piece.row_bytes && last.row0 + last.rows == row0) {
      last.rows += piece.rows;
      return;
    }
  }
  q.parts.push_back({blocks, type, row0, piece.rows, piece.row_bytes});
}

}  // namespace

Result<QuantWeights> upload_quant_weights(const model::ModelSpec& spec,
                                          const format::GgufFile& file) {
  ByName by_name;
  for (const auto& t : file.tensors()) {
    by_name.emplace(model::canonical_tensor_name(spec.arch, t.name), &t);
  }
  const bool permuted = model::gguf_rotary_rows_permuted(spec.arch);
  const std::int64_t hidden = spec.hidden_size;
  const std::int64_t q_dim = static_cast<std::int64_t>(spec.num_heads) * spec.head_dim;
  const std::int64_t kv_dim = static_cast<std::int64_t>(spec.num_kv_heads) * spec.head_dim;
  const std::int64_t inter = spec.intermediate_size;

  QuantWeights out;
  out.layers.resize(static_cast<std::size_t>(spec.num_layers));
  std::vector<Projection> projections;
  auto consider = [&](DeviceQuant* target, std::vector<Piece> wanted,
                      const std::vector<std::string>& names) -> Status {
    CELLM_ASSIGN_OR_RETURN(auto pieces, find_pieces(by_name, std::move(wanted), names));
    if (pieces) projections.push_back({target, std::move(*pieces), 0});
    return Status::ok();
  };
  for (int i = 0; i < spec.num_layers; ++i) {
    QuantWeights::Layer& l = out.layers[static_cast<std::size_t>(i)];
    const std::string p = fmt::format("model.layers.{}.", i);
    CELLM_RETURN_IF_ERROR(consider(&l.qkv,
                                   {{nullptr, q_dim, hidden, permuted ? spec.num_heads : 0, 0},
                                    {nullptr, kv_dim, hidden, permuted ? spec.num_kv_heads : 0, 0},
                                    {nullptr, kv_dim, hidden, 0, 0}},
                                   {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
                                    p + "self_attn.v_proj.weight"}));
    CELLM_RETURN_IF_ERROR(
        consider(&l.o, {{nullptr, hidden, q_dim, 0, 0}}, {p + "self_attn.o_proj.weight"}));
    CELLM_RETURN_IF_ERROR(consider(&l.gate_up,
                                   {{nullptr, inter, hidden, 0, 0}, {nullptr, inter, hidden, 0, 0}},
                                   {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}));
    CELLM_RETURN_IF_ERROR(
        consider(&l.down, {{nullptr, hidden, inter, 0, 0}}, {p + "mlp.down_proj.weight"}));
  }
  // A tied head multiplies with the embedding's blocks (the lookup itself
  // reads the bf16 copy).
  const bool own_head = by_name.count("lm_head.weight") != 0;
  if (own_head || spec.tie_word_embeddings) {
    CELLM_RETURN_IF_ERROR(consider(&out.lm_head, {{nullptr, spec.vocab_size, hidden, 0, 0}},
                                   {own_head ? "lm_head.weight" : "model.embed_tokens.weight"}));
  }
  if (projections.empty()) return out;

  std::size_t total = 0;
  std::map<std::string, int> counts;
  for (Projection& proj : projections) {
    proj.offset = total;
    std::size_t bytes = 0;
    for (const Piece& piece : proj.pieces) {
      bytes += static_cast<std::size_t>(piece.rows * piece.row_bytes);
      ++counts[std::string(format::ggml_type_name(piece.info->type))];
    }
    total += align_up(bytes);
  }
  CELLM_ASSIGN_OR_RETURN(out.storage, DeviceBuffer<std::uint8_t>::allocate(total));
  std::vector<std::uint8_t> reordered;
  for (const Projection& proj : projections) {
    std::size_t at = proj.offset;
    std::int64_t row0 = 0;
    for (const Piece& piece : proj.pieces) {
      std::span<const std::uint8_t> bytes = file.tensor_bytes(*piece.info);
      const auto size = static_cast<std::size_t>(piece.rows * piece.row_bytes);
      if (bytes.size() != size) {
        return invalid_argument("GGUF tensor '{}' holds {} bytes; {} rows of {} bytes expected",
                                piece.info->name, bytes.size(), piece.rows, piece.row_bytes);
      }
      if (piece.rotary_heads > 0) {
        if (piece.rows % (2 * piece.rotary_heads) != 0) {
          return invalid_argument("GGUF tensor '{}': {} rows do not split into {} rotary heads",
                                  piece.info->name, piece.rows, piece.rotary_heads);
        }
        reordered.resize(size);
        model::unpermute_rotary_row_bytes(bytes, reordered, piece.rows,
                                          static_cast<std::size_t>(piece.row_bytes),
                                          piece.rotary_heads);
        bytes = reordered;
      }
      std::uint8_t* dst = out.storage.data() + at;
      CELLM_CUDA_CHECK(cudaMemcpy(dst, bytes.data(), size, cudaMemcpyHostToDevice));
      add_part(*proj.target, piece, dst, row0);
      at += size;
      row0 += piece.rows;
    }
  }
  for (const auto& [name, count] : counts) {
    out.summary += fmt::format("{}{} x{}", out.summary.empty() ? "" : ", ", name, count);
  }
  return out;
}

}  // namespace cellm::cuda
