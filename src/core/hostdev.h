/* hostdev.h — ZT_HD marks a small inline function that both compilers build: plain
 * C for the host, and `__host__ __device__` under nvcc, so that a rule the CPU and
 * the CUDA kernels must share bit for bit (a dtype conversion, vmath.h's exp) has one
 * body.  Such functions use only integer and IEEE float operations and memcpy of a
 * scalar, which both compilers turn into register moves. */
#ifndef ZT_HOSTDEV_H
#define ZT_HOSTDEV_H

#ifdef __CUDACC__
#define ZT_HD __host__ __device__
#else
#define ZT_HD
#endif

#endif
