# The CUDA C files of stages/ (included from stages/CMakeLists.txt): the
# feature rows of a GPU rank exported and imported with CUDA IPC
# (featbuf_cuda.c) and the CUDA row sink (sink_cuda.c). They call the CUDA
# runtime API, which is plain C, so the C compiler builds them against
# CUDA::cudart. Built only when the top level found CUDA (SLUICE_HAVE_CUDA);
# without it, row_sink_pick says so and extractor_use_device answers
# -ENOTSUP. SLUICE_HAVE_CUDA is also a compile definition of sluice_stages
# and everything linking it, so tests know what to expect.
if(SLUICE_HAVE_CUDA)
  find_package(CUDAToolkit REQUIRED)
  message(STATUS "stages: the CUDA row sink and feature rows on the device are built (CUDA runtime ${CUDAToolkit_VERSION})")
  target_sources(sluice_stages PRIVATE featbuf_cuda.c sink_cuda.c)
  target_link_libraries(sluice_stages PUBLIC CUDA::cudart)
  target_compile_definitions(sluice_stages PUBLIC SLUICE_HAVE_CUDA=1)
endif()
