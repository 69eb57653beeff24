// The translation unit that precompiles libtorch's headers for the whole build
// (cmake/LithePch.cmake); it defines nothing.
