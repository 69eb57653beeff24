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
  DESTINATION ${LITHE_CMAKE_INSTALL_DIR})
