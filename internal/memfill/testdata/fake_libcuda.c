// fake_libcuda.c stands in for libcuda.so.1 in the cuda backend's tests:
// the driver calls the filler makes, with their C signatures, on a device
// of $FAKE_CUDA_TOTAL_MIB (default 1024). Like the real driver it keeps the
// current context per thread: memory calls fail with
// CUDA_ERROR_INVALID_CONTEXT on any thread but the one that made the
// primary context current.
//
//   gcc -shared -fPIC -fvisibility=hidden -o libcuda.so.1 fake_libcuda.c
#define _GNU_SOURCE
#include <stddef.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_CONTEXT = 201,
};

#define MAX_ALLOCS 4096

static int initialized;
static int retained;
static CUcontext primary = (CUcontext)0xc0de;
static __thread CUcontext current;
static size_t total = (size_t)1024 << 20;
static size_t used;
static CUdeviceptr next = 0x100000000ULL;
static struct { CUdeviceptr ptr; size_t size; } allocs[MAX_ALLOCS];

EXPORT CUresult cuInit(unsigned int flags) {
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	const char *mib = getenv("FAKE_CUDA_TOTAL_MIB");
	if (mib)
		total = (size_t)strtoull(mib, NULL, 10) << 20;
	initialized = 1;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *dev, int ordinal) {
	if (!initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (ordinal != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	*dev = 0;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) {
	if (dev != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	retained++;
	*ctx = primary;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
	if (dev != 0 || retained == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	retained--;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
	current = ctx;
	return CUDA_SUCCESS;
}

static CUresult check_context(void) {
	return current == primary && retained > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t size) {
	CUresult r = check_context();
	if (r != CUDA_SUCCESS)
		return r;
	if (size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (size > total - used)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (int i = 0; i < MAX_ALLOCS; i++) {
		if (allocs[i].ptr == 0) {
			allocs[i].ptr = next;
			allocs[i].size = size;
			next += size;
			used += size;
			*ptr = allocs[i].ptr;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_OUT_OF_MEMORY;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr) {
	CUresult r = check_context();
	if (r != CUDA_SUCCESS)
		return r;
	for (int i = 0; i < MAX_ALLOCS; i++) {
		if (ptr != 0 && allocs[i].ptr == ptr) {
			used -= allocs[i].size;
			allocs[i].ptr = 0;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *tot) {
	CUresult r = check_context();
	if (r != CUDA_SUCCESS)
		return r;
	*free = total - used;
	*tot = total;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorName(CUresult r, const char **name) {
	switch (r) {
	case CUDA_SUCCESS: *name = "CUDA_SUCCESS"; break;
	case CUDA_ERROR_INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; break;
	case CUDA_ERROR_OUT_OF_MEMORY: *name = "CUDA_ERROR_OUT_OF_MEMORY"; break;
	case CUDA_ERROR_NOT_INITIALIZED: *name = "CUDA_ERROR_NOT_INITIALIZED"; break;
	case CUDA_ERROR_INVALID_DEVICE: *name = "CUDA_ERROR_INVALID_DEVICE"; break;
	case CUDA_ERROR_INVALID_CONTEXT: *name = "CUDA_ERROR_INVALID_CONTEXT"; break;
	default: return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}
