# The CUDA module (runtime/cuda/: the backend and NCCL, in libpt_cuda.so), its
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
# Programs and tests stay C-linked (gcc/clang with the sanitizer flags) and
# link no CUDA library: only the module does.
set(CMAKE_CUDA_LINKER_PREFERENCE_PROPAGATES OFF)
set(PT_HAVE_CUDA ON)
# Targets made before enable_language(CUDA) have no architecture list; they
# hold no CUDA code.
set_property(TARGET pt_protocol pt_planner pt_runtime PROPERTY CUDA_ARCHITECTURES OFF)

# NCCL: only its header is needed to build. The module does not link
# libnccl.so.2; it opens it with dlopen the first time NCCL is asked for
# (runtime/cuda/comm_nccl_cuda.c), so the CUDA backend loads without it.
find_path(PT_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
if(PT_NCCL_INCLUDE_DIR)
  set(PT_HAVE_NCCL ON)
endif()
message(STATUS "pipetop: CUDA toolkit ${CUDAToolkit_VERSION} found; CUDA backend on "
               "(sm ${CMAKE_CUDA_ARCHITECTURES}), NCCL ${PT_HAVE_NCCL} (libnccl.so.2 opened at "
               "run time)")

# The CUDA module (runtime/cuda_module.h): the backend (runtime/cuda/
# backend_cuda.cu) and NCCL (runtime/cuda/comm_nccl_cuda.c) in libpt_cuda.so,
# which alone links the CUDA libraries. The core (runtime/backend_cuda_load.c)
# opens it with dlopen when a CUDA device is first asked for, so programs and
# tests neither link nor load libcudart, libcublas(Lt) or libnccl until then:
# a pipetop built here starts on a machine without them, and valgrind does not
# read their symbols in every test (12-14 s of CPU each, docs/benchmarks.md).
# It holds its own copies of protocol/error.c and protocol/clock.c and nothing else of the core
# (-z defs below checks that it needs no symbol of the program), and exports
# one symbol: the rest is hidden, so none of it stands in for the core's own.
set(PT_CUDA_MODULE_SRC ${CMAKE_SOURCE_DIR}/runtime/cuda/backend_cuda.cu
    ${CMAKE_SOURCE_DIR}/runtime/cuda/module.c ${CMAKE_SOURCE_DIR}/protocol/error.c
    ${CMAKE_SOURCE_DIR}/protocol/clock.c)
if(PT_HAVE_NCCL)
  list(APPEND PT_CUDA_MODULE_SRC ${CMAKE_SOURCE_DIR}/runtime/cuda/comm_nccl_cuda.c)
endif()
add_library(pt_cuda_module MODULE ${PT_CUDA_MODULE_SRC})
set_target_properties(pt_cuda_module PROPERTIES OUTPUT_NAME pt_cuda
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}
  C_VISIBILITY_PRESET hidden CUDA_VISIBILITY_PRESET hidden
  CUDA_RUNTIME_LIBRARY Shared
  # the toolkit's library folder stays in the installed module's RUNPATH
  INSTALL_RPATH_USE_LINK_PATH ON)
# The directory's options (-Wall, -fsanitize, ...) are host-compiler flags
# nvcc does not take; the .cu file gets its own, passed through -Xcompiler.
set_property(TARGET pt_cuda_module PROPERTY COMPILE_OPTIONS "")
target_compile_options(pt_cuda_module PRIVATE -O2
  $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
if(PT_WERROR)
  target_compile_options(pt_cuda_module PRIVATE $<$<COMPILE_LANGUAGE:C>:-Werror>
    $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Werror>)
endif()
pt_include_set(pt_cuda_module ${PT_INC_runtime})
target_link_libraries(pt_cuda_module PRIVATE CUDA::cudart CUDA::cublas CUDA::cublasLt
                      Threads::Threads ${CMAKE_DL_LIBS})
if(PT_HAVE_NCCL)
  target_compile_definitions(pt_cuda_module PRIVATE PT_HAVE_NCCL=1)
  target_include_directories(pt_cuda_module PRIVATE ${PT_NCCL_INCLUDE_DIR})
endif()
# -z defs: every symbol the module needs comes from a library it links (not
# with the sanitizers, whose run-time symbols only the program provides).
if(NOT PT_SANITIZE AND NOT PT_FUZZ)
  target_link_options(pt_cuda_module PRIVATE -Wl,-z,defs)
endif()
install(TARGETS pt_cuda_module LIBRARY DESTINATION ${PT_CUDA_MODULE_SUBDIR})

# The core only needs to know that a module was built beside it.
target_compile_definitions(pt_runtime PRIVATE PT_HAVE_CUDA=1)

# GPU tests: exit 77 (and print why: "no GPU visible", or CUDA's own words)
# when no device is visible, which ctest reports as skipped, never as passed.
# Each is bounded at PT_GPU_TEST_TIMEOUT seconds (scripts/gpu-check.sh runs
# them with its own, shorter, per-step bounds): a hang costs minutes of a lent
# GPU, not the whole loan.
set(PT_GPU_SKIP_CODE 77)
set(PT_GPU_TEST_TIMEOUT 240)
file(GLOB PT_GPU_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/gpu/*_gputest.c)
foreach(src ${PT_GPU_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE pt_tui)
  add_dependencies(${name} pt_cuda_module)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS gpu TIMEOUT ${PT_GPU_TEST_TIMEOUT} SKIP_RETURN_CODE ${PT_GPU_SKIP_CODE}
    ENVIRONMENT "PT_SOURCE_DIR=${CMAKE_SOURCE_DIR};PT_BUILD_DIR=${CMAKE_BINARY_DIR};OPENBLAS_NUM_THREADS=1"
    WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
endforeach()

# GPU benchmarks print figures (bench/cuda/*.c, host code calling cuBLAS).
file(GLOB PT_GPU_BENCH CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/bench/cuda/*.c)
foreach(src ${PT_GPU_BENCH})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_link_libraries(${name} PRIVATE pt_tui CUDA::cudart CUDA::cublas)
  add_dependencies(${name} pt_cuda_module)
endforeach()

# Dry runs of the GPU tests: the same code with a CPU stand-in in place of
# the GPU (-DPT_GPU_DRY_RUN), so scripts/gpu-check.sh --dry-run can exercise
# the test logic on a machine without one, and tests/gpu/gpu_dryrun_faults.sh
# shows each test failing when the stand-in computes something wrong.
foreach(src ${PT_GPU_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name}_dryrun ${src})
  target_compile_definitions(${name}_dryrun PRIVATE PT_GPU_DRY_RUN=1)
  target_link_libraries(${name}_dryrun PRIVATE pt_tui)
endforeach()
add_test(NAME gpu_dryrun_faults_test COMMAND bash ${CMAKE_SOURCE_DIR}/tests/gpu/gpu_dryrun_faults.sh)
set_tests_properties(gpu_dryrun_faults_test PROPERTIES LABELS integration TIMEOUT 300
  ENVIRONMENT "PT_SOURCE_DIR=${CMAKE_SOURCE_DIR};PT_BUILD_DIR=${CMAKE_BINARY_DIR};OPENBLAS_NUM_THREADS=1")

# tests/cuda_module_test.sh: a module "of another build" (the wrong ABI) that
# records being loaded (tests/runtime/cuda_module_stale.c).
add_library(pt_cuda_stale_test MODULE ${CMAKE_SOURCE_DIR}/tests/runtime/cuda_module_stale.c)
target_include_directories(pt_cuda_stale_test PRIVATE ${CMAKE_SOURCE_DIR})
set_target_properties(pt_cuda_stale_test PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})

# tests/gpu/cuda_standin_module.c: a CUDA module for agent processes on a
# machine without a GPU (a copy of the CPU backend per stand-in device, NCCL
# through files), which tests/gpu/gpu_run.sh names with
# $PIPETOP_CUDA_MODULE so that `pipetop run` starts GPU agents end to end.
add_library(pt_cuda_standin MODULE ${CMAKE_SOURCE_DIR}/tests/gpu/cuda_standin_module.c
  ${CMAKE_SOURCE_DIR}/runtime/backend_cpu.c ${CMAKE_SOURCE_DIR}/runtime/attention_tiled.c
  ${CMAKE_SOURCE_DIR}/runtime/blas_core.c
  ${CMAKE_SOURCE_DIR}/runtime/gemm_small.c ${CMAKE_SOURCE_DIR}/protocol/error.c)
pt_include_set(pt_cuda_standin ${PT_INC_runtime})
set_target_properties(pt_cuda_standin PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}
  C_VISIBILITY_PRESET hidden)
target_link_libraries(pt_cuda_standin PRIVATE PkgConfig::OPENBLAS Threads::Threads m)
add_test(NAME gpu_run_test COMMAND bash ${CMAKE_SOURCE_DIR}/tests/watchdog.sh ${CMAKE_SOURCE_DIR}/tests/gpu/gpu_run.sh)
set_tests_properties(gpu_run_test PROPERTIES LABELS integration TIMEOUT 120 ENVIRONMENT
  "PT_SOURCE_DIR=${CMAKE_SOURCE_DIR};PT_BUILD_DIR=${CMAKE_BINARY_DIR};PIPETOP_CUDA_MODULE=$<TARGET_FILE:pt_cuda_standin>;PT_TEST_WATCHDOG_S=108")

# tests/gpu/cuda_fault.c: the real module on a fault-injecting stand-in for
# the CUDA runtime, cuBLAS and NCCL (tests/gpu/cuda_fake.h), which the test
# links so that its definitions come first in the symbol lookup of the
# dlopen'ed module; NCCL is the same library, opened by path. They need the
# toolkit's headers to build and no GPU to run; labelled integration, as
# tests/cuda_module_test.sh is, because they load the CUDA libraries
# (scripts/memcheck.sh runs the unit tests with no CUDA module to load).
add_library(pt_cuda_fake SHARED ${CMAKE_SOURCE_DIR}/tests/gpu/cuda_fake.c)
target_include_directories(pt_cuda_fake PRIVATE ${CMAKE_SOURCE_DIR} ${CUDAToolkit_INCLUDE_DIRS}
                           ${PT_NCCL_INCLUDE_DIR})
set_target_properties(pt_cuda_fake PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
add_executable(cuda_fault_test ${CMAKE_SOURCE_DIR}/tests/gpu/cuda_fault.c)
target_link_libraries(cuda_fault_test PRIVATE pt_runtime pt_cuda_fake)
target_include_directories(cuda_fault_test PRIVATE ${CMAKE_SOURCE_DIR}) # a test: above every layer
add_dependencies(cuda_fault_test pt_cuda_module)
set(PT_FAULT_ENV "PT_SOURCE_DIR=${CMAKE_SOURCE_DIR};PT_BUILD_DIR=${CMAKE_BINARY_DIR};PIPETOP_CUDA_MODULE=$<TARGET_FILE:pt_cuda_module>")
add_test(NAME cuda_fault_test COMMAND cuda_fault_test)
add_test(NAME cuda_fault_nonccl_test COMMAND cuda_fault_test nccl_missing)
set_tests_properties(cuda_fault_test PROPERTIES LABELS integration TIMEOUT 120 ENVIRONMENT
  "${PT_FAULT_ENV};PIPETOP_NCCL_LIBRARY=$<TARGET_FILE:pt_cuda_fake>")
set_tests_properties(cuda_fault_nonccl_test PROPERTIES LABELS integration TIMEOUT 120 ENVIRONMENT
  "${PT_FAULT_ENV};PIPETOP_NCCL_LIBRARY=${CMAKE_BINARY_DIR}/no-such-folder/libnccl.so.2")
