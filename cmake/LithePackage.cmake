# Installs the SDK, kernels, host library, CLI and a CMake package `Lithe` so that
# find_package(Lithe 1) + lithe_add_plugin() builds a plugin out of tree.
include(CMakePackageConfigHelpers)

set(LITHE_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Lithe)
install(EXPORT LitheTargets NAMESPACE Lithe:: DESTINATION ${LITHE_CMAKE_INSTALL_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/LitheConfig.cmake.in
  ${CMAKE_BINARY_DIR}/LitheConfig.cmake INSTALL_DESTINATION ${LITHE_CMAKE_INSTALL_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/LitheConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/LitheConfig.cmake ${CMAKE_BINARY_DIR}/LitheConfigVersion.cmake
  ${CMAKE_CURRENT_LIST_DIR}/LithePluginHelpers.cmake ${CMAKE_CURRENT_LIST_DIR}/plugin.map
  ${CMAKE_CURRENT_LIST_DIR}/LitheTorchWheel.cmake
  DESTINATION ${LITHE_CMAKE_INSTALL_DIR})

# Documentation a user of the installed package reads without the source tree
# (<prefix>/share/doc/lithe): the guide, the SDK guide, each plugin's keys, the sample configs,
# and the two samples that build against the install (a plugin and an embedding program).
set(LITHE_DOC_INSTALL_DIR ${CMAKE_INSTALL_DATAROOTDIR}/doc/lithe)
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/ARCHITECTURE.md
  ${PROJECT_SOURCE_DIR}/BENCHMARKS.md DESTINATION ${LITHE_DOC_INSTALL_DIR})
install(FILES ${PROJECT_SOURCE_DIR}/sdk/README.md DESTINATION ${LITHE_DOC_INSTALL_DIR}
  RENAME sdk-guide.md)
file(GLOB _lithe_plugin_readmes CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/plugins/*/README.md)
foreach(_readme IN LISTS _lithe_plugin_readmes)
  get_filename_component(_plugin_dir ${_readme} DIRECTORY)
  get_filename_component(_plugin ${_plugin_dir} NAME)
  install(FILES ${_readme} DESTINATION ${LITHE_DOC_INSTALL_DIR}/plugins RENAME ${_plugin}.md)
endforeach()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/samples/configs ${PROJECT_SOURCE_DIR}/samples/embedding_app
  ${PROJECT_SOURCE_DIR}/samples/out_of_tree_plugin DESTINATION ${LITHE_DOC_INSTALL_DIR}/samples)
