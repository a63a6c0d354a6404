// cma_provider (see cma.hpp). A get or put is one system call (repeated for a partial copy)
// that completes before post_* returns: the copy runs on the calling PE's core.
#include <coverse/rdma/cma.hpp>

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <coverse/net/detail/little_endian.hpp>

namespace coverse::rdma {

namespace {

// A peer reads this to prove cross-memory attach works between us (connect_peer).
constexpr std::uint64_t probe_magic = 0x434d'4150'524f'4245ull;  // "CMAPROBE"
volatile std::uint64_t probe_word = probe_magic;

constexpr std::size_t blob_size = 16;  // u32 pid, u32 reserved, u64 probe address

// The cause and the fix of a refused cross-memory attach.
std::string refusal_text(int err) {
    std::string why = std::strerror(err);
    if (err == EPERM)
        why +=
            " (the kernel's ptrace policy forbids it: kernel.yama.ptrace_scope above 1, "
            "PEs of different users, or a container without CAP_SYS_PTRACE; fix: "
            "sysctl kernel.yama.ptrace_scope=0 or ++set RDMA_PROVIDER=tcp)";
    else if (err == ENOSYS)
        why += " (this kernel has no cross memory attach: CONFIG_CROSS_MEMORY_ATTACH)";
    return why;
}

op_result result_of(int err, std::uint32_t pe, const char* what) {
    op_result r;
    r.status = err == ESRCH    ? op_status::peer_lost
               : err == EFAULT ? op_status::refused
                               : op_status::failed;
    r.detail = std::string(what) + " of PE " + std::to_string(pe) + "'s memory failed: " +
               (err == ESRCH    ? std::string("the process is gone")
                : err == EFAULT ? std::string("an address outside its memory")
                                : refusal_text(err));
    return r;
}

// One copy between our memory and the peer's, repeated while the kernel copies partially.
int copy(pid_t pid, std::byte* local, std::uint64_t remote, std::size_t length, bool write) {
    std::size_t done = 0;
    while (done < length) {
        iovec l{local + done, length - done};
        iovec r{reinterpret_cast<void*>(static_cast<std::uintptr_t>(remote + done)), length - done};
        const ssize_t n = write ? ::process_vm_writev(pid, &l, 1, &r, 1, 0)
                                : ::process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (n == 0) return EFAULT;  // nothing copied: an unmapped page
        done += static_cast<std::size_t>(n);
    }
    return 0;
}

}  // namespace

cma_provider::cma_provider(std::uint32_t num_pes, alloc::rcache_config cache)
    : provider(cache), _pids(num_pes, 0) {}

capabilities cma_provider::caps() const noexcept {
    capabilities c;
    c.same_host_only = true;
    return c;
}

std::vector<std::byte> cma_provider::address_blob() {
    std::vector<std::byte> b(blob_size);
    net::detail::store_le<std::uint32_t>(b.data(), static_cast<std::uint32_t>(::getpid()));
    net::detail::store_le<std::uint64_t>(
        b.data() + 8, static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&probe_word)));
    return b;
}

std::optional<std::string> cma_provider::connect_peer(std::uint32_t pe,
                                                      std::span<const std::byte> blob) {
    if (blob.size() != blob_size || pe >= _pids.size())
        return "PE " + std::to_string(pe) + " sent a cma address of " +
               std::to_string(blob.size()) + " bytes (expected " + std::to_string(blob_size) + ")";
    const auto pid = static_cast<pid_t>(net::detail::load_le<std::uint32_t>(blob.data()));
    const auto probe = net::detail::load_le<std::uint64_t>(blob.data() + 8);
    std::uint64_t seen = 0;
    if (const int err = copy(pid, reinterpret_cast<std::byte*>(&seen), probe, sizeof seen, false))
        return "process_vm_readv of PE " + std::to_string(pe) + " (pid " + std::to_string(pid) +
               ") failed: " + refusal_text(err);
    if (seen != probe_magic)
        return "PE " + std::to_string(pe) + " (pid " + std::to_string(pid) +
               ") is not the process its address names (another host with the same machine "
               "id?)";
    _pids[pe] = pid;
    return std::nullopt;
}

void cma_provider::post_get(std::uint32_t pe, std::span<std::byte> local, remote_memory remote,
                            op_completion& done) {
    if (pe >= _pids.size() || _pids[pe] == 0) {
        done.complete({op_status::failed, "cma: PE " + std::to_string(pe) + " is not connected"});
        return;
    }
    const int err = copy(_pids[pe], local.data(), remote.address, local.size(), false);
    done.complete(err ? result_of(err, pe, "process_vm_readv") : op_result{});
}

void cma_provider::post_put(std::uint32_t pe, std::span<const std::byte> local,
                            remote_memory remote, op_completion& done) {
    if (pe >= _pids.size() || _pids[pe] == 0) {
        done.complete({op_status::failed, "cma: PE " + std::to_string(pe) + " is not connected"});
        return;
    }
    const int err =
        copy(_pids[pe], const_cast<std::byte*>(local.data()), remote.address, local.size(), true);
    done.complete(err ? result_of(err, pe, "process_vm_writev") : op_result{});
}

void cma_provider::peer_lost(std::uint32_t pe) {
    if (pe < _pids.size()) _pids[pe] = 0;  // nothing is outstanding: every copy is synchronous
}

std::error_code cma_provider::register_memory(std::byte*, std::size_t, registration& out) {
    out.key = static_cast<std::uint64_t>(::getpid());
    return {};
}

void cma_provider::deregister_memory(registration&) noexcept {}

}  // namespace coverse::rdma
