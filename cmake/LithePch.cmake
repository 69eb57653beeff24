# Precompiled libtorch headers, shared by every target of the build.
#
# libtorch 2.x's headers cost 10-40 s of GCC time in each translation unit that includes
# <torch/torch.h> or <torch/script.h>; on a 2-core machine that was most of a cold build. Two holder
# targets precompile both headers once (one for default symbol visibility, one for the hidden
# visibility that plugins and the kernels library use), and lithe_reuse_torch_pch() makes every
# other C++ target of the project include that precompiled header first (REUSE_FROM).
#
# GCC accepts a precompiled header only when the flags that shape it agree (-fPIC/-fPIE, the
# language standard, the -D macros the headers test): every C++ compile gets -fPIC for that
# reason, and -Winvalid-pch (+ -Werror) turns a mismatch into a build error instead of a silent
# fallback to the slow path. LITHE_PCH=OFF builds without it.
option(LITHE_PCH "Precompile libtorch's headers once for every target" ON)

if(LITHE_PCH)
  # One code model for every object: GCC refuses a header precompiled with -fPIC in a -fPIE compile.
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fPIC>)
endif()

# Sets <out> to TRUE when <target> links libtorch, directly or through the targets it links:
# the precompiled header also carries libtorch's compile definitions, which only such a target has.
function(_lithe_links_torch target out)
  get_target_property(_aliased ${target} ALIASED_TARGET)
  if(_aliased)
    set(target ${_aliased})
  endif()
  get_target_property(_known ${target} _LITHE_LINKS_TORCH)
  if(NOT _known STREQUAL "_known-NOTFOUND")
    set(${out} ${_known} PARENT_SCOPE)
    return()
  endif()
  set(_result FALSE)
  get_target_property(_imported ${target} IMPORTED)
  get_target_property(_type ${target} TYPE)
  set(_libs "")
  if(NOT _imported AND NOT _type STREQUAL "INTERFACE_LIBRARY")
    get_target_property(_libs ${target} LINK_LIBRARIES)
  endif()
  get_target_property(_interface ${target} INTERFACE_LINK_LIBRARIES)
  foreach(_lib IN LISTS _libs _interface)
    string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" _lib "${_lib}")
    string(REGEX REPLACE "^\\$<BUILD_INTERFACE:(.*)>$" "\\1" _lib "${_lib}")
    if(_lib STREQUAL "torch")
      set(_result TRUE)
      break()
    endif()
    if(TARGET ${_lib} AND NOT _lib MATCHES "^(GTest|Boost|nlohmann_json|ZLIB|OpenMP|CUDA)::")
      get_target_property(_lib_imported ${_lib} IMPORTED)
      if(NOT _lib_imported)
        _lithe_links_torch(${_lib} _sub)
        if(_sub)
          set(_result TRUE)
          break()
        endif()
      endif()
    endif()
  endforeach()
  if(NOT _imported)
    set_property(TARGET ${target} PROPERTY _LITHE_LINKS_TORCH ${_result})
  endif()
  set(${out} ${_result} PARENT_SCOPE)
endfunction()

# Called once at the end of the top-level CMakeLists.txt, after every target exists.
function(lithe_reuse_torch_pch)
  if(NOT LITHE_PCH)
    return()
  endif()
  set(_pch_source ${PROJECT_SOURCE_DIR}/cmake/torch_pch.cpp)
  foreach(_holder lithe_torch_pch lithe_torch_pch_hidden)
    add_library(${_holder} STATIC ${_pch_source})
    target_link_libraries(${_holder} PRIVATE torch)
    target_precompile_headers(${_holder} PRIVATE <torch/torch.h> <torch/script.h>)
  endforeach()
  set_target_properties(lithe_torch_pch_hidden PROPERTIES
    CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)

  set(_dirs ${PROJECT_SOURCE_DIR})
  set(_targets "")
  while(_dirs)
    list(POP_FRONT _dirs _dir)
    get_property(_sub DIRECTORY ${_dir} PROPERTY SUBDIRECTORIES)
    list(APPEND _dirs ${_sub})
    # Only the project's own folders: not a GoogleTest built from its sources.
    cmake_path(IS_PREFIX PROJECT_SOURCE_DIR "${_dir}" NORMALIZE _ours)
    if(NOT _ours)
      continue()
    endif()
    get_property(_t DIRECTORY ${_dir} PROPERTY BUILDSYSTEM_TARGETS)
    list(APPEND _targets ${_t})
  endwhile()
  foreach(_target IN LISTS _targets)
    get_target_property(_type ${_target} TYPE)
    if(NOT _type MATCHES "^(EXECUTABLE|SHARED_LIBRARY|MODULE_LIBRARY|STATIC_LIBRARY|OBJECT_LIBRARY)$"
       OR _target MATCHES "^lithe_torch_pch")
      continue()
    endif()
    get_target_property(_opt_out ${_target} LITHE_NO_PCH)
    get_target_property(_sources ${_target} SOURCES)
    if(_opt_out OR NOT _sources MATCHES "\\.cpp(;|$)")
      continue()
    endif()
    _lithe_links_torch(${_target} _uses_torch)
    if(NOT _uses_torch)
      continue()
    endif()
    get_target_property(_visibility ${_target} CXX_VISIBILITY_PRESET)
    if(_visibility STREQUAL "hidden")
      target_precompile_headers(${_target} REUSE_FROM lithe_torch_pch_hidden)
    else()
      target_precompile_headers(${_target} REUSE_FROM lithe_torch_pch)
    endif()
  endforeach()
endfunction()
