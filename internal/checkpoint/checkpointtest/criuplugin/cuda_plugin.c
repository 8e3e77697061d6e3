/*
 * A test stand-in for CRIU's CUDA plugin (plugins/cuda/cuda_plugin.c in
 * CRIU 4.1.1), written for gpusched: a CRIU plugin that drives
 * cuda-checkpoint (here the fake, on simulated GPUs) at the hooks, with the
 * commands and in the cases the real plugin does. What it models:
 *
 *  - Loading. CRIU dlopens every *.so of its plugin directory (--libdir,
 *    else $CRIU_LIBS_DIR, else /usr/lib/criu/) and finds the descriptor
 *    CR_PLUGIN_DESC (criu/plugin.c, cr_plugin_init and cr_lib_load). Its
 *    name, "cuda_plugin", is the one the real plugin registers
 *    (CR_PLUGIN_REGISTER at the end of cuda_plugin.c).
 *  - Enabling (cuda_plugin_init). A pre-dump disables it. At a restore it
 *    acts only when the dump recorded it in the inventory image
 *    (check_and_remove_inventory_plugin; CRIU PR #2489; CRIU 4.0 has no
 *    such record and enables it always). It is disabled when
 *    "cuda-checkpoint -h" fails or does not mention --action (r555 and
 *    newer drivers have it). The real plugin also requires
 *    /proc/driver/nvidia/gpus/ (is_cuda_device_available); the stand-in
 *    models a machine with a GPU, as CRIU's own tests do with the fault
 *    FI_PLUGIN_CUDA_FORCE_ENABLE.
 *  - Dump (cuda_plugin_pause_devices, run for each seized task). A task
 *    whose restore thread id cannot be had ("cuda-checkpoint
 *    --get-restore-tid --pid P" fails) is not a CUDA task and is left
 *    alone; for a CUDA task the plugin records its name in the inventory
 *    image (add_inventory_plugin) and reads "--get-state". A task already
 *    checkpointed is left as it is, to be checkpointed no further (CRIU PR
 *    #2517): gpusched checkpoints every CUDA task before CRIU dumps it, so
 *    that is the case this stand-in models. A task in any other state
 *    fails the dump here instead of being locked and checkpointed as the
 *    real plugin would (not modelled).
 *  - Restore (cuda_plugin_resume_devices_late, run by CRIU for every
 *    restored task after the post-restore notification, criu/cr-restore.c,
 *    restore_root_task): whatever its state at the dump, a CUDA task is
 *    restored ("--action restore", with no device map, so onto the GPUs it
 *    was checkpointed on) and unlocked ("--action unlock"), as
 *    resume_device(pid, 1, CUDA_TASK_RUNNING) does. CRIU ignores the
 *    hook's result.
 *
 * The real plugin runs "cuda-checkpoint" found on CRIU's PATH
 * (CUDA_CHECKPOINT, execvp in launch_cuda_checkpoint); the stand-in is
 * compiled with -DCUDA_CHECKPOINT=<path of the fake>. The real plugin
 * also wakes and re-stops the task's restore thread with ptrace around
 * each action (resume_restore_thread, interrupt_restore_thread); the fake
 * tool acts on simulated state and needs no running thread.
 *
 * The plugin ABI is CRIU's (criu/include/criu-plugin.h of CRIU 4.1.1,
 * restated below): descriptor version 0.2.0 and the 12 hooks that CRIU
 * 4.1.1 knows (a later CRIU knows more and accepts fewer, criu/plugin.c,
 * verify_plugin). The inventory and log functions are CRIU's own exported
 * symbols, weak so that the plugin also loads into a CRIU without them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CUDA_CHECKPOINT
#define CUDA_CHECKPOINT "cuda-checkpoint"
#endif

/* criu/include/criu-plugin.h (CRIU 4.1.1). */
#define CRIU_PLUGIN_VERSION ((0 << 16) + (2 << 8) + 0)
enum {
	CR_PLUGIN_HOOK__RESUME_DEVICES_LATE = 9,
	CR_PLUGIN_HOOK__PAUSE_DEVICES = 10,
	CR_PLUGIN_HOOK__MAX = 12,
};
enum { CR_PLUGIN_STAGE__DUMP, CR_PLUGIN_STAGE__PRE_DUMP, CR_PLUGIN_STAGE__RESTORE };
typedef struct {
	const char *name;
	int (*init)(int stage);
	void (*exit)(int stage, int ret);
	unsigned int version;
	unsigned int max_hooks;
	void *hooks[CR_PLUGIN_HOOK__MAX];
} cr_plugin_desc_t;

/* criu/include/image.h and criu/include/log.h (CRIU 4.1.1). */
extern int add_inventory_plugin(const char *name) __attribute__((weak));
extern bool check_and_remove_inventory_plugin(const char *name, size_t n) __attribute__((weak));
extern void print_on_level(unsigned int loglevel, const char *format, ...) __attribute__((weak));
#define LOG_ERROR 1
#define LOG_INFO 3

#define PLUGIN_NAME "cuda_plugin"
#define pr(level, fmt, ...)                                                      \
	do {                                                                     \
		if (print_on_level)                                              \
			print_on_level(level, PLUGIN_NAME ": " fmt, ##__VA_ARGS__); \
	} while (0)

static bool disabled;
static bool in_inventory;

/* run runs cuda-checkpoint with args, its stdout and stderr into out, and
 * returns its exit status (-1 when it did not exit). */
static int run(const char *const args[], char *out, size_t size)
{
	int fd[2];
	if (pipe(fd))
		return -1;
	pid_t pid = fork();
	if (pid < 0) {
		close(fd[0]);
		close(fd[1]);
		return -1;
	}
	if (pid == 0) {
		dup2(fd[1], STDOUT_FILENO);
		dup2(fd[1], STDERR_FILENO);
		close_range(STDERR_FILENO + 1, ~0U, 0);
		execvp(args[0], (char *const *)args);
		_exit(127);
	}
	close(fd[1]);
	size_t n = 0;
	for (;;) {
		char scratch[256];
		char *dst = n + 1 < size ? out + n : scratch;
		size_t room = n + 1 < size ? size - 1 - n : sizeof(scratch);
		ssize_t got = read(fd[0], dst, room);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		if (dst != scratch)
			n += got;
	}
	out[n] = '\0';
	close(fd[0]);
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* query runs "cuda-checkpoint <flag> --pid <pid>". */
static int query(int pid, const char *flag, char *out, size_t size)
{
	char pidbuf[16];
	snprintf(pidbuf, sizeof(pidbuf), "%d", pid);
	const char *args[] = { CUDA_CHECKPOINT, flag, "--pid", pidbuf, NULL };
	return run(args, out, size);
}

/* action runs "cuda-checkpoint --action <what> --pid <pid>"
 * (cuda_process_checkpoint_action, with no timeout). */
static int action(int pid, const char *what, char *out, size_t size)
{
	char pidbuf[16];
	snprintf(pidbuf, sizeof(pidbuf), "%d", pid);
	const char *args[] = { CUDA_CHECKPOINT, "--action", what, "--pid", pidbuf, NULL };
	return run(args, out, size);
}

/* cuda_task reports whether pid is a CUDA task: it has a restore thread
 * (get_cuda_restore_tid). */
static bool cuda_task(int pid)
{
	char out[128];
	return query(pid, "--get-restore-tid", out, sizeof(out)) == 0;
}

static int pause_devices(int pid)
{
	char out[128];
	if (disabled)
		return -ENOTSUP;
	if (!cuda_task(pid))
		return 0;
	if (query(pid, "--get-state", out, sizeof(out)) != 0) {
		pr(LOG_ERROR, "Failed to get CUDA state for PID %d: %s\n", pid, out);
		return -1;
	}
	if (!in_inventory) {
		if (add_inventory_plugin && add_inventory_plugin(PLUGIN_NAME))
			return -1;
		in_inventory = true;
	}
	if (strncmp(out, "checkpointed", 12) != 0) {
		pr(LOG_ERROR, "pid %d is %.*s: only checkpointed tasks are modelled\n", pid, (int)strcspn(out, "\n"), out);
		return -1;
	}
	pr(LOG_INFO, "pid %d already in a checkpointed state\n", pid);
	return 0;
}

static int resume_devices_late(int pid)
{
	char out[256];
	if (disabled)
		return -ENOTSUP;
	if (!cuda_task(pid))
		return 0;
	pr(LOG_INFO, "resuming devices on pid %d\n", pid);
	if (action(pid, "restore", out, sizeof(out)) != 0) {
		pr(LOG_ERROR, "RESUME_DEVICES RESTORE failed with %s\n", out);
		return -1;
	}
	if (action(pid, "unlock", out, sizeof(out)) != 0) {
		pr(LOG_ERROR, "RESUME_DEVICES UNLOCK failed with %s\n", out);
		return -1;
	}
	return 0;
}

static int init(int stage)
{
	char help[2048];
	const char *args[] = { CUDA_CHECKPOINT, "-h", NULL };
	disabled = false;
	in_inventory = false;
	if (stage == CR_PLUGIN_STAGE__PRE_DUMP ||
	    (stage == CR_PLUGIN_STAGE__RESTORE && check_and_remove_inventory_plugin &&
	     !check_and_remove_inventory_plugin(PLUGIN_NAME, strlen(PLUGIN_NAME)))) {
		disabled = true;
		return 0;
	}
	if (run(args, help, sizeof(help)) != 0 || !strstr(help, "--action")) {
		pr(LOG_INFO, "cuda-checkpoint unusable: CUDA plugin is disabled\n");
		disabled = true;
		return 0;
	}
	pr(LOG_INFO, "initialized: " PLUGIN_NAME " stage %d\n", stage);
	return 0;
}

__attribute__((visibility("default"))) cr_plugin_desc_t CR_PLUGIN_DESC = {
	.name = PLUGIN_NAME,
	.init = init,
	.version = CRIU_PLUGIN_VERSION,
	.max_hooks = CR_PLUGIN_HOOK__MAX,
	.hooks = {
		[CR_PLUGIN_HOOK__RESUME_DEVICES_LATE] = resume_devices_late,
		[CR_PLUGIN_HOOK__PAUSE_DEVICES] = pause_devices,
	},
};
