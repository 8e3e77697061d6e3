// fake_libcuda.c is a stand-in for libcuda.so.1 in tests: it exports the
// driver API's checkpoint entry points with their exact C signatures and
// serves each call by running the fake cuda-checkpoint tool
// ($GPUSCHED_FAKE_CUDA_CHECKPOINT, run with that path as argv[0]), mapping
// its output back to CUresults: a failure's CUresult is read from the
// cuGetErrorString text the tool quotes at the end of its error line, or,
// for a text not in the table, from its exit status, which is the CUresult
// cut to 8 bits.
//
// Knobs: FAKE_LIBCUDA_VERSION (cuDriverGetVersion, default 13000: CUDA
// 13.0, driver 580, the first with restore GPU pairs),
// FAKE_LIBCUDA_INIT_ERROR (a CUresult cuInit returns). Built with
// -DNO_CHECKPOINT it lacks the cuCheckpointProcess* symbols, like a driver
// older than 570.
//
//   gcc -shared -fPIC -fvisibility=hidden -o libcuda.so.1 fake_libcuda.c
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

extern char **environ;

typedef int CUresult;

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_OPERATING_SYSTEM = 304,
	CUDA_ERROR_ILLEGAL_STATE = 401,
	CUDA_ERROR_NOT_READY = 600,
	CUDA_ERROR_LAUNCH_FAILED = 719,
	CUDA_ERROR_NOT_PERMITTED = 800,
	CUDA_ERROR_NOT_SUPPORTED = 801,
	CUDA_ERROR_TIMEOUT = 909,
	CUDA_ERROR_UNKNOWN = 999,
};

typedef enum CUprocessState_enum {
	CU_PROCESS_STATE_RUNNING = 0,
	CU_PROCESS_STATE_LOCKED = 1,
	CU_PROCESS_STATE_CHECKPOINTED = 2,
	CU_PROCESS_STATE_FAILED = 3,
} CUprocessState;

typedef struct CUuuid_st {
	char bytes[16];
} CUuuid;

typedef struct CUcheckpointLockArgs_st {
	unsigned int timeoutMs;
	unsigned int reserved0;
	unsigned long long reserved1[7];
} CUcheckpointLockArgs;

typedef struct CUcheckpointCheckpointArgs_st {
	unsigned long long reserved[8];
} CUcheckpointCheckpointArgs;

typedef struct CUcheckpointGpuPair_st {
	CUuuid oldUuid;
	CUuuid newUuid;
} CUcheckpointGpuPair;

typedef struct CUcheckpointRestoreArgs_st {
	CUcheckpointGpuPair *gpuPairs;
	unsigned int gpuPairsCount;
	char reserved[44];
	unsigned long long reserved1;
} CUcheckpointRestoreArgs;

typedef struct CUcheckpointUnlockArgs_st {
	unsigned long long reserved[8];
} CUcheckpointUnlockArgs;

_Static_assert(sizeof(CUcheckpointLockArgs) == 64, "lock args");
_Static_assert(sizeof(CUcheckpointCheckpointArgs) == 64, "checkpoint args");
_Static_assert(sizeof(CUcheckpointRestoreArgs) == 64, "restore args");
_Static_assert(offsetof(CUcheckpointRestoreArgs, gpuPairsCount) == 8, "restore args");
_Static_assert(offsetof(CUcheckpointRestoreArgs, reserved1) == 56, "restore args");
_Static_assert(sizeof(CUcheckpointUnlockArgs) == 64, "unlock args");
_Static_assert(sizeof(CUcheckpointGpuPair) == 32, "gpu pair");

// names gives each CUresult's name and its cuGetErrorString text, the one
// cuda-checkpoint quotes (the fake tool's cuerrors.go gives the sources).
static const struct {
	CUresult code;
	const char *name;
	const char *text;
} names[] = {
	{CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
	{CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	{CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	{CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	{CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	{CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	{CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
	{CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
	{CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
	{CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
	{CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
	{CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
	{CUDA_ERROR_TIMEOUT, "CUDA_ERROR_TIMEOUT", "the operation timed out"},
	{CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static volatile int initialized;

EXPORT CUresult cuInit(unsigned int flags) {
	const char *e = getenv("FAKE_LIBCUDA_INIT_ERROR");
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (e != NULL && *e != '\0')
		return atoi(e);
	if (getenv("GPUSCHED_FAKE_CUDA_CHECKPOINT") == NULL)
		return CUDA_ERROR_NO_DEVICE;
	initialized = 1;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int *version) {
	const char *e = getenv("FAKE_LIBCUDA_VERSION");
	if (version == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*version = (e != NULL && *e != '\0') ? atoi(e) : 13000;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr) {
	if (pStr == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (names[i].code == error) {
			*pStr = names[i].name;
			return CUDA_SUCCESS;
		}
	}
	*pStr = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

#ifndef NO_CHECKPOINT

// result maps a failed run of the tool back to its CUresult: the text
// quoted at the end of its error line (`Could not lock on process ID 42:
// "the operation timed out"`) names it; a text not in the table falls back
// to the exit status, the CUresult's low 8 bits.
static CUresult result(const char *out, int status) {
	const char *end = strrchr(out, '"'), *start = NULL;
	for (const char *p = out; end != NULL && p < end; p++)
		if (*p == '"')
			start = p + 1;
	if (start != NULL) {
		size_t n = (size_t)(end - start);
		for (size_t i = 1; i < sizeof(names) / sizeof(names[0]); i++) {
			if (strlen(names[i].text) == n && strncmp(names[i].text, start, n) == 0)
				return names[i].code;
		}
	}
	for (size_t i = 1; i < sizeof(names) / sizeof(names[0]); i++) {
		if ((names[i].code & 0xff) == status)
			return names[i].code;
	}
	return CUDA_ERROR_UNKNOWN;
}

// drain reads fd to its end into buf (NUL-terminated, the excess dropped);
// it returns 0 at end of file, 1 when more may come, -1 on error.
static int drain(int fd, char *buf, size_t size, size_t *len) {
	char tmp[512];
	ssize_t n = read(fd, tmp, sizeof tmp);
	if (n < 0)
		return errno == EINTR || errno == EAGAIN ? 1 : -1;
	if (n == 0)
		return 0;
	size_t k = (size_t)n;
	if (k > size - 1 - *len)
		k = size - 1 - *len;
	memcpy(buf + *len, tmp, k);
	*len += k;
	buf[*len] = '\0';
	return 1;
}

// run runs the tool with args (argv[0] is set here) and returns its
// CUresult; out receives its stdout.
static CUresult run(char **args, char *out, size_t outsize) {
	const char *tool = getenv("GPUSCHED_FAKE_CUDA_CHECKPOINT");
	int outp[2], errp[2];
	char err[4096] = "";
	size_t outlen = 0, errlen = 0;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none, all;
	pid_t child;
	int status, rc;

	if (!initialized || tool == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	out[0] = '\0';
	args[0] = (char *)tool;
	if (pipe2(outp, O_CLOEXEC) != 0)
		return CUDA_ERROR_UNKNOWN;
	if (pipe2(errp, O_CLOEXEC) != 0) {
		close(outp[0]);
		close(outp[1]);
		return CUDA_ERROR_UNKNOWN;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, outp[1], 1);
	posix_spawn_file_actions_adddup2(&fa, errp[1], 2);
	posix_spawnattr_init(&attr);
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setsigdefault(&attr, &all);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	rc = posix_spawn(&child, tool, &fa, &attr, args, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	close(outp[1]);
	close(errp[1]);
	if (rc != 0) {
		close(outp[0]);
		close(errp[0]);
		return CUDA_ERROR_UNKNOWN;
	}
	struct pollfd fds[2] = {{.fd = outp[0], .events = POLLIN}, {.fd = errp[0], .events = POLLIN}};
	while (fds[0].fd >= 0 || fds[1].fd >= 0) {
		if (poll(fds, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (fds[0].fd >= 0 && fds[0].revents != 0 && drain(fds[0].fd, out, outsize, &outlen) <= 0) {
			close(fds[0].fd);
			fds[0].fd = -1;
		}
		if (fds[1].fd >= 0 && fds[1].revents != 0 && drain(fds[1].fd, err, sizeof err, &errlen) <= 0) {
			close(fds[1].fd);
			fds[1].fd = -1;
		}
	}
	for (int i = 0; i < 2; i++)
		if (fds[i].fd >= 0)
			close(fds[i].fd);
	while (waitpid(child, &status, 0) < 0) {
		if (errno != EINTR)
			return CUDA_ERROR_UNKNOWN;
	}
	if (!WIFEXITED(status))
		return CUDA_ERROR_UNKNOWN;
	if (WEXITSTATUS(status) == 0)
		return CUDA_SUCCESS;
	return result(err, WEXITSTATUS(status));
}

// action runs "--action NAME --pid PID [EXTRA VALUE]".
static CUresult action(const char *name, int pid, const char *extra, const char *value) {
	char pidbuf[16], out[256];
	char *args[] = {NULL, "--action", (char *)name, "--pid", pidbuf, (char *)extra, (char *)value, NULL};
	snprintf(pidbuf, sizeof pidbuf, "%d", pid);
	return run(args, out, sizeof out);
}

// query runs "FLAG --pid PID" and returns its stdout, trimmed, in out.
static CUresult query(const char *flag, int pid, char *out, size_t size) {
	char pidbuf[16];
	char *args[] = {NULL, (char *)flag, "--pid", pidbuf, NULL};
	snprintf(pidbuf, sizeof pidbuf, "%d", pid);
	CUresult r = run(args, out, size);
	out[strcspn(out, " \t\r\n")] = '\0';
	return r;
}

EXPORT CUresult cuCheckpointProcessGetState(int pid, CUprocessState *state) {
	static const char *words[] = {"running", "locked", "checkpointed", "failed"};
	char out[256];
	if (state == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = query("--get-state", pid, out, sizeof out);
	if (r != CUDA_SUCCESS)
		return r;
	for (int i = 0; i < 4; i++) {
		if (strcmp(out, words[i]) == 0) {
			*state = (CUprocessState)i;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_UNKNOWN;
}

// cuCheckpointProcessGetRestoreThreadId returns the tid of the thread the
// driver restores pid on, a thread of its own in that process and not its
// main thread ("Returns the restore thread ID for a CUDA process", CUDA
// driver API reference): the fake tool's --get-restore-tid answer.
EXPORT CUresult cuCheckpointProcessGetRestoreThreadId(int pid, int *tid) {
	char out[256], *end;
	if (tid == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = query("--get-restore-tid", pid, out, sizeof out);
	if (r != CUDA_SUCCESS)
		return r;
	long v = strtol(out, &end, 10);
	if (end == out || *end != '\0')
		return CUDA_ERROR_UNKNOWN;
	*tid = (int)v;
	return CUDA_SUCCESS;
}

// zeroed reports whether n bytes at p are all zero, as the driver demands
// of reserved fields.
static int zeroed(const void *p, size_t n) {
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		if (b[i] != 0)
			return 0;
	return 1;
}

EXPORT CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args) {
	char ms[16];
	if (args != NULL && (args->reserved0 != 0 || !zeroed(args->reserved1, sizeof args->reserved1)))
		return CUDA_ERROR_INVALID_VALUE;
	if (args == NULL || args->timeoutMs == 0)
		return action("lock", pid, NULL, NULL);
	snprintf(ms, sizeof ms, "%u", args->timeoutMs);
	return action("lock", pid, "--timeout", ms);
}

EXPORT CUresult cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *args) {
	if (args != NULL && !zeroed(args, sizeof *args))
		return CUDA_ERROR_INVALID_VALUE;
	return action("checkpoint", pid, NULL, NULL);
}

// uuid formats u as GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx into s
// (41 bytes with the NUL).
static void uuid(const CUuuid *u, char *s) {
	const unsigned char *b = (const unsigned char *)u->bytes;
	s += sprintf(s, "GPU-");
	for (int i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			*s++ = '-';
		s += sprintf(s, "%02x", b[i]);
	}
}

EXPORT CUresult cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args) {
	if (args == NULL || args->gpuPairsCount == 0)
		return action("restore", pid, NULL, NULL);
	if (!zeroed(args->reserved, sizeof args->reserved) || args->reserved1 != 0 || args->gpuPairs == NULL ||
	    args->gpuPairsCount > 64)
		return CUDA_ERROR_INVALID_VALUE;
	char map[64 * 84];
	size_t n = 0;
	for (unsigned int i = 0; i < args->gpuPairsCount; i++) {
		if (i > 0)
			map[n++] = ',';
		uuid(&args->gpuPairs[i].oldUuid, map + n);
		n += strlen(map + n);
		map[n++] = '=';
		uuid(&args->gpuPairs[i].newUuid, map + n);
		n += strlen(map + n);
	}
	map[n] = '\0';
	return action("restore", pid, "--device-map", map);
}

EXPORT CUresult cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs *args) {
	if (args != NULL && !zeroed(args, sizeof *args))
		return CUDA_ERROR_INVALID_VALUE;
	return action("unlock", pid, NULL, NULL);
}

#endif // NO_CHECKPOINT
