# Warnings on Lithe's own targets only (torch headers are system headers); errors unless
# LITHE_WERROR is off (a check build with another compiler or libtorch should report, not stop).
# GCC 12 in C++20 mode (libtorch 2.x requires C++20) warns inside libstdc++'s constexpr
# std::string once it is inlined into our code: -Wrestrict, -Wstringop-overflow, -Wstringop-overread
# and -Warray-bounds on `"literal" + std::string` (GCC bug 105329), -Wmaybe-uninitialized in a
# temporary string's destructor (bug 107138); GCC 13 fixed both. They are false positives in the
# standard library's code, not ours, so they are off for GCC before 13 only.
function(lithe_set_warnings target)
  set(_flags -Wall -Wextra)
  if(LITHE_WERROR)
    list(APPEND _flags -Werror)
  endif()
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    list(APPEND _flags -Wno-restrict -Wno-stringop-overflow -Wno-stringop-overread
                       -Wno-array-bounds -Wno-maybe-uninitialized)
  endif()
  target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${_flags}>")
endfunction()
