# cmake -P script run by the fuzz_build CTest test (see ctest.cmake): configures the standalone
# fuzz project (tests/fuzz) with clang into BINARY_DIR and builds it. Variables: UNAVAILABLE (a
# reason the toolchain is missing: fail with it), SOURCE_DIR, BINARY_DIR, CLANGXX, LAUNCHER
# (e.g. ccache), TORCH_DIR, GENERATOR, MAKE_PROGRAM, JOBS.
if(UNAVAILABLE)
  message(FATAL_ERROR "The fuzz harnesses cannot be built: ${UNAVAILABLE}")
endif()

set(_args -S ${SOURCE_DIR}/tests/fuzz -B ${BINARY_DIR}
    -DCMAKE_CXX_COMPILER=${CLANGXX} -DLITHE_SOURCE_DIR=${SOURCE_DIR} -DLITHE_BUILD_FUZZERS=ON)
if(NOT EXISTS ${BINARY_DIR}/CMakeCache.txt AND GENERATOR)
  list(APPEND _args -G ${GENERATOR})
  if(MAKE_PROGRAM)
    list(APPEND _args -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
  endif()
endif()
if(LAUNCHER)
  list(APPEND _args -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()
if(TORCH_DIR)
  list(APPEND _args -DTorch_DIR=${TORCH_DIR})
endif()

message(STATUS "configuring: cmake ${_args}")
execute_process(COMMAND ${CMAKE_COMMAND} ${_args} RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "configuring the fuzz harnesses (${SOURCE_DIR}/tests/fuzz) failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BINARY_DIR} --parallel ${JOBS}
                RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "building the fuzz harnesses in ${BINARY_DIR} failed")
endif()
