# gpu/device.cmake - the launcher's GPU module (gpu/device.h): finding the
# GPUs, the rank -> device plan and the NCCL root, in library
# sluice_device. Included from the top-level CMakeLists.txt after the CUDA
# check. With CUDA (SLUICE_HAVE_CUDA) it links the CUDA runtime, and NCCL
# when found; without, device_nocuda.c says the build has none. Targets
# that link it see SLUICE_HAVE_CUDA and SLUICE_HAVE_NCCL as 0 or 1.
set(SLUICE_HAVE_NCCL OFF)
if(SLUICE_HAVE_CUDA)
  find_package(CUDAToolkit REQUIRED)
  # NCCL: the toolkit's folders, NCCL_ROOT / $NCCL_HOME, CMAKE_PREFIX_PATH
  # (a pip wheel's nvidia/nccl holds include/ and lib/libnccl.so.2 only).
  find_path(SLUICE_NCCL_INCLUDE_DIR nccl.h
    HINTS ${NCCL_ROOT} $ENV{NCCL_HOME} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
  find_library(SLUICE_NCCL_LIBRARY NAMES nccl libnccl.so.2
    HINTS ${NCCL_ROOT} $ENV{NCCL_HOME} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
  if(SLUICE_NCCL_INCLUDE_DIR AND SLUICE_NCCL_LIBRARY)
    file(STRINGS ${SLUICE_NCCL_INCLUDE_DIR}/nccl.h _nccl_v REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
    string(REGEX REPLACE "[^0-9;]" "" _nccl_v "${_nccl_v}")
    string(REPLACE ";" "." _nccl_v "${_nccl_v}")
    set(SLUICE_HAVE_NCCL ON)
    message(STATUS "dependency nccl: found ${_nccl_v} (${SLUICE_NCCL_LIBRARY})")
  else()
    message(STATUS "dependency nccl: not found (runs of more than one GPU need it; set NCCL_ROOT)")
  endif()
  add_library(sluice_device STATIC ${CMAKE_CURRENT_LIST_DIR}/device.c ${CMAKE_CURRENT_LIST_DIR}/device_cuda.c)
  target_link_libraries(sluice_device PUBLIC sluice_core PRIVATE CUDA::cudart)
  if(SLUICE_HAVE_NCCL)
    target_include_directories(sluice_device PRIVATE ${SLUICE_NCCL_INCLUDE_DIR})
    target_link_libraries(sluice_device PRIVATE ${SLUICE_NCCL_LIBRARY})
  endif()
else()
  add_library(sluice_device STATIC ${CMAKE_CURRENT_LIST_DIR}/device.c ${CMAKE_CURRENT_LIST_DIR}/device_nocuda.c)
  target_link_libraries(sluice_device PUBLIC sluice_core)
endif()
if(SLUICE_HAVE_CUDA)
  set(_cuda 1)
else()
  set(_cuda 0)
endif()
if(SLUICE_HAVE_NCCL)
  set(_nccl 1)
else()
  set(_nccl 0)
endif()
target_compile_definitions(sluice_device PUBLIC SLUICE_HAVE_CUDA=${_cuda} SLUICE_HAVE_NCCL=${_nccl})
