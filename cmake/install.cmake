# `cmake --install` of the embedding package: the public headers
# (include/cellm), the static libraries an application needs to load a model
# and run it (cellm::app and everything it links), the `cellm` command, and
# cellmConfig.cmake with its version file and exported targets, so that
#   find_package(cellm CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE cellm::cellm)
# works against the prefix. examples/ holds a program built that way, and
# tests/install builds and runs it against a fresh install.
include(CMakePackageConfigHelpers)

if(TARGET cellm_app)
  cellm_library_closure(cellm_app _cellm_installed_libraries)

  # cellm::cellm: what an embedder links (the app library pulls in the rest).
  add_library(cellm_sdk INTERFACE)
  add_library(cellm::cellm ALIAS cellm_sdk)
  set_target_properties(cellm_sdk PROPERTIES EXPORT_NAME cellm)
  target_link_libraries(cellm_sdk INTERFACE cellm_app)
  target_include_directories(cellm_sdk INTERFACE
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  # The public headers are C++20 (std::span, designated initialisers).
  target_compile_features(cellm_sdk INTERFACE cxx_std_20)

  install(TARGETS cellm_sdk ${_cellm_installed_libraries}
          EXPORT cellmTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/cellm
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
  set(_cellm_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/cellm)
  install(EXPORT cellmTargets NAMESPACE cellm:: DESTINATION ${_cellm_cmake_dir})
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/cellmConfig.cmake.in
    ${PROJECT_BINARY_DIR}/cellmConfig.cmake INSTALL_DESTINATION ${_cellm_cmake_dir})
  # 0.x: a minor release may change the API.
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/cellmConfigVersion.cmake
    VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/cellmConfig.cmake ${PROJECT_BINARY_DIR}/cellmConfigVersion.cmake
          DESTINATION ${_cellm_cmake_dir})
endif()

if(TARGET cellm)
  install(TARGETS cellm RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
