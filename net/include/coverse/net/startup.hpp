// startup: the start-up modes besides the launcher — PMIx (Open MPI's mpirun, Slurm's
// srun --mpi=pmix) and the resource manager (coverse-crm). Each gives a PE its number, the
// job's size and key, and the node table; the machine core calls them through startup_peer.
// How to use them and the CRM protocol: docs/startup.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <coverse/net/bootstrap.hpp>

namespace coverse::net {

/// The PE's side of a start-up mode that is not coverse-run. Output and input of such a
/// PE are its own stdout/stderr/stdin (the spawner relays them).
class startup_peer {
public:
    virtual ~startup_peer() = default;
    /// This process's PE. For the CRM it is known only after exchange().
    virtual std::optional<std::uint32_t> pe() const noexcept = 0;
    virtual std::uint32_t num_pes() const noexcept = 0;
    /// The same 64-bit value in every PE of the job (the mesh's hello carries it).
    virtual std::uint64_t job_key() const noexcept = 0;
    /// Publishes this PE's data address and waits for every PE's (index = PE). Throws
    /// bootstrap_error naming the mode, the phase and what to do.
    virtual std::vector<node_entry> exchange(const node_entry& self,
                                             std::chrono::milliseconds timeout) = 0;
    /// Whether the job spans hosts as far as the mode knows, and the local address this
    /// process reaches the mode through (preferred for the data address; may be empty).
    struct host_span {
        bool multi_host = false;
        std::string local_ip;
        std::string why;  // "PMIx says the job spans 2 nodes", "the CRM is on 10.99.1.1"
    };
    virtual host_span span() const = 0;
    /// The cluster of each PE where the mode knows it (the CRM's ++cluster); else empty.
    virtual std::vector<std::uint32_t> clusters() const { return {}; }
    /// Stops the job with `text`: PMIx_Abort (the spawner stops every process), or for the
    /// CRM this process only (its peers see it go). Prints the text first. Never returns.
    [[noreturn]] virtual void abort(int exit_code, std::string_view text) noexcept = 0;
    /// "PMIx (namespace prterun-host-1234@1)", "the CRM at 127.0.0.1:7777 (key job1)".
    virtual std::string name() const = 0;
};

// ---------------------------------------------------------------------------------------
/// The 64-bit job key of a text (FNV-1a): a CRM job's ++key, a PMIx namespace.
std::uint64_t job_key_of(std::string_view text) noexcept;

// ---------------------------------------------------------------------------------------
// PMIx (net/src/bootstrap_pmix.cpp)

/// True when the environment says a PMIx server started us (PMIX_NAMESPACE or PMIX_RANK).
bool pmix_in_environment() noexcept;
/// PMIx_Init, the rank and PMIX_JOB_SIZE. Throws bootstrap_error when the server refuses
/// (naming PMIX_NAMESPACE / PMIX_SERVER_URI and the fix).
std::unique_ptr<startup_peer> pmix_connect();
/// Throws bootstrap_error when a spawner started several copies of this process without
/// PMIx (srun without --mpi=pmix, SLURM_STEP_NUM_TASKS > 1): each would run alone.
void check_spawner_without_pmix();

// ---------------------------------------------------------------------------------------
// The resource manager (net/src/bootstrap_crm.cpp)

/// What a process registers with coverse-crm.
struct crm_request {
    std::string host;  // the CRM's address
    std::uint16_t port = 0;
    std::string key;  // the job key as given (++key); the wire carries job_key_of(key)
    std::uint32_t num_pes = 0;
    std::uint32_t cluster = 0;       // 0 .. num_pes-1
    std::uint32_t node_context = 0;  // 0 .. num_pes-1: PEs are numbered in this order
};

/// The CRM request of this process, from ++crm HOST:PORT, ++key K, ++cluster C and
/// ++node-context N in argv (removed from it) and the settings CRM, CRM_KEY, CRM_CLUSTER,
/// CRM_NODE_CONTEXT; `num_pes` is the +pN of the command line (0 = none). nullopt when
/// no CRM address is given. Throws bootstrap_error for a malformed or missing part.
std::optional<crm_request> crm_request_from(int& argc, char** argv, std::uint32_t num_pes);

/// Connects to the CRM (a refused or unreachable address is an error at once, naming it).
std::unique_ptr<startup_peer> crm_connect(const crm_request& request);

/// coverse-crm itself.
struct crm_options {
    std::string bind = "127.0.0.1";
    std::uint16_t port = 7777;                          // CRM_PORT; 0 = any free port
    std::chrono::milliseconds fill_timeout{60000};      // CRM_TIMEOUT: a job must fill by then
    std::chrono::milliseconds register_timeout{10000};  // one client's registration frames
    bool verbose = false;
    std::string port_file;  // when set: the port is written there once listening
};

/// Serves registrations until SIGINT/SIGTERM (returns 0) or a listening error (throws
/// bootstrap_error). Blocks SIGINT and SIGTERM in the calling thread.
int run_crm(const crm_options& options);

}  // namespace coverse::net
