# Builds the chat page into a C++ byte array: index.html with each file of
# this folder named by an "/*@include NAME*/" line inlined there, written as
# a constexpr array that chat_page.cpp includes. Run by the build:
#   cmake -DPAGE_DIR=<src/server/page> -DOUTPUT=<file.inc> -P embed_page.cmake
# A byte array rather than a raw string: any page text is safe to embed,
# with no delimiter to collide with and no string-length limit to meet.
cmake_minimum_required(VERSION 3.20)
if(NOT PAGE_DIR OR NOT OUTPUT)
  message(FATAL_ERROR "embed_page.cmake needs -DPAGE_DIR=<dir> and -DOUTPUT=<file>")
endif()

file(READ "${PAGE_DIR}/index.html" page)
string(REGEX MATCHALL "/\\*@include [A-Za-z0-9_.-]+\\*/" markers "${page}")
if(NOT markers)
  message(FATAL_ERROR "${PAGE_DIR}/index.html includes nothing: expected /*@include NAME*/ lines")
endif()
foreach(marker ${markers})
  string(REGEX REPLACE "^/\\*@include (.*)\\*/$" "\\1" part "${marker}")
  file(READ "${PAGE_DIR}/${part}" content)
  # Inline text must not end the element it sits in.
  string(TOLOWER "${content}" lower)
  if(part MATCHES "\\.js$")
    set(closer "</script")
  else()
    set(closer "</style")
  endif()
  string(FIND "${lower}" "${closer}" bad)
  if(NOT bad EQUAL -1)
    message(FATAL_ERROR "${PAGE_DIR}/${part} contains '${closer}', which would end the "
                        "inline element early: write it as '<\\/...' instead")
  endif()
  string(REPLACE "${marker}" "${content}" page "${page}")
endforeach()

string(HEX "${page}" hex)
string(LENGTH "${hex}" size)
math(EXPR size "${size} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REPEAT "0x[0-9a-f][0-9a-f]," 20 row)
string(REGEX REPLACE "(${row})" "\\1\n" bytes "${bytes}")

file(WRITE "${OUTPUT}.tmp"
  "// Generated from src/server/page/ by embed_page.cmake at build time; do not edit.\n"
  "// The chat page, ${size} bytes of UTF-8.\n"
  "namespace cellm::server::page {\n"
  "inline constexpr unsigned char kChatPage[] = {\n${bytes}\n};\n"
  "}  // namespace cellm::server::page\n")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUTPUT}.tmp" "${OUTPUT}")
file(REMOVE "${OUTPUT}.tmp")
