/* kernels_shim.cc - gpu/kernels.cu and gpu/kernels_graph.cu compiled as
 * host C++ through gpu/shim.h (the sluice_gpu_shim library): the same
 * kernel source, each launch run as loops over blocks and threads on host
 * memory, gk_gemm through ops_gemm. Built on every machine, so that
 * tests/test_gpu_shim.c checks the kernels' index arithmetic and
 * summation order without a GPU. */
#ifndef GK_SHIM
#error "kernels_shim.cc is the shim build: compile it with GK_SHIM defined (gpu/CMakeLists.txt does)"
#endif
#include "gpu/kernels.cu"
#include "gpu/kernels_graph.cu"
