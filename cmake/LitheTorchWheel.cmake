# Included after find_package(Torch) by Lithe's build (LitheTorch.cmake) and by the installed
# LitheConfig.cmake, so that a program or plugin built against an installed Lithe links the same
# way. Does nothing for a libtorch that is not a PyPI wheel (no site-packages/nvidia beside it).
#
# The wheel's libtorch_cuda.so was built against the CUDA libraries of the nvidia-* wheels beside
# it (site-packages/nvidia/*/lib, found through its RPATH). Its CMake package instead links
# dependents to the CUDA runtime of whatever toolkit is installed (the toolkit's cudart), and puts that
# toolkit's lib folder first on the link's -rpath: ld then resolves libtorch_cuda.so's libnccl.so.2
# from the toolkit (an older NCCL: undefined references), and at run time the toolkit's older
# libcudart.so.13 would be loaded before the one libtorch was built with. So, for a wheel, the CUDA
# runtime is the wheel's own and ld looks for libtorch's dependencies in the wheel's folders.
get_filename_component(_lithe_torch_lib_dir "${TORCH_INSTALL_PREFIX}/lib" ABSOLUTE)
get_filename_component(_lithe_wheel_nvidia_dir "${TORCH_INSTALL_PREFIX}/../nvidia" ABSOLUTE)
file(GLOB LITHE_TORCH_WHEEL_CUDA_DIRS LIST_DIRECTORIES true "${_lithe_wheel_nvidia_dir}/*/lib")
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
