# Warnings as errors on Lithe's own targets only (torch headers are system headers).
function(lithe_set_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror>)
endfunction()
