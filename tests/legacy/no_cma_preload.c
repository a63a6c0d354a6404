/* no_cma_preload: an LD_PRELOAD shim for the cma fallback test: process_vm_readv and
 * process_vm_writev fail with EPERM in every PE, as they do under a strict ptrace policy
 * (kernel.yama.ptrace_scope), for another user's process, or in a container without
 * CAP_SYS_PTRACE. Each PE must say so once and move its large messages over tcp. */
#define _GNU_SOURCE
#include <errno.h>
#include <sys/types.h>
#include <sys/uio.h>

ssize_t process_vm_readv(pid_t pid, const struct iovec *local, unsigned long liovcnt,
                         const struct iovec *remote, unsigned long riovcnt, unsigned long flags) {
    (void)pid, (void)local, (void)liovcnt, (void)remote, (void)riovcnt, (void)flags;
    errno = EPERM;
    return -1;
}

ssize_t process_vm_writev(pid_t pid, const struct iovec *local, unsigned long liovcnt,
                          const struct iovec *remote, unsigned long riovcnt, unsigned long flags) {
    (void)pid, (void)local, (void)liovcnt, (void)remote, (void)riovcnt, (void)flags;
    errno = EPERM;
    return -1;
}
