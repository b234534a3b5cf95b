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
find_package(BLAS REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(CLI11 CONFIG QUIET)
find_package(httplib CONFIG QUIET)
if(CELLM_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
if(CELLM_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
