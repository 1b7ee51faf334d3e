# The CUDA backend (runtime/backend_cuda.cu, NCCL in runtime/comm_nccl.c), its
# GPU tests (tests/gpu/*_gputest.c, ctest label "gpu") and GPU benchmarks
# (bench/cuda/*.c). Included once from CMakeLists.txt after the pt_runtime
# target exists. Switched on by PT_CUDA (default ON) when FindCUDAToolkit
# finds the toolkit; otherwise nothing here changes the build.
set(PT_HAVE_CUDA OFF)
set(PT_HAVE_NCCL OFF)
if(NOT PT_CUDA)
  message(STATUS "pipetop: CUDA backend off (-DPT_CUDA=OFF)")
  return()
endif()
find_package(CUDAToolkit QUIET)
if(NOT CUDAToolkit_FOUND)
  message(STATUS "pipetop: CUDA toolkit not found; GPU backend off")
  return()
endif()

if(NOT DEFINED CMAKE_CUDA_COMPILER)
  set(CMAKE_CUDA_COMPILER ${CUDAToolkit_NVCC_EXECUTABLE})
endif()
# sm_90 is the H100/H200; override with -DCMAKE_CUDA_ARCHITECTURES="80;90".
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 17)
# Programs and tests stay C-linked (gcc/clang with the sanitizer flags): the
# CUDA objects inside pt_cuda need only the libraries it links.
set(CMAKE_CUDA_LINKER_PREFERENCE_PROPAGATES OFF)
set(PT_HAVE_CUDA ON)
# Targets made before enable_language(CUDA) have no architecture list; they
# hold no CUDA code.
set_property(TARGET pt_protocol pt_planner pt_runtime PROPERTY CUDA_ARCHITECTURES OFF)

find_path(PT_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
find_library(PT_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
if(PT_NCCL_INCLUDE_DIR AND PT_NCCL_LIBRARY)
  set(PT_HAVE_NCCL ON)
  add_library(pt_nccl_lib UNKNOWN IMPORTED)
  set_target_properties(pt_nccl_lib PROPERTIES IMPORTED_LOCATION ${PT_NCCL_LIBRARY}
                        INTERFACE_INCLUDE_DIRECTORIES ${PT_NCCL_INCLUDE_DIR})
endif()
message(STATUS "pipetop: CUDA toolkit ${CUDAToolkit_VERSION} found; CUDA backend on "
               "(sm ${CMAKE_CUDA_ARCHITECTURES}), NCCL ${PT_HAVE_NCCL}")

# The directory's options (-Wall, -fsanitize, ...) are host-compiler flags
# nvcc does not take; the .cu file gets its own, passed through -Xcompiler.
add_library(pt_cuda STATIC ${CMAKE_SOURCE_DIR}/runtime/backend_cuda.cu)
set_property(TARGET pt_cuda PROPERTY COMPILE_OPTIONS "")
target_compile_options(pt_cuda PRIVATE -O2 -Xcompiler=-Wall,-Wextra)
if(PT_WERROR)
  target_compile_options(pt_cuda PRIVATE -Werror=all-warnings -Xcompiler=-Werror)
endif()
target_include_directories(pt_cuda PRIVATE ${CMAKE_SOURCE_DIR})
target_link_libraries(pt_cuda PUBLIC pt_protocol CUDA::cudart CUDA::cublas CUDA::cublasLt)

target_compile_definitions(pt_runtime PUBLIC PT_HAVE_CUDA=1)
target_link_libraries(pt_runtime PUBLIC pt_cuda)
if(PT_HAVE_NCCL)
  target_compile_definitions(pt_runtime PUBLIC PT_HAVE_NCCL=1)
  target_link_libraries(pt_runtime PUBLIC pt_nccl_lib)
endif()

# GPU tests: exit 77 (and print "no GPU visible") when no device is visible,
# which ctest reports as skipped, never as passed.
set(PT_GPU_SKIP_CODE 77)
file(GLOB PT_GPU_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/gpu/*_gputest.c)
foreach(src ${PT_GPU_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE pt_tui)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS gpu TIMEOUT 600 SKIP_RETURN_CODE ${PT_GPU_SKIP_CODE}
    ENVIRONMENT "PT_SOURCE_DIR=${CMAKE_SOURCE_DIR};PT_BUILD_DIR=${CMAKE_BINARY_DIR};OPENBLAS_NUM_THREADS=1"
    WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
endforeach()

# GPU benchmarks print figures (bench/cuda/*.c, host code calling cuBLAS).
file(GLOB PT_GPU_BENCH CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/bench/cuda/*.c)
foreach(src ${PT_GPU_BENCH})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE pt_tui CUDA::cudart CUDA::cublas)
endforeach()

# Dry runs of the GPU tests: the same code with a copy of the CPU backend in
# place of the GPU (-DPT_GPU_DRY_RUN), so scripts/gpu-check.sh --dry-run can
# exercise the test logic on a machine without one. Built, never registered.
foreach(src ${PT_GPU_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name}_dryrun EXCLUDE_FROM_ALL ${src})
  target_compile_definitions(${name}_dryrun PRIVATE PT_GPU_DRY_RUN=1)
  target_link_libraries(${name}_dryrun PRIVATE pt_tui)
endforeach()
