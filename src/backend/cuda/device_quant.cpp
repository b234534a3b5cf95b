#include "backend/cuda/device_quant.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <span>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/cuda/arena.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_weights_fill.cuh"
#include "backend/cuda/kernels/quant_blocks_q6r8.h"
#include "core/dtype.h"
#include "format/ggml_types.h"
#include "model/gguf_model.h"

namespace cellm::cuda {
namespace {

// One stored tensor of a projection: `rows` output rows of `cols` inputs.
struct Piece {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int32_t rotary_heads = 0;  // > 0: GGUF Q/K rows to reorder
  // Filled in by a finder:
  std::string name;
  QuantType type = QuantType::kQ8_0;
  std::span<const std::uint8_t> bytes;  // rows * row_bytes
  std::int64_t row_bytes = 0;
  std::vector<float> scales;  // kF8_E4M3: rows * scale_ld
  std::int32_t scale_cols = 0;
  std::int64_t scale_ld = 0;
};

struct Projection {
  DeviceQuant* target = nullptr;
  std::vector<Piece> pieces;
  std::size_t offset = 0;  // into the storage: the pieces' bytes, then their scales
};

// The pieces of a projection in a form the kernels decode, nullopt when one
// is not (the projection then stays bf16), or an error naming a tensor of
// the right name and type but another shape.
using Found = Result<std::optional<std::vector<Piece>>>;

Status check_shape(const Piece& p, std::int64_t rows, std::int64_t cols, std::string_view what) {
  if (rows == p.rows && cols == p.cols) return Status::ok();
  return invalid_argument("{} '{}' is [{}, {}]; it should be [{}, {}]", what, p.name, rows, cols,
                          p.rows, p.cols);
}

using ByName = std::map<std::string, const format::GgufTensorInfo*, std::less<>>;

// `kept`: the names the loader's rule keeps in blocks (and the tied head's
// embedding), so that what the loader left unloaded is what comes from here.
Found find_gguf(const ByName& by_name, const std::set<std::string, std::less<>>& kept,
                const format::GgufFile& file, std::vector<Piece> wanted,
                const std::vector<std::string>& names) {
  for (std::size_t i = 0; i < wanted.size(); ++i) {
    const auto it = by_name.find(names[i]);
    if (it == by_name.end() || kept.count(names[i]) == 0) {
      return std::optional<std::vector<Piece>>();
    }
    const format::GgufTensorInfo& info = *it->second;
    Piece& p = wanted[i];
    p.name = info.name;
    if (info.ne.size() != 2) {
      return invalid_argument("GGUF tensor '{}' ({}) has {} dimensions [{}]; '{}' is a matrix",
                              info.name, format::ggml_type_name(info.type), info.ne.size(),
                              fmt::join(info.ne, ", "), names[i]);
    }
    CELLM_RETURN_IF_ERROR(check_shape(p, static_cast<std::int64_t>(info.ne[1]),
                                      static_cast<std::int64_t>(info.ne[0]), "GGUF tensor"));
    p.type = static_cast<QuantType>(info.type);
    p.row_bytes = p.cols / quant_block_elems(p.type) * quant_block_bytes(p.type);
    p.bytes = file.tensor_bytes(info);
    if (static_cast<std::int64_t>(p.bytes.size()) != p.rows * p.row_bytes) {
      return invalid_argument("GGUF tensor '{}' holds {} bytes; {} rows of {} bytes expected",
                              info.name, p.bytes.size(), p.rows, p.row_bytes);
    }
  }
  return std::optional<std::vector<Piece>>(std::move(wanted));
}

float scale_at(const Tensor& scales, std::int64_t i) {
  switch (scales.dtype()) {
    case DType::kF32: return scales.data_as<float>()[i];
    case DType::kBF16: return bf16_to_f32(scales.data_as<std::uint16_t>()[i]);
    case DType::kF16: return f16_to_f32(scales.data_as<std::uint16_t>()[i]);
    default: return 0.0f;
  }
}

// An FP8 weight as a piece: its codes, and its scale grid expanded to one
// float per row and block of columns; nullopt when the blocks split a lane's
// run of 8 columns (or the codes are not whole 32-weight blocks).
Result<std::optional<Piece>> fp8_piece(Piece p, const model::Fp8Weight& w) {
  CELLM_RETURN_IF_ERROR(check_shape(p, w.codes.dim(0), w.codes.dim(1), "FP8 weight"));
  const std::int64_t block_cols = std::min(w.block_cols, p.cols);
  if (p.cols % quant_block_elems(QuantType::kF8_E4M3) != 0 || block_cols % 8 != 0 ||
      w.block_rows <= 0) {
    return std::optional<Piece>();
  }
  const std::int64_t grid_rows = (p.rows + w.block_rows - 1) / w.block_rows;
  const std::int64_t grid_cols = (p.cols + w.block_cols - 1) / w.block_cols;
  if (w.scales.numel() != grid_rows * grid_cols) {
    return invalid_argument("FP8 weight '{}' has {} scales; its [{}, {}] blocks need {}", p.name,
                            w.scales.numel(), w.block_rows, w.block_cols, grid_rows * grid_cols);
  }
  if (w.scales.dtype() != DType::kF32 && w.scales.dtype() != DType::kBF16 &&
      w.scales.dtype() != DType::kF16) {
    return invalid_argument("FP8 weight '{}' has {} scales; expected f32, bf16 or f16", p.name,
                            dtype_name(w.scales.dtype()));
  }
  p.type = QuantType::kF8_E4M3;
  p.row_bytes = p.cols;
  p.bytes = {w.codes.data_as<std::uint8_t>(), static_cast<std::size_t>(p.rows * p.cols)};
  p.scale_cols = static_cast<std::int32_t>(block_cols);
  p.scale_ld = grid_cols;
  p.scales.resize(static_cast<std::size_t>(p.rows * grid_cols));
  for (std::int64_t r = 0; r < p.rows; ++r) {
    for (std::int64_t c = 0; c < grid_cols; ++c) {
      p.scales[static_cast<std::size_t>(r * grid_cols + c)] =
          scale_at(w.scales, r / w.block_rows * grid_cols + c);
    }
  }
  return std::optional<Piece>(std::move(p));
}

// FP8 pieces by their checkpoint names, or as one fused tensor (phi3's
// qkv_proj / gate_up_proj) when `fused` names one.
Found find_fp8(const model::Weights& weights, std::vector<Piece> wanted,
               const std::vector<std::string>& names, const std::string& fused) {
  if (!fused.empty() && weights.fp8.count(names[0]) == 0) {
    const auto it = weights.fp8.find(fused);
    if (it == weights.fp8.end()) return std::optional<std::vector<Piece>>();
    Piece whole{0, wanted[0].cols, 0};
    for (const Piece& p : wanted) whole.rows += p.rows;
    whole.name = fused;
    CELLM_ASSIGN_OR_RETURN(auto piece, fp8_piece(std::move(whole), it->second));
    if (!piece) return std::optional<std::vector<Piece>>();
    return std::optional<std::vector<Piece>>(std::vector<Piece>{std::move(*piece)});
  }
  for (std::size_t i = 0; i < wanted.size(); ++i) {
    const auto it = weights.fp8.find(names[i]);
    if (it == weights.fp8.end()) return std::optional<std::vector<Piece>>();
    wanted[i].name = names[i];
    CELLM_ASSIGN_OR_RETURN(auto piece, fp8_piece(std::move(wanted[i]), it->second));
    if (!piece) return std::optional<std::vector<Piece>>();
    wanted[i] = std::move(*piece);
  }
  return std::optional<std::vector<Piece>>(std::move(wanted));
}

// A projection's wanted pieces and their names; `fused` for the FP8 finder.
struct Wanted {
  DeviceQuant* target;
  std::vector<Piece> pieces;
  std::vector<std::string> names;
  std::string fused;
};

// Every projection of `spec` the forward multiplies, in layer order, then
// the head (a tied head is the embedding's matrix).
std::vector<Wanted> wanted_projections(const model::ModelSpec& spec, QuantWeights& out,
                                       bool rotary_permuted, bool own_head) {
  const std::int64_t hidden = spec.hidden_size;
  const std::int64_t q_dim = static_cast<std::int64_t>(spec.num_heads) * spec.head_dim;
  const std::int64_t kv_dim = static_cast<std::int64_t>(spec.num_kv_heads) * spec.head_dim;
  const std::int64_t inter = spec.intermediate_size;
  const std::int32_t q_heads = rotary_permuted ? spec.num_heads : 0;
  const std::int32_t kv_heads = rotary_permuted ? spec.num_kv_heads : 0;
  out.layers.resize(static_cast<std::size_t>(spec.num_layers));
  std::vector<Wanted> all;
  for (int i = 0; i < spec.num_layers; ++i) {
    QuantWeights::Layer& l = out.layers[static_cast<std::size_t>(i)];
    const std::string p = fmt::format("model.layers.{}.", i);
    all.push_back({&l.qkv,
                   {{q_dim, hidden, q_heads}, {kv_dim, hidden, kv_heads}, {kv_dim, hidden, 0}},
                   {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
                    p + "self_attn.v_proj.weight"},
                   p + "self_attn.qkv_proj.weight"});
    all.push_back({&l.o, {{hidden, q_dim, 0}}, {p + "self_attn.o_proj.weight"}, ""});
    all.push_back({&l.gate_up,
                   {{inter, hidden, 0}, {inter, hidden, 0}},
                   {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"},
                   p + "mlp.gate_up_proj.weight"});
    all.push_back({&l.down, {{hidden, inter, 0}}, {p + "mlp.down_proj.weight"}, ""});
  }
  if (own_head || spec.tie_word_embeddings) {
    all.push_back({&out.lm_head,
                   {{spec.vocab_size, hidden, 0}},
                   {own_head ? "lm_head.weight" : "model.embed_tokens.weight"},
                   ""});
  }
  return all;
}

// The form a piece takes on the device: Q6_K rows of whole 8-block groups
// are repacked for the wide-load GEMV (kernels/quant_blocks_q6r8.h: the same
// bytes, moved within each row, read right by every kernel that takes the
// part: the GEMV at any width and the bf16 dequantization of wide steps);
// every other piece keeps the file's blocks.
QuantType device_type(const Piece& piece) {
  return piece.type == QuantType::kQ6_K && qblocks::q6r8_repackable(piece.cols)
             ? QuantType::kQ6_K_R8
             : piece.type;
}

// The types whose wide-load kernels need a part to start on a 16-byte
// boundary (their row sizes, multiples of 16, keep every row there).
bool loads_16_bytes(QuantType type) {
  return type == QuantType::kQ4_K || type == QuantType::kQ6_K_R8;
}

// Where each piece of a projection starts (one after the other, those of
// loads_16_bytes types moved up to a 16-byte boundary), where their blocks
// end (the scales follow) and the bytes of the whole.
struct PieceLayout {
  std::vector<std::size_t> at;
  std::size_t code_bytes = 0;
  std::size_t total = 0;
};
PieceLayout layout_of(const Projection& proj) {
  PieceLayout l;
  std::size_t scale_bytes = 0;
  for (const Piece& piece : proj.pieces) {
    if (loads_16_bytes(device_type(piece))) l.code_bytes = align_up(l.code_bytes, 16);
    l.at.push_back(l.code_bytes);
    l.code_bytes += piece.bytes.size();
    scale_bytes += piece.scales.size() * sizeof(float);
  }
  l.total = l.code_bytes + scale_bytes;
  return l;
}

// Adds `piece` (on the device as `type`, at `blocks`) as a part at `row0`,
// merged into the previous part when it is of the same type and row size
// and its rows, and its scales, follow that part's in memory.
void add_part(DeviceQuant& q, const Piece& piece, QuantType type, const std::uint8_t* blocks,
              const float* scales, std::int64_t row0) {
  if (!q.parts.empty()) {
    DeviceQuantPart& last = q.parts.back();
    if (last.type == type && last.row_bytes == piece.row_bytes &&
        last.blocks + last.rows * last.row_bytes == blocks && last.row0 + last.rows == row0 &&
        last.scales.cols == piece.scale_cols && last.scales.ld == piece.scale_ld) {
      last.rows += piece.rows;
      return;
    }
  }
  q.parts.push_back({blocks, type, row0, piece.rows, piece.row_bytes,
                     RowScales{scales, piece.scale_cols, piece.scale_ld}});
}

std::string type_name(QuantType type) {
  switch (type) {
    case QuantType::kF8_E4M3: return "F8_E4M3";
    case QuantType::kQ6_K_R8: return "Q6_K_R8";
    default: return std::string(format::ggml_type_name(static_cast<format::GgmlType>(type)));
  }
}

// One allocation for every projection found: per projection its pieces'
// bytes (GGUF Q/K rows reordered, Q6_K rows repacked: device_type), then
// their scales.
//
// The projections' targets point into `out` (its head and its layers), so it
// is filled in place: a copy or move of it would leave the head's parts in
// the object the pointers name (the layers survive a move, being on the heap;
// the head did not, and was silently bf16 until session 31).
Status upload(QuantWeights& out, std::vector<Projection> projections) {
  if (projections.empty()) return Status::ok();
  std::size_t total = 0;
  std::map<std::string, int> counts;
  for (Projection& proj : projections) {
    proj.offset = total;
    for (const Piece& piece : proj.pieces) ++counts[type_name(device_type(piece))];
    total += align_up(layout_of(proj).total);
  }
  CELLM_ASSIGN_OR_RETURN(out.storage, DeviceBuffer<std::uint8_t>::allocate(total));
  std::vector<std::uint8_t> reordered, repacked;
  for (const Projection& proj : projections) {
    const PieceLayout layout = layout_of(proj);
    std::uint8_t* const base = out.storage.data() + proj.offset;
    auto* scale_at = reinterpret_cast<float*>(base + layout.code_bytes);
    std::int64_t row0 = 0;
    for (std::size_t i = 0; i < proj.pieces.size(); ++i) {
      const Piece& piece = proj.pieces[i];
      std::uint8_t* const at = base + layout.at[i];
      std::span<const std::uint8_t> bytes = piece.bytes;
      if (piece.rotary_heads > 0) {
        if (piece.rows % (2 * piece.rotary_heads) != 0) {
          return invalid_argument("GGUF tensor '{}': {} rows do not split into {} rotary heads",
                                  piece.name, piece.rows, piece.rotary_heads);
        }
        reordered.resize(bytes.size());
        model::unpermute_rotary_row_bytes(bytes, reordered, piece.rows,
                                          static_cast<std::size_t>(piece.row_bytes),
                                          piece.rotary_heads);
        bytes = reordered;
      }
      const QuantType type = device_type(piece);
      if (type == QuantType::kQ6_K_R8) {
        repacked.resize(bytes.size());
        qblocks::repack_q6k_r8_rows(bytes.data(), repacked.data(), piece.rows, piece.row_bytes,
                                    piece.cols);
        bytes = repacked;
      }
      CELLM_CUDA_CHECK(cudaMemcpy(at, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
      const float* scales = nullptr;
      if (!piece.scales.empty()) {
        CELLM_CUDA_CHECK(cudaMemcpy(scale_at, piece.scales.data(),
                                    piece.scales.size() * sizeof(float), cudaMemcpyHostToDevice));
        scales = scale_at;
        scale_at += piece.scales.size();
      }
      add_part(*proj.target, piece, type, at, scales, row0);
      row0 += piece.rows;
    }
  }
  for (const auto& [name, count] : counts) {
    out.summary += fmt::format("{}{} x{}", out.summary.empty() ? "" : ", ", name, count);
  }
  // Said from the head's parts themselves, which tests read.
  if (!out.lm_head.empty()) out.summary += "; the head in blocks";
  return Status::ok();
}

}  // namespace

Result<QuantWeights> upload_quant_weights(const model::ModelSpec& spec,
                                          const format::GgufFile& file) {
  ByName by_name;
  for (const auto& t : file.tensors()) {
    by_name.emplace(model::canonical_tensor_name(spec.arch, t.name), &t);
  }
  std::set<std::string, std::less<>> kept = model::gguf_projections_kept_on_gpu(spec, file);
  const auto embed = by_name.find("model.embed_tokens.weight");
  if (spec.tie_word_embeddings && embed != by_name.end() &&
      model::gguf_type_kept_on_gpu(embed->second->type)) {
    kept.insert(embed->first);  // the head's blocks; the lookup keeps its bf16 copy
  }
  QuantWeights out;
  std::vector<Projection> projections;
  for (Wanted& w : wanted_projections(spec, out, model::gguf_rotary_rows_permuted(spec.arch),
                                      by_name.count("lm_head.weight") != 0)) {
    CELLM_ASSIGN_OR_RETURN(auto pieces,
                           find_gguf(by_name, kept, file, std::move(w.pieces), w.names));
    if (pieces) projections.push_back({w.target, std::move(*pieces), 0});
  }
  CELLM_RETURN_IF_ERROR(upload(out, std::move(projections)));
  return out;
}

Result<QuantWeights> upload_fp8_weights(const model::ModelSpec& spec,
                                        const model::Weights& weights) {
  QuantWeights out;
  if (weights.fp8.empty()) return out;
  std::vector<Projection> projections;
  for (Wanted& w : wanted_projections(spec, out, false, weights.fp8.count("lm_head.weight") != 0)) {
    CELLM_ASSIGN_OR_RETURN(auto pieces, find_fp8(weights, std::move(w.pieces), w.names, w.fused));
    if (pieces) projections.push_back({w.target, std::move(*pieces), 0});
  }
  CELLM_RETURN_IF_ERROR(upload(out, std::move(projections)));
  return out;
}

}  // namespace cellm::cuda

namespace cellm::cuda {

Result<QuantWeights> random_fp8_weights(const model::ModelSpec& spec, std::uint64_t seed,
                                        float stddev) {
  QuantWeights out;
  std::vector<Wanted> wanted = wanted_projections(spec, out, false, false);
  std::erase_if(wanted, [&](const Wanted& w) { return w.target == &out.lm_head; });
  std::size_t total = 0;
  for (const Wanted& w : wanted) {
    std::int64_t rows = 0;
    for (const Piece& p : w.pieces) rows += p.rows;
    total += align_up(static_cast<std::size_t>(rows * (w.pieces[0].cols + 4)));
  }
  CELLM_ASSIGN_OR_RETURN(out.storage, DeviceBuffer<std::uint8_t>::allocate(total));
  // Uniform codes over (-448, 448) have std 448 / sqrt(3).
  const float scale = stddev * 1.7320508f / 448.0f;
  std::size_t offset = 0;
  std::vector<float> scales;
  for (const Wanted& w : wanted) {
    std::int64_t rows = 0;
    for (const Piece& p : w.pieces) rows += p.rows;
    const std::int64_t cols = w.pieces[0].cols;
    std::uint8_t* codes = out.storage.data() + offset;
    auto* row_scales = reinterpret_cast<float*>(codes + rows * cols);
    launch_fill_fp8(codes, static_cast<std::size_t>(rows * cols), ++seed * 7919u, nullptr);
    scales.assign(static_cast<std::size_t>(rows), scale);
    CELLM_CUDA_CHECK(cudaMemcpy(row_scales, scales.data(), scales.size() * sizeof(float),
                                cudaMemcpyHostToDevice));
    w.target->parts.push_back({codes, QuantType::kF8_E4M3, 0, rows, cols,
                               RowScales{row_scales, static_cast<std::int32_t>(cols), 1}});
    offset += align_up(static_cast<std::size_t>(rows * (cols + 4)));
  }
  out.summary = fmt::format("F8_E4M3 x{} (random)", wanted.size());
  return out;
}

}  // namespace cellm::cuda
