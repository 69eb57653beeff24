# lithe_add_plugin(<name> SOURCES <src>...)
#
# Builds one Lithe plugin the same way in tree and out of tree:
#   <name>      MODULE library lithe_plugin_<name>.so, exporting only lithe_get_plugin_info
#   <name>_obj  OBJECT library of the same sources (LITHE_PLUGIN expands to nothing), which unit
#               tests link directly instead of dlopen-ing the module.
# Requires the targets Lithe::sdk and Lithe::kernels (find_package(Lithe) provides them).
include_guard(GLOBAL)

if(NOT DEFINED LITHE_PLUGIN_VERSION_SCRIPT)
  set(LITHE_PLUGIN_VERSION_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/plugin.map)
endif()

function(lithe_add_plugin name)
  cmake_parse_arguments(ARG "" "" "SOURCES" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "lithe_add_plugin(${name}): SOURCES is required")
  endif()

  add_library(${name}_obj OBJECT ${ARG_SOURCES})
  target_link_libraries(${name}_obj PUBLIC Lithe::sdk Lithe::kernels)
  set_target_properties(${name}_obj PROPERTIES POSITION_INDEPENDENT_CODE ON
                        CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  target_compile_features(${name}_obj PUBLIC cxx_std_17)

  add_library(${name} MODULE ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE Lithe::sdk Lithe::kernels)
  target_compile_definitions(${name} PRIVATE LITHE_PLUGIN_BUILD_MODULE)
  target_compile_features(${name} PRIVATE cxx_std_17)
  # Installed to <prefix>/<libdir>/lithe/plugins: the Lithe libraries are two levels up.
  set_target_properties(${name} PROPERTIES PREFIX "" OUTPUT_NAME "lithe_plugin_${name}"
                        CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
                        INSTALL_RPATH "$ORIGIN/../..")
  if(DEFINED LITHE_PLUGIN_OUTPUT_DIR)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${LITHE_PLUGIN_OUTPUT_DIR})
  endif()
  if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
    target_link_options(${name} PRIVATE "LINKER:--no-undefined"
                        "LINKER:--version-script=${LITHE_PLUGIN_VERSION_SCRIPT}")
  endif()
  if(COMMAND lithe_set_warnings)
    lithe_set_warnings(${name})
    lithe_set_warnings(${name}_obj)
  endif()
  if(DEFINED LITHE_PLUGIN_INSTALL_DIR)
    install(TARGETS ${name} LIBRARY DESTINATION ${LITHE_PLUGIN_INSTALL_DIR})
  endif()
endfunction()
