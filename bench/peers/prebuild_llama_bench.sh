#!/usr/bin/env bash
# Builds llama.cpp's CUDA llama-bench here, from the pack that
# pack_llama_cpp.sh writes, so that a GPU call spends no device minutes on
# it: this machine's nvcc is the GPU machine's (CUDA 13), and only the link
# needs libcuda, which the toolkit's stubs stand in for.
#
#   bench/peers/prebuild_llama_bench.sh        (about 30 min on 2 cores, once)
#
# Writes .peers/llama-bench.xz (stripped, about 41 MB: carry .peers) and
# .peers/llama-bench.stamp (the pack's hash, which gpu_gguf_side_by_side.sh
# checks before it uses the binary instead of building one). ggml is linked
# statically; cudart, cuBLAS, NCCL and libcuda come from the GPU machine's
# /usr/local/cuda and driver.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PACK=$ROOT/.peers/llama.cpp.tar.gz
[ -f "$PACK" ] || { echo "no $PACK: run bench/peers/pack_llama_cpp.sh first" >&2; exit 1; }
WORK=${PEERS_WORK:-$HOME/.cache/cellm-peers}/prebuild
rm -rf "$WORK" && mkdir -p "$WORK"
tar -xzf "$PACK" -C "$WORK"
export PATH=/usr/local/cuda/bin:$PATH
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
nice -n 10 cmake -S "$WORK/llama.cpp" -B "$WORK/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON
nice -n 10 cmake --build "$WORK/build" -j "$(nproc)" --target llama-bench
cp "$WORK/build/bin/llama-bench" "$WORK/llama-bench" && strip "$WORK/llama-bench"
xz -9 -T0 -c "$WORK/llama-bench" > "$ROOT/.peers/llama-bench.xz"
sha256sum "$PACK" | cut -c1-16 > "$ROOT/.peers/llama-bench.stamp"
ls -la "$ROOT/.peers/llama-bench.xz"
