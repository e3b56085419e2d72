/** \file RuntimeSettings.h
 * The settings of the process-wide parts of the runtime (the OpenCL and CUDA drivers, which are
 * opened once, NVRTC, the JIT's compiler and cache): data the driver reads from the environment in
 * one place (driver/Environment.cpp) and installs before the first compilation. The runtime itself
 * never reads the environment.
 */
#pragma once

#include <string>

namespace rf {

struct RuntimeSettings {
    std::string cxx;              ///< the C++ compiler command for the JIT (empty: "c++"); from $CXX
    std::string cache_dir;        ///< JIT and cubin cache; from REDFUSE_CACHE_DIR, else $XDG_CACHE_HOME/redfuse, else ~/.cache/redfuse
    std::string cache_dir_error;  ///< why there is no cache directory (none of those is set)
    std::string tmpdir = "/tmp";  ///< where a failed NVRTC compile's source is saved; from $TMPDIR
    std::string cuda_home;        ///< a CUDA toolkit (NVRTC, headers); from $CUDA_HOME
    std::string libcuda;          ///< the CUDA driver library (empty: libcuda.so.1); REDFUSE_LIBCUDA
    std::string cuda_device;      ///< the CUDA device ordinal (empty: 0); REDFUSE_CUDA_DEVICE
    std::string opencl_library;   ///< the OpenCL ICD loader (empty: libOpenCL.so.1); REDFUSE_OPENCL_LIBRARY
    std::string opencl_device;    ///< a substring of the OpenCL device's name (empty: a GPU, else the first); REDFUSE_OPENCL_DEVICE
    std::string gpu_source_dump;      ///< write each generated GPU source here before building it; REDFUSE_GPU_SOURCE_DUMP
    std::string gpu_source_override;  ///< build this file's text instead (printf debugging); REDFUSE_GPU_SOURCE_OVERRIDE
};

/** The settings in force (the defaults above until install_runtime_settings is called). */
const RuntimeSettings &runtime_settings();

/** Installs `s` for the whole process. The device libraries read their part when first opened, so
 *  install before the first compilation; later changes to those parts have no effect. */
void install_runtime_settings(const RuntimeSettings &s);

}  // namespace rf
