# Helpers that give every library and test the same shape.

add_library(cellm_options INTERFACE)
target_compile_options(cellm_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-missing-field-initializers>)
if(CELLM_WERROR)
  target_compile_options(cellm_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
if(CELLM_SANITIZE)
  string(REPLACE ";" "," _cellm_san "${CELLM_SANITIZE}")
  target_compile_options(cellm_options INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${_cellm_san} -fno-omit-frame-pointer -fno-sanitize-recover=all>)
  target_link_options(cellm_options INTERFACE -fsanitize=${_cellm_san})
endif()

# Layering (DESIGN §1): a library sees its own headers, include/ (the public
# API) and the headers of the libraries it links, nothing else. Sources name
# private headers by folder ("core/status.h"), so src/ itself cannot be an
# include path: each folder of src/ gets a header root in the build tree, a
# directory holding one link to that folder under its own name, and a library
# puts only its folder's root on its (PUBLIC) include path. Including a header
# of a library not among a target's dependencies then fails to compile.
# cellm_header_root(VAR) sets VAR to the root of the calling folder; the
# libraries of one folder (server_core and server) share it.
function(cellm_header_root out)
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR}/src ${CMAKE_CURRENT_SOURCE_DIR})
  if(rel MATCHES "^\\.\\.")
    message(FATAL_ERROR "cellm_header_root: ${CMAKE_CURRENT_SOURCE_DIR} is not under src/")
  endif()
  string(REPLACE "/" "_" key "${rel}")
  set(root ${PROJECT_BINARY_DIR}/header_roots/${key})
  if(NOT IS_SYMLINK ${root}/${rel})
    get_filename_component(parent ${root}/${rel} DIRECTORY)
    file(MAKE_DIRECTORY ${parent})
    file(CREATE_LINK ${CMAKE_CURRENT_SOURCE_DIR} ${root}/${rel} SYMBOLIC RESULT failed)
    if(failed)
      message(FATAL_ERROR "cellm_header_root: cannot link ${root}/${rel}: ${failed}")
    endif()
  endif()
  set(${out} ${root} PARENT_SCOPE)
endfunction()

# cellm_library(NAME SOURCES ... [DEPS ...] [PRIVATE_DEPS ...])
# Builds the static library cellm_NAME (alias cellm::NAME, and cellm::NAME
# once installed). DEPS are the libraries its headers need (PUBLIC),
# PRIVATE_DEPS those only its sources need; a static library still carries
# the latter to the final link. cellm_options (warnings, sanitizers) reaches
# every target of this build that links a library, as before, but is left
# out of the installed interface: an embedder's flags are its own.
function(cellm_library name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(cellm_${name} STATIC ${A_SOURCES})
  add_library(cellm::${name} ALIAS cellm_${name})
  set_target_properties(cellm_${name} PROPERTIES EXPORT_NAME ${name})
  set_property(GLOBAL APPEND PROPERTY CELLM_LIBRARY_ORDER ${name})  # cmake/layering.cmake
  cellm_header_root(root)
  target_include_directories(cellm_${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<BUILD_INTERFACE:${root}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(cellm_${name} PUBLIC ${A_DEPS} $<BUILD_INTERFACE:cellm_options>
                        PRIVATE ${A_PRIVATE_DEPS})
endfunction()

# cellm_test(NAME SOURCES ... DEPS ... LABEL unit|golden|text|e2e|gpu [TIMEOUT s])
# One GoogleTest binary; every TEST becomes its own ctest entry carrying LABEL.
function(cellm_test name)
  cmake_parse_arguments(A "" "LABEL;TIMEOUT" "SOURCES;DEPS" ${ARGN})
  if(NOT A_LABEL)
    message(FATAL_ERROR "cellm_test(${name}) needs a LABEL")
  endif()
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  add_executable(${name} ${A_SOURCES})
  target_link_libraries(${name} PRIVATE ${A_DEPS} cellm_test_support GTest::gtest GTest::gmock
                        GTest::gtest_main cellm_options)
  # ctest runs two test processes at once on CI's two cores; OpenMP workers
  # that spin while waiting would steal the other process's core (the golden
  # suites ran 8x slower that way), so idle workers sleep in tests.
  # Listing a test binary takes well under a second, but CI once saw the CUDA
  # suite's listing pass gtest's default 5 s on a loaded 2-core machine.
  gtest_discover_tests(${name}
    DISCOVERY_MODE PRE_TEST
    DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS ${A_LABEL} TIMEOUT ${A_TIMEOUT} ENVIRONMENT OMP_WAIT_POLICY=passive)
endfunction()

# cellm_fuzz_target(NAME SOURCES ... DEPS ... [CORPUS dir])
# A parser fuzz target exporting LLVMFuzzerTestOneInput. Under the `fuzz`
# preset (clang, CELLM_FUZZ=ON) it becomes a libFuzzer binary that .ci/run
# drives for a bounded time. In every other build it becomes a ctest (label
# unit) that replays the corpus files and some mutations of them through the
# same entry point, so parsers stay crash-free under the sanitizers too.
if(CELLM_FUZZ)
  add_custom_target(cellm_fuzzers)
  file(WRITE ${CMAKE_BINARY_DIR}/fuzzers.txt "")
  # The libraries the fuzzers link must carry the same instrumentation.
  target_compile_options(cellm_options INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link,address,undefined>)
  target_link_options(cellm_options INTERFACE -fsanitize=address,undefined)
endif()

function(cellm_fuzz_target name)
  cmake_parse_arguments(A "" "CORPUS" "SOURCES;DEPS" ${ARGN})
  if(CELLM_FUZZ)
    add_executable(${name} ${A_SOURCES})
    target_link_libraries(${name} PRIVATE ${A_DEPS} cellm_options)
    target_compile_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
    add_dependencies(cellm_fuzzers ${name})
    # scripts/fuzz reads this manifest: one "binary corpus-dir" line per target.
    file(APPEND ${CMAKE_BINARY_DIR}/fuzzers.txt "${name} ${A_CORPUS}\n")
  else()
    add_executable(${name}_replay ${A_SOURCES} ${PROJECT_SOURCE_DIR}/fuzz/replay_main.cpp)
    target_link_libraries(${name}_replay PRIVATE ${A_DEPS} cellm_options)
    if(A_CORPUS)
      add_test(NAME ${name}_replay COMMAND ${name}_replay ${A_CORPUS})
    else()
      add_test(NAME ${name}_replay COMMAND ${name}_replay)
    endif()
    set_tests_properties(${name}_replay PROPERTIES LABELS unit TIMEOUT 300)
  endif()
endfunction()
