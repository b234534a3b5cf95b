# Third-party libraries, all from the system (scripts/setup installs them by
# Debian package name). Header-only variants are preferred where the library
# offers one, so that a build on a machine with only headers (the GPU host,
# which gets them carried in) links the same way.
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)
# Debian installs cblas.h per BLAS flavour behind alternatives; look in the
# flavour folders too so an unpacked (not installed) package works as well.
find_path(CELLM_CBLAS_INCLUDE_DIR cblas.h
  PATH_SUFFIXES openblas-pthread openblas x86_64-linux-gnu/openblas-pthread
                x86_64-linux-gnu/openblas x86_64-linux-gnu)
if(NOT CELLM_CBLAS_INCLUDE_DIR)
  message(FATAL_ERROR "cblas.h not found: run scripts/setup (installs libopenblas-dev)")
endif()
set_property(TARGET BLAS::BLAS APPEND PROPERTY INTERFACE_INCLUDE_DIRECTORIES ${CELLM_CBLAS_INCLUDE_DIR})
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(CLI11 CONFIG REQUIRED)
if(CELLM_SERVER)
  pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
endif()
if(CELLM_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
if(CELLM_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
