# Finds libtorch 2.x and checks it is a version Lithe supports. Included once, from the top-level
# CMakeLists.txt, before any target links `torch`.
#
# Where from: the C++ distribution inside PyPI's `torch` wheel (scripts/install-deps.sh installs the
# pinned one into .venv/ and scripts/build.sh puts its share/cmake on CMAKE_PREFIX_PATH), or a
# user's own libtorch through Torch_DIR / CMAKE_PREFIX_PATH.
set(LITHE_TORCH_MIN_VERSION 2.15)
set(LITHE_TORCH_MAX_VERSION_EXCLUSIVE 3)

# A CUDA build of libtorch adds -gencode flags for TORCH_CUDA_ARCH_LIST to every CUDA compile of a
# target that links it; its default list starts at 5.0, which CUDA 13's nvcc refuses.
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "7.5;8.0;8.6;8.9;9.0" CACHE STRING
      "CUDA architectures libtorch's CMake package compiles CUDA code of its dependents for")
endif()
find_package(Torch REQUIRED)
if(NOT Torch_VERSION OR Torch_VERSION VERSION_LESS LITHE_TORCH_MIN_VERSION OR
   NOT Torch_VERSION VERSION_LESS LITHE_TORCH_MAX_VERSION_EXCLUSIVE)
  message(FATAL_ERROR "libtorch ${Torch_VERSION} at ${Torch_DIR}: Lithe needs libtorch "
          ">= ${LITHE_TORCH_MIN_VERSION} and < ${LITHE_TORCH_MAX_VERSION_EXCLUSIVE} (run "
          "scripts/install-deps.sh for the pinned wheel in .venv/, or point Torch_DIR at another)")
endif()

include(${CMAKE_CURRENT_LIST_DIR}/LitheTorchWheel.cmake)
# Installed programs and libraries find libtorch where the build found it (a wheel or a libtorch
# folder is not on the loader's default path, as Debian's libtorch was), and, for a wheel, the
# CUDA runtime they link directly.
list(APPEND CMAKE_INSTALL_RPATH "${_lithe_torch_lib_dir}")
if(LITHE_TORCH_WHEEL_CUDART)
  get_filename_component(_lithe_cudart_dir "${LITHE_TORCH_WHEEL_CUDART}" DIRECTORY)
  list(APPEND CMAKE_INSTALL_RPATH "${_lithe_cudart_dir}")
  message(STATUS "Lithe: libtorch ${Torch_VERSION} from ${Torch_DIR}, CUDA runtime "
                 "${LITHE_TORCH_WHEEL_CUDART}")
else()
  message(STATUS "Lithe: libtorch ${Torch_VERSION} from ${Torch_DIR}")
endif()
