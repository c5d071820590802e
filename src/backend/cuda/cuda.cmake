# The CUDA kernels (included by the top-level CMakeLists.txt).
#
# KILN_CUDA=AUTO (default) builds them when nvcc is found, ON requires
# nvcc, OFF skips them.  nvcc is looked for as CMAKE_CUDA_COMPILER, then on
# PATH, then in /usr/local/cuda/bin.  Every src/backend/cuda/*.cu is
# compiled as one translation unit into one fatbin (SASS for sm_80, sm_86,
# sm_89, sm_90 and compute_90 PTX that newer cards JIT) which embed.cmake
# turns into a C byte array in the library (backend_cuda_fatbin, src/backend/cuda_kernels.h).
# Nothing links CUDA: the host side loads the driver with dlopen.  ptxas's
# register and spill report is kept as build/cuda/ptxas-report.txt.  The
# fatbin is rebuilt only when a .cu/.cuh file or these scripts change.
set(KILN_CUDA AUTO CACHE STRING "Build the CUDA kernels: AUTO, ON or OFF")
set_property(CACHE KILN_CUDA PROPERTY STRINGS AUTO ON OFF)
set(KILN_CUDA_ARCHS 80 86 89 90)
set(KILN_CUDA_BUILT OFF)
string(TOUPPER "${KILN_CUDA}" kiln_cuda_mode)
if(kiln_cuda_mode MATCHES "^(1|YES|TRUE)$")
  set(kiln_cuda_mode ON)
elseif(kiln_cuda_mode MATCHES "^(0|NO|FALSE)$")
  set(kiln_cuda_mode OFF)
endif()
if(NOT kiln_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "kiln: KILN_CUDA must be AUTO, ON or OFF (got '${KILN_CUDA}')")
endif()
if(kiln_cuda_mode STREQUAL "OFF")
  message(STATUS "CUDA: KILN_CUDA=OFF, GPU kernels not built")
else()
  if(CMAKE_CUDA_COMPILER)
    set(KILN_NVCC ${CMAKE_CUDA_COMPILER})
  else()
    find_program(KILN_NVCC nvcc PATHS /usr/local/cuda/bin)
  endif()
  set(nvcc_version "")
  if(KILN_NVCC)
    execute_process(COMMAND ${KILN_NVCC} --version OUTPUT_VARIABLE nvcc_out RESULT_VARIABLE nvcc_rc ERROR_QUIET)
    if(nvcc_rc EQUAL 0 AND nvcc_out MATCHES "release ([0-9]+\\.[0-9]+)")
      set(nvcc_version ${CMAKE_MATCH_1})
    endif()
  endif()
  if(nvcc_version STREQUAL "")
    if(kiln_cuda_mode STREQUAL "ON")
      message(FATAL_ERROR "kiln: KILN_CUDA=ON but nvcc was not found (set CMAKE_CUDA_COMPILER or put nvcc on PATH)")
    endif()
    message(STATUS "CUDA: nvcc not found, GPU kernels not built")
  else()
    # nvcc that cannot compile here (no supported host compiler, say) is
    # treated as absent; the probe runs once per nvcc path and version
    if(NOT KILN_NVCC_PROBED STREQUAL "${KILN_NVCC} ${nvcc_version}")
      set(probe_dir ${CMAKE_BINARY_DIR}/cuda/probe)
      file(MAKE_DIRECTORY ${probe_dir})
      file(WRITE ${probe_dir}/probe.cu "extern \"C\" __global__ void kiln_probe(float *x) { x[threadIdx.x] = 1.0f; }\n")
      execute_process(COMMAND ${KILN_NVCC} -fatbin -gencode arch=compute_80,code=sm_80 -o probe.fatbin probe.cu
                      WORKING_DIRECTORY ${probe_dir} RESULT_VARIABLE probe_rc OUTPUT_VARIABLE probe_out
                      ERROR_VARIABLE probe_out)
      if(NOT probe_rc EQUAL 0)
        string(STRIP "${probe_out}" probe_out)
        if(kiln_cuda_mode STREQUAL "ON")
          message(FATAL_ERROR "kiln: KILN_CUDA=ON but ${KILN_NVCC} cannot compile a kernel:\n${probe_out}")
        endif()
        message(STATUS "CUDA: nvcc ${nvcc_version} found but it cannot compile a kernel, GPU kernels not built:\n"
                       "${probe_out}")
        set(nvcc_version "")
      else()
        set(KILN_NVCC_PROBED "${KILN_NVCC} ${nvcc_version}" CACHE INTERNAL "nvcc that compiled the probe kernel")
      endif()
    endif()
  endif()
  if(NOT nvcc_version STREQUAL "")
    set(archs "")
    foreach(a ${KILN_CUDA_ARCHS})
      string(APPEND archs " sm_${a}")
    endforeach()
    message(STATUS "CUDA: nvcc ${nvcc_version} found, building kernels for${archs} + PTX")
    set(KILN_CUDA_BUILT ON)
  endif()
endif()

if(KILN_CUDA_BUILT)
  set(cu_dir ${CMAKE_SOURCE_DIR}/src/backend/cuda)
  file(GLOB KILN_CUDA_SOURCES CONFIGURE_DEPENDS ${cu_dir}/*.cu ${cu_dir}/*.cuh ${cu_dir}/*.h)
  set(cu_out ${CMAKE_BINARY_DIR}/cuda)
  add_custom_command(OUTPUT ${cu_out}/kiln_kernels.fatbin ${cu_out}/ptxas-report.txt
    COMMAND ${CMAKE_COMMAND} -DNVCC=${KILN_NVCC} -DSRC=${cu_dir} -DOUT=${cu_out} "-DARCHS=${KILN_CUDA_ARCHS}"
            -P ${cu_dir}/fatbin.cmake
    DEPENDS ${KILN_CUDA_SOURCES} ${cu_dir}/fatbin.cmake
    COMMENT "nvcc: the CUDA kernels into one fatbin"
    VERBATIM)
  add_custom_command(OUTPUT ${cu_out}/kiln_kernels_fatbin.c
    COMMAND ${CMAKE_COMMAND} -DIN=${cu_out}/kiln_kernels.fatbin -DOUT=${cu_out}/kiln_kernels_fatbin.c
            -P ${cu_dir}/embed.cmake
    DEPENDS ${cu_out}/kiln_kernels.fatbin ${cu_dir}/embed.cmake
    COMMENT "Embedding the CUDA fatbin"
    VERBATIM)
  # a target of its own (cmake --build . --target kiln_cuda_kernels builds
  # only the kernels), which the library waits for
  add_custom_target(kiln_cuda_kernels DEPENDS ${cu_out}/kiln_kernels_fatbin.c)
  add_dependencies(kiln_obj kiln_cuda_kernels)
  target_sources(kiln_obj PRIVATE ${cu_out}/kiln_kernels_fatbin.c)
  set_source_files_properties(${CMAKE_SOURCE_DIR}/src/backend/cuda_kernels.c PROPERTIES COMPILE_DEFINITIONS
    BACKEND_CUDA_FATBIN=1)
endif()
