# Included from this folder's CMakeLists.txt when it is part of Lithe's main build. Registers:
#   fuzz_build            configures and builds the standalone fuzz project (this folder) with
#                         clang into ${CMAKE_BINARY_DIR}/fuzz (fixture "fuzz" setup)
#   fuzz_smoke_<harness>  runs that harness for LITHE_FUZZ_SMOKE_SECONDS over a scratch copy of
#                         its seed corpus; fails on any crash, sanitizer report or timeout
# Nothing here is compiled by the main build's compiler. Without clang or libFuzzer the tests
# are still registered and fuzz_build fails with the reason: CI installs both
# (scripts/install-deps.sh), so a silent skip would hide a regression.
include(${CMAKE_CURRENT_LIST_DIR}/harnesses.cmake)

option(LITHE_BUILD_FUZZERS
       "Register the CTest tests that build the libFuzzer harnesses (tests/fuzz) with clang and smoke-run them"
       ON)
if(NOT LITHE_BUILD_FUZZERS)
  return()
endif()
set(LITHE_FUZZ_SMOKE_SECONDS 10 CACHE STRING "Seconds each fuzz_smoke_<harness> test fuzzes")
set(LITHE_FUZZ_BUILD_JOBS 2 CACHE STRING "Parallel jobs of the fuzz_build test")

find_program(LITHE_FUZZ_CLANGXX NAMES clang++ clang++-14 DOC "clang++ for the libFuzzer harnesses")
find_program(LITHE_FUZZ_BASH bash)
set(_lithe_fuzz_unavailable "")
if(NOT LITHE_FUZZ_CLANGXX)
  set(_lithe_fuzz_unavailable "clang++ not found (install clang and libclang-rt-14-dev; scripts/install-deps.sh does)")
elseif(NOT LITHE_FUZZ_BASH)
  set(_lithe_fuzz_unavailable "bash not found (the smoke tests run tests/fuzz/run_harness.sh)")
else()
  # libFuzzer and the sanitizer runtimes are separate Debian packages from clang's: look for
  # the archives the -fsanitize=fuzzer,address,undefined link needs.
  execute_process(COMMAND ${LITHE_FUZZ_CLANGXX} -print-runtime-dir
                  OUTPUT_VARIABLE _lithe_fuzz_rt_dir OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE _lithe_fuzz_rc ERROR_QUIET)
  foreach(_runtime fuzzer asan ubsan_standalone)
    set(_archive "${_lithe_fuzz_rt_dir}/libclang_rt.${_runtime}-${CMAKE_SYSTEM_PROCESSOR}.a")
    if(NOT _lithe_fuzz_rc EQUAL 0 OR NOT EXISTS "${_archive}")
      set(_lithe_fuzz_unavailable "${_archive} not found: ${LITHE_FUZZ_CLANGXX} has no libFuzzer/sanitizer runtime (install libclang-rt-14-dev; scripts/install-deps.sh does)")
      break()
    endif()
  endforeach()
endif()
if(_lithe_fuzz_unavailable)
  message(WARNING "Fuzz harnesses cannot be built, the fuzz_build test will fail: ${_lithe_fuzz_unavailable}")
endif()

set(_lithe_fuzz_binary_dir ${CMAKE_BINARY_DIR}/fuzz)
# ccache alone (the main build's launcher is a list that sets ccache's PCH sloppiness).
set(_lithe_fuzz_launcher "")
if(LITHE_CCACHE)
  set(_lithe_fuzz_launcher "${LITHE_CCACHE}")
endif()
add_test(NAME fuzz_build
  COMMAND ${CMAKE_COMMAND}
          "-DUNAVAILABLE=${_lithe_fuzz_unavailable}"
          "-DSOURCE_DIR=${PROJECT_SOURCE_DIR}"
          "-DBINARY_DIR=${_lithe_fuzz_binary_dir}"
          "-DCLANGXX=${LITHE_FUZZ_CLANGXX}"
          "-DLAUNCHER=${_lithe_fuzz_launcher}"
          "-DTORCH_DIR=${Torch_DIR}"
          "-DGENERATOR=${CMAKE_GENERATOR}"
          "-DMAKE_PROGRAM=${CMAKE_MAKE_PROGRAM}"
          "-DJOBS=${LITHE_FUZZ_BUILD_JOBS}"
          -P ${CMAKE_CURRENT_LIST_DIR}/ctest_build.cmake)
set_tests_properties(fuzz_build PROPERTIES
  FIXTURES_SETUP fuzz LABELS "fuzz;slow" TIMEOUT 3600 RUN_SERIAL ON)

foreach(_name IN LISTS LITHE_FUZZ_HARNESSES)
  add_test(NAME fuzz_smoke_${_name}
    COMMAND ${LITHE_FUZZ_BASH} ${CMAKE_CURRENT_LIST_DIR}/run_harness.sh ${_name}
            ${_lithe_fuzz_binary_dir}/fuzz_${_name} ${CMAKE_CURRENT_LIST_DIR}/corpus/${_name}
            ${LITHE_FUZZ_SMOKE_SECONDS} ${_lithe_fuzz_binary_dir}/smoke)
  # A fixed seed keeps CI smoke runs reproducible (scripts/fuzz.sh uses a fresh seed each run).
  set_tests_properties(fuzz_smoke_${_name} PROPERTIES
    FIXTURES_REQUIRED fuzz LABELS "fuzz" TIMEOUT 300 ENVIRONMENT "LITHE_FUZZ_FLAGS=-seed=1")
endforeach()
