#!/usr/bin/env bash
# Packs the part of llama.cpp that a CUDA (or CPU) build of llama-bench needs,
# from the llama-cpp-python source distribution, into one small archive that a
# device call can carry (the GPU machine has no internet):
#
#   bench/peers/pack_llama_cpp.sh [OUT.tar.gz]     (default .peers/llama.cpp.tar.gz)
#
# Kept: the top CMakeLists.txt, LICENSE(s), cmake/, include/, src/, common/,
# vendor/, ggml/ with only its CPU and CUDA backends, and tools/llama-bench;
# tools/CMakeLists.txt is replaced by one that adds llama-bench alone (the
# original adds every tool, and those folders are left out). Dropped: models/
# (vocabularies for tests), docs, tests, examples, the web UI, the other
# backends. gzip, not zstd, because the GPU machine's tar surely has it.
# PACK_INFO at the archive's root names the sdist and its sha256.
#
# Environment: LCPP_VERSION (default 0.3.36), PEERS_WORK (download and
# extraction folder, default ~/.cache/cellm-peers; llama_bench_cpu.sh shares it).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUTF=${1:-$ROOT/.peers/llama.cpp.tar.gz}
VERSION=${LCPP_VERSION:-0.3.36}
WORK=${PEERS_WORK:-$HOME/.cache/cellm-peers}
SDIST="$WORK/llama_cpp_python-$VERSION.tar.gz"
SRC="$WORK/llama-cpp-python-$VERSION"
mkdir -p "$WORK"
if [ ! -d "$SRC/vendor/llama.cpp" ]; then
  [ -f "$SDIST" ] || python3 -m pip download --no-binary :all: --no-deps \
    "llama-cpp-python==$VERSION" -d "$WORK" >&2
  tar -xzf "$SDIST" -C "$WORK"
  mv "$WORK/llama_cpp_python-$VERSION" "$SRC"
fi
LC="$SRC/vendor/llama.cpp"
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
D="$STAGE/llama.cpp"
mkdir -p "$D/ggml/src" "$D/tools"
for p in CMakeLists.txt LICENSE licenses cmake include src common vendor; do
  [ -e "$LC/$p" ] && cp -r "$LC/$p" "$D/"
done
for p in CMakeLists.txt cmake include; do cp -r "$LC/ggml/$p" "$D/ggml/"; done
# ggml's own sources are the files at ggml/src's top; backends are folders.
find "$LC/ggml/src" -maxdepth 1 -type f -exec cp {} "$D/ggml/src/" \;
cp -r "$LC/ggml/src/ggml-cpu" "$LC/ggml/src/ggml-cuda" "$D/ggml/src/"
cp -r "$LC/tools/llama-bench" "$D/tools/"
cat > "$D/tools/CMakeLists.txt" <<'EOF'
# Written by cellm's bench/peers/pack_llama_cpp.sh: the pack holds llama-bench only.
find_package(Threads REQUIRED)
llama_add_compile_flags()
add_subdirectory(llama-bench)
EOF
SHA=$(sha256sum "$SDIST" 2>/dev/null | cut -d' ' -f1 || echo unknown)
printf 'llama-cpp-python %s sdist (vendor/llama.cpp)\nsha256 %s\npacked %s\n' \
  "$VERSION" "$SHA" "$(date -u +%FT%TZ)" > "$D/PACK_INFO"
mkdir -p "$(dirname "$OUTF")"
tar -C "$STAGE" -czf "$OUTF" llama.cpp
echo "$OUTF: $(du -h "$OUTF" | cut -f1) ($(du -sh "$D" | cut -f1) unpacked), llama-cpp-python $VERSION"
