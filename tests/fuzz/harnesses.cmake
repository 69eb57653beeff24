# The libFuzzer harnesses: binary fuzz_<name> built from fuzz_<name>.cpp, seeds in
# corpus/<name>/, optional dictionary dict/<name>.dict. Read by this folder's standalone project
# (which builds them) and by the main build's CTest registration (one smoke test each).
set(LITHE_FUZZ_HARNESSES config masks tensor_file idx archive)
