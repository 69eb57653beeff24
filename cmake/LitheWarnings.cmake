# Warnings on Lithe's own targets only (torch headers are system headers); errors unless
# LITHE_WERROR is off (a check build with another compiler or libtorch should report, not stop).
function(lithe_set_warnings target)
  if(LITHE_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror>)
  else()
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>)
  endif()
endfunction()
