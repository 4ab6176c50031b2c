// FP8T_HD marks scalar functions shared verbatim by CPU code and CUDA kernels, so both compute the
// same bits (the quantization kernels and the CPU reference call the same encoder).
#pragma once
#if defined(__CUDACC__)
#define FP8T_HD __host__ __device__ __forceinline__
#else
#define FP8T_HD inline
#endif
