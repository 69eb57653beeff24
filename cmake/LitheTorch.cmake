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

# The wheel's libtorch_cuda.so was built against the CUDA libraries of the nvidia-* wheels beside
# it (site-packages/nvidia/*/lib, found through its RPATH). Its CMake package instead links
# dependents to the CUDA runtime of whatever toolkit is installed (CUDA::cudart), and puts that
# toolkit's lib folder first on the link's -rpath: ld then resolves libtorch_cuda.so's libnccl.so.2
# from the toolkit (an older NCCL: undefined references), and at run time the toolkit's older
# libcudart.so.13 would be loaded before the one libtorch was built with. So, for a wheel, the CUDA
# runtime is the wheel's own and ld looks for libtorch's dependencies in the wheel's folders.
get_filename_component(_lithe_torch_lib_dir "${TORCH_INSTALL_PREFIX}/lib" ABSOLUTE)
file(GLOB _lithe_wheel_cuda_dirs LIST_DIRECTORIES true "${TORCH_INSTALL_PREFIX}/../nvidia/*/lib")
set(LITHE_TORCH_WHEEL_CUDA_DIRS "")
foreach(_dir IN LISTS _lithe_wheel_cuda_dirs)
  get_filename_component(_dir "${_dir}" ABSOLUTE)
  list(APPEND LITHE_TORCH_WHEEL_CUDA_DIRS "${_dir}")
endforeach()
if(LITHE_TORCH_WHEEL_CUDA_DIRS AND TARGET torch::cudart)
  find_library(LITHE_TORCH_WHEEL_CUDART NAMES libcudart.so.13 libcudart.so.12 cudart
               PATHS ${LITHE_TORCH_WHEEL_CUDA_DIRS} NO_DEFAULT_PATH)
  if(LITHE_TORCH_WHEEL_CUDART)
    set_property(TARGET torch::cudart PROPERTY INTERFACE_LINK_LIBRARIES "${LITHE_TORCH_WHEEL_CUDART}")
  endif()
  list(JOIN LITHE_TORCH_WHEEL_CUDA_DIRS ":" _lithe_rpath_link)
  set_property(TARGET torch APPEND PROPERTY INTERFACE_LINK_OPTIONS
               "LINKER:-rpath-link,${_lithe_torch_lib_dir}:${_lithe_rpath_link}")
endif()
if(LITHE_TORCH_WHEEL_CUDART)
  message(STATUS "Lithe: libtorch ${Torch_VERSION} from ${Torch_DIR}, CUDA runtime "
                 "${LITHE_TORCH_WHEEL_CUDART}")
else()
  message(STATUS "Lithe: libtorch ${Torch_VERSION} from ${Torch_DIR}")
endif()
