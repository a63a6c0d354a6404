// The names a PE creates in /dev/shm (its rings, eager channels and doorbell FIFO), kept
// where a signal handler can reach them: a PE ended by SIGTERM, SIGINT or SIGHUP (mpirun or
// srun stopping a job after another PE aborted, scancel, Ctrl-C without coverse-run)
// removes them before it dies, instead of leaving them in /dev/shm for good. Only where
// the program left the signal's default action in place; SIGKILL cannot be caught.
#pragma once

#include <string>

namespace coverse::rdma::detail {

/// `name` was created by this process: a POSIX shared-memory object (shm_open's name), or,
/// with `fifo`, the path of a FIFO. Best effort: a name too long for the table, or one past
/// its 512 entries, is not remembered (it is then removed only as it was before).
void remember_shm_name(const std::string& name, bool fifo) noexcept;
/// `name` was removed (or handed on): the signal handler leaves it alone.
void forget_shm_name(const std::string& name) noexcept;

}  // namespace coverse::rdma::detail
