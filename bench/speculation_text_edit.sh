#!/usr/bin/env bash
# Speculative decoding's served figure (issue 39): the text-editing dataset
# (bench/datasets/README.md) through `cellm bench serve --http`, the path
# `cellm serve` takes, at batch 1 (--max-concurrency 1), three ways in one
# run: plain decoding, prompt lookup (--speculate ngram), and the model as
# its own draft (--speculate draft --draft-model MODEL: acceptance 1, the
# upper bound). Appends the three JSON lines to OUT.jsonl (ROUNDS times, the
# three ways alternating so that they see the same machine) and prints output
# tok/s, TPOT p50, the acceptance and the speedup over the plain run of the
# same round.
#
#   bench/speculation_text_edit.sh MODEL CELLM OUT.jsonl [DATASET]
#
# MODEL: a .gguf file or Hugging Face folder (e.g. models/gemma-3-270m-q4_k_m.gguf).
# CELLM: the cellm binary (e.g. build/cuda-release/bin/cellm).
# DATASET: default bench/datasets/text_edit.jsonl when the model ships a chat
#   template, else text_edit_prompt.jsonl (the Gemma 3 270M GGUF has none).
# Environment: NUM_PROMPTS (24: the file once), SPECULATE_TOKENS (4), BACKEND
#   (auto), ROUNDS (1), EXTRA (more bench serve options, word-split).
set -euo pipefail
usage="usage: speculation_text_edit.sh MODEL CELLM OUT.jsonl [DATASET]"
MODEL=${1:?$usage}
CELLM=${2:?$usage}
OUTJ=${3:?$usage}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
NUM_PROMPTS=${NUM_PROMPTS:-24}
SPECULATE_TOKENS=${SPECULATE_TOKENS:-4}
BACKEND=${BACKEND:-auto}
ROUNDS=${ROUNDS:-1}
[ -x "$CELLM" ] || { echo "speculation_text_edit.sh: $CELLM is not an executable" >&2; exit 2; }
[ -e "$MODEL" ] || { echo "speculation_text_edit.sh: no model at $MODEL" >&2; exit 2; }

# Whether the model ships a chat template: a GGUF key near the file's start,
# or a Hugging Face folder's template file or tokenizer_config entry.
has_chat_template() {
  if [ -d "$1" ]; then
    [ -f "$1/chat_template.jinja" ] || [ -f "$1/chat_template.json" ] ||
      grep -q '"chat_template"' "$1/tokenizer_config.json" 2>/dev/null
  else
    head -c 67108864 "$1" | grep -a -q 'tokenizer.chat_template'
  fi
}
if [ $# -ge 4 ]; then
  DATASET=$4
elif has_chat_template "$MODEL"; then
  DATASET=$ROOT/bench/datasets/text_edit.jsonl
else
  DATASET=$ROOT/bench/datasets/text_edit_prompt.jsonl
fi
echo "speculation_text_edit.sh: $MODEL over $DATASET, $NUM_PROMPTS requests at batch 1" >&2
export CELLM_COMMIT=${CELLM_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}

# Only this run's lines go into the table.
touch "$OUTJ"
first=$(($(wc -l < "$OUTJ") + 1))
for r in $(seq 1 "$ROUNDS"); do
  for way in off ngram draft; do
    args=()
    case $way in
      ngram) args=(--speculate ngram --speculate-tokens "$SPECULATE_TOKENS") ;;
      draft) args=(--speculate draft --draft-model "$MODEL" --speculate-tokens "$SPECULATE_TOKENS") ;;
    esac
    echo "== round $r: speculate $way" >&2
    # shellcheck disable=SC2086  # EXTRA is meant to split into options
    "$CELLM" bench serve --http --backend "$BACKEND" --model "$MODEL" --dataset "$DATASET" \
      --num-prompts "$NUM_PROMPTS" --max-concurrency 1 --progress-bar off \
      --json "$OUTJ" ${args[@]+"${args[@]}"} ${EXTRA:-}
  done
done

tail -n +"$first" "$OUTJ" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
rows = [r for r in rows if r.get("bench") == "serve_http"]
print()
print("| round | speculate | completed | output tok | output tok/s | TPOT p50 ms | proposed | accepted | acceptance | speedup (tok/s) | speedup (TPOT p50) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
plain = None
for i, r in enumerate(rows):
    rnd = i // 3 + 1
    if r.get("speculate") == "off":
        plain = r
    def ratio(num, den):
        return f"{num / den:.2f}x" if num and den else "--"
    acc = r.get("spec_acceptance_rate")
    tpot = r.get("tpot_ms_p50")
    print("| {} | {} | {}/{} | {} | {:.1f} | {} | {} | {} | {} | {} | {} |".format(
        rnd, r.get("speculate"), r["completed"], r["requests"], r["output_tokens"],
        r["output_tokens_per_s"], f"{tpot:.2f}" if tpot else "--",
        r.get("spec_proposed_tokens", "--"), r.get("spec_accepted_tokens", "--"),
        f"{acc:.3f}" if acc is not None else "--",
        ratio(r["output_tokens_per_s"], plain["output_tokens_per_s"]) if plain else "--",
        ratio(plain.get("tpot_ms_p50"), tpot) if plain else "--"))
print()
print("device: {}; model: {}; dataset: {}".format(rows[0]["gpu"], rows[0]["model"], rows[0].get("dataset")) if rows else "no result lines")
'
