/* no_shm_preload: an LD_PRELOAD shim for the fallback test: shm_open fails (ENOSYS) in the
 * PE whose COVERSE_PE is 1, as it would on a host without /dev/shm, and works in the others.
 * That PE must say so and talk TCP; its peers must still use their rings with each other. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

int shm_open(const char *name, int flags, mode_t mode) {
    const char *pe = getenv("COVERSE_PE");
    if (pe && strcmp(pe, "1") == 0) {
        errno = ENOSYS;
        return -1;
    }
    int (*real)(const char *, int, mode_t) =
        (int (*)(const char *, int, mode_t))dlsym(RTLD_NEXT, "shm_open");
    return real ? real(name, flags, mode) : (errno = ENOSYS, -1);
}
