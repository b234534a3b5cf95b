#!/usr/bin/env bash
# check_install.sh BUILD_DIR SOURCE_DIR MODEL [CXX_COMPILER]
# Installs BUILD_DIR into a fresh temporary prefix and checks the package an
# embedder gets: only public headers, each compiling on its own with
# warnings as errors and without CUDA or JSON headers; examples/
# stream_completion configured (find_package(cellm), CMAKE_PREFIX_PATH = the
# prefix), built, and run on MODEL, where it must exit 0 and print the same
# greedy continuation as the installed `cellm run`.
set -euo pipefail
if [[ $# -lt 3 ]]; then
  echo "usage: $0 BUILD_DIR SOURCE_DIR MODEL [CXX_COMPILER]" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
model=$3
cxx=${4:-c++}
fail() { echo "FAIL: $*" >&2; exit 1; }

[[ -f "$model" ]] || fail "model $model not found: run scripts/fetch-model all"
command -v cmake >/dev/null || fail "cmake not found: run scripts/setup"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

work=$(mktemp -d "${TMPDIR:-/tmp}/cellm-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

echo "-- installing $build into $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 || {
  cat "$work/install.log" >&2
  fail "cmake --install failed (build every target first: cmake --build --preset cpu-release)"
}

# The package is self-contained: nothing points back at the build or source
# tree, and only the public headers are installed.
[[ -f "$prefix/lib/cmake/cellm/cellmConfig.cmake" ]] || fail "no lib/cmake/cellm/cellmConfig.cmake"
[[ -f "$prefix/lib/cmake/cellm/cellmConfigVersion.cmake" ]] || fail "no cellmConfigVersion.cmake"
[[ -x "$prefix/bin/cellm" ]] || fail "the cellm command was not installed"
if grep -rlF -e "$build" -e "$src" "$prefix/lib/cmake" >&2; then
  fail "the files above refer to the build or source tree"
fi
others=$(cd "$prefix/include" && find . -type f ! -path './cellm/*.h')
[[ -z "$others" ]] || fail "headers outside include/cellm were installed: $others"
if grep -nE '#include [<"](cuda|cublas|nlohmann|spdlog|pcre2|cblas|omp)' -r "$prefix/include" >&2; then
  fail "public headers include the third-party headers above"
fi
if grep -nE '#include "(core|format|model|text|chat|cache|sampling|program|backend|executor|engine|app|server|cli)/' \
    -r "$prefix/include" >&2; then
  fail "public headers include the private headers above"
fi

echo "-- compiling each public header on its own"
headers="$work/headers"
mkdir -p "$headers"
sources=""
for h in "$prefix"/include/cellm/*.h; do
  name=$(basename "$h" .h)
  printf '#include <cellm/%s.h>\n#include <cellm/%s.h>  // twice: include guards\n' "$name" "$name" \
    >"$headers/$name.cpp"
  sources="$sources $name.cpp"
done
cat >"$headers/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.25)
project(cellm_headers LANGUAGES CXX)
find_package(cellm CONFIG REQUIRED)
add_library(headers OBJECT $sources)
target_link_libraries(headers PRIVATE cellm::cellm)
target_compile_options(headers PRIVATE -Wall -Wextra -Wpedantic -Werror)
CMAKE
cmake -S "$headers" -B "$headers/build" "${generator[@]}" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_CXX_COMPILER="$cxx" >"$work/headers.log" 2>&1 || { cat "$work/headers.log" >&2; fail "configuring the header check"; }
cmake --build "$headers/build" >>"$work/headers.log" 2>&1 || { cat "$work/headers.log" >&2; fail "a public header does not compile on its own"; }

echo "-- building examples/stream_completion against the package"
example="$work/example"
cmake -S "$src/examples/stream_completion" -B "$example" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_CXX_FLAGS="-Wall -Wextra -Wpedantic -Werror" >"$work/example.log" 2>&1 || {
  cat "$work/example.log" >&2; fail "configuring the example (find_package(cellm))"; }
cmake --build "$example" >>"$work/example.log" 2>&1 || { cat "$work/example.log" >&2; fail "building the example"; }

echo "-- running it"
prompt="The capital of France is"
set +e
"$example/stream_completion" "$model" "$prompt" 8 >"$work/out.txt" 2>"$work/err.txt"
rc=$?
set -e
cat "$work/out.txt"
cat "$work/err.txt" >&2
[[ $rc -eq 0 ]] || fail "stream_completion exited $rc"
grep -q '[^[:space:]]' "$work/out.txt" || fail "stream_completion printed no text"
grep -qE ' [1-9][0-9]* generated' "$work/err.txt" || fail "stream_completion reported no generated tokens"

# The same prompt through the installed command, greedy, must continue the
# same way (the example samples with the model's defaults: greedy unless
# the model ships others, which this check would then report).
"$prefix/bin/cellm" run "$model" -p "$prompt" -n 8 --temperature 0 --backend auto \
  >"$work/cli.txt" 2>"$work/cli_err.txt" || { cat "$work/cli_err.txt" >&2; fail "cellm run failed"; }
cmp -s "$work/out.txt" "$work/cli.txt" || {
  echo "cellm run printed:" >&2; cat "$work/cli.txt" >&2
  fail "the example's text differs from cellm run --temperature 0"
}

# And through the chat template.
question="What is the capital of France?"
"$example/stream_completion" "$model" "$question" 8 --chat >"$work/chat.txt" 2>"$work/chat_err.txt" || {
  cat "$work/chat_err.txt" >&2; fail "stream_completion --chat failed"; }
"$prefix/bin/cellm" run "$model" -p "$question" --chat -n 8 --temperature 0 \
  >"$work/cli_chat.txt" 2>"$work/cli_err.txt" || { cat "$work/cli_err.txt" >&2; fail "cellm run --chat failed"; }
grep -q '[^[:space:]]' "$work/chat.txt" || fail "stream_completion --chat printed no text"
cmp -s "$work/chat.txt" "$work/cli_chat.txt" || {
  echo "stream_completion --chat printed:" >&2; cat "$work/chat.txt" >&2
  echo "cellm run --chat printed:" >&2; cat "$work/cli_chat.txt" >&2
  fail "the example's chat text differs from cellm run --chat --temperature 0"
}
echo "-- ok: the installed package builds and runs examples/stream_completion"
