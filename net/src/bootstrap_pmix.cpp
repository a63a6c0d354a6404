// bootstrap_pmix: start-up under a PMIx server (Open MPI's mpirun, Slurm's srun --mpi=pmix).
// Stages: PMIx_Init (rank) -> PMIX_JOB_SIZE -> Put "coverse.address" {ip port machine-id}
// -> Commit -> Fence (collecting data) -> Get each PE's address -> ... -> Abort or Finalize.
#include <coverse/net/startup.hpp>

#include <pmix.h>

#include <unistd.h>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

namespace coverse::net {

namespace {

constexpr const char* address_key = "coverse.address";

std::string env_or(const char* name, const char* fallback) {
    const char* v = std::getenv(name);
    return v && *v ? v : fallback;
}

std::string status_text(pmix_status_t rc) {
    return std::string(PMIx_Error_string(rc)) + " (" + std::to_string(rc) + ")";
}

class pmix_peer final : public startup_peer {
public:
    pmix_peer() {
        pmix_status_t rc = PMIx_Init(&_self, nullptr, 0);
        if (rc != PMIX_SUCCESS)
            throw bootstrap_error(
                "coverse: PMIx_Init failed: " + status_text(rc) +
                ". The environment says a PMIx server started this process (PMIX_NAMESPACE=" +
                env_or("PMIX_NAMESPACE", "(unset)") +
                ", PMIX_RANK=" + env_or("PMIX_RANK", "(unset)") + ", PMIX_SERVER_URI41=" +
                env_or("PMIX_SERVER_URI41", env_or("PMIX_SERVER_URI4", "(unset)").c_str()) +
                "), but that server refused or is gone. Start the program with mpirun or "
                "srun --mpi=pmix, or unset the PMIX_* variables to run it without them");
        _initialised = true;
        pmix_proc_t job;
        PMIX_LOAD_PROCID(&job, _self.nspace, PMIX_RANK_WILDCARD);
        pmix_value_t* v = nullptr;
        rc = PMIx_Get(&job, PMIX_JOB_SIZE, nullptr, 0, &v);
        if (rc != PMIX_SUCCESS || !v) {
            PMIx_Finalize(nullptr, 0);
            throw bootstrap_error("coverse: PMIx rank " + std::to_string(_self.rank) +
                                  ": PMIx_Get(PMIX_JOB_SIZE) failed: " + status_text(rc) +
                                  "; the PMIx server does not describe the job");
        }
        const std::uint32_t size = count_of(v).value_or(0);
        PMIX_VALUE_RELEASE(v);
        if (size < 1 || _self.rank >= size) {
            PMIx_Finalize(nullptr, 0);
            throw bootstrap_error("coverse: PMIx says rank " + std::to_string(_self.rank) +
                                  " of a job of " + std::to_string(size) + " processes");
        }
        _num_pes = size;
        _num_nodes = get_uint32(job, PMIX_NUM_NODES).value_or(1);
        _key = job_key_of(key_text(_self.nspace));
    }

    ~pmix_peer() override {
        if (_initialised) PMIx_Finalize(nullptr, 0);
    }

    std::optional<std::uint32_t> pe() const noexcept override { return _self.rank; }
    std::uint32_t num_pes() const noexcept override { return _num_pes; }
    std::uint64_t job_key() const noexcept override { return _key; }
    host_span span() const override {
        // PMIx knows the nodes but not how this process reaches the others: the data
        // address comes from NETWORK_INTERFACE and the interfaces alone.
        return {_num_nodes > 1,
                {},
                "PMIx says the job spans " + std::to_string(_num_nodes) +
                    (_num_nodes == 1 ? " node" : " nodes")};
    }

    std::vector<node_entry> exchange(const node_entry& self,
                                     std::chrono::milliseconds timeout) override {
        char text[300];
        std::snprintf(text, sizeof text, "%s %u %016" PRIx64, self.ip.c_str(),
                      static_cast<unsigned>(self.data_port), self.machine_id);
        pmix_value_t value;
        PMIX_VALUE_LOAD(&value, text, PMIX_STRING);
        pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, address_key, &value);
        PMIX_VALUE_DESTRUCT(&value);
        if (rc != PMIX_SUCCESS) fail("PMIx_Put of our address", rc);
        if ((rc = PMIx_Commit()) != PMIX_SUCCESS) fail("PMIx_Commit", rc);

        pmix_proc_t job;
        PMIX_LOAD_PROCID(&job, _self.nspace, PMIX_RANK_WILDCARD);
        pmix_info_t info[2];
        bool collect = true;
        int seconds = static_cast<int>(std::max<std::int64_t>(1, (timeout.count() + 999) / 1000));
        PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
        PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &seconds, PMIX_INT);
        rc = PMIx_Fence(&job, 1, info, 2);
        PMIX_INFO_DESTRUCT(&info[0]);
        PMIX_INFO_DESTRUCT(&info[1]);
        if (rc != PMIX_SUCCESS)
            fail("PMIx_Fence (every PE publishes its address; CONNECTION_TIMEOUT " +
                     std::to_string(seconds) + " s)",
                 rc);

        std::vector<node_entry> table(_num_pes);
        for (std::uint32_t pe = 0; pe < _num_pes; ++pe) {
            pmix_proc_t peer;
            PMIX_LOAD_PROCID(&peer, _self.nspace, pe);
            pmix_value_t* v = nullptr;
            rc = PMIx_Get(&peer, address_key, nullptr, 0, &v);
            if (rc != PMIX_SUCCESS || !v || v->type != PMIX_STRING || !v->data.string) {
                if (v) PMIX_VALUE_RELEASE(v);
                fail("PMIx_Get of PE " + std::to_string(pe) + "'s address", rc);
            }
            char ip[256];
            unsigned port = 0;
            std::uint64_t machine = 0;
            const int n = std::sscanf(v->data.string, "%255s %u %" SCNx64, ip, &port, &machine);
            const std::string got = v->data.string;
            PMIX_VALUE_RELEASE(v);
            if (n != 3 || port == 0 || port > 65535)
                throw bootstrap_error("coverse: PE " + std::to_string(_self.rank) + ": PE " +
                                      std::to_string(pe) + " published \"" + got + "\" under " +
                                      address_key +
                                      ", not \"IP PORT MACHINE-ID\"; are all processes the "
                                      "same coverse build?");
            table[pe] = node_entry{pe, ip, static_cast<std::uint16_t>(port), machine};
        }
        return table;
    }

    [[noreturn]] void abort(int exit_code, std::string_view text) noexcept override {
        std::string line = "coverse: PE " + std::to_string(_self.rank) + " aborted: ";
        line.append(text);
        std::fprintf(stderr, "%s\n", line.c_str());
        std::fflush(nullptr);
        // PMIx_Abort asks the server to stop every process of the namespace; it returns
        // once the request is delivered (or fails), and the process exits either way.
        PMIx_Abort(exit_code ? exit_code : 1, line.c_str(), nullptr, 0);
        std::_Exit(exit_code ? exit_code : 1);
    }

    std::string name() const override {
        return std::string("PMIx (namespace ") + _self.nspace + ")";
    }

private:
    [[noreturn]] void fail(const std::string& what, pmix_status_t rc) const {
        throw bootstrap_error("coverse: PE " + std::to_string(_self.rank) + ": " + what +
                              " failed under " + name() + ": " + status_text(rc) +
                              "; another process of the job may have died (see its output)");
    }

    // A PMIx value that is a count (servers give uint32 or int), or nullopt.
    static std::optional<std::uint32_t> count_of(const pmix_value_t* v) {
        if (v->type == PMIX_UINT32) return v->data.uint32;
        if (v->type == PMIX_INT && v->data.integer >= 0)
            return static_cast<std::uint32_t>(v->data.integer);
        return std::nullopt;
    }
    static std::optional<std::uint32_t> get_uint32(const pmix_proc_t& job, const char* key) {
        pmix_value_t* v = nullptr;
        if (PMIx_Get(&job, key, nullptr, 0, &v) != PMIX_SUCCESS || !v) return std::nullopt;
        const auto n = count_of(v);
        PMIX_VALUE_RELEASE(v);
        return n;
    }

    // What the job key hashes: the namespace, which is unique among the jobs of one PMIx
    // server's life, plus what tells apart servers whose namespaces repeat (Slurm names
    // them slurm.pmix.JOB.STEP, and job numbers start again in another Slurm cluster).
    static std::string key_text(const char* nspace) {
        std::string text = nspace;
        if (const char* c = std::getenv("SLURM_CLUSTER_NAME"); c && *c) text.append(" ").append(c);
        return text;
    }

    pmix_proc_t _self{};
    bool _initialised = false;
    std::uint32_t _num_pes = 1;
    std::uint32_t _num_nodes = 1;
    std::uint64_t _key = 0;
};

}  // namespace

bool pmix_in_environment() noexcept {
    for (const char* v : {"PMIX_NAMESPACE", "PMIX_RANK"}) {
        const char* s = std::getenv(v);
        if (s && *s) return true;
    }
    return false;
}

std::unique_ptr<startup_peer> pmix_connect() {
    return std::make_unique<pmix_peer>();
}

void check_spawner_without_pmix() {
    const char* tasks = std::getenv("SLURM_STEP_NUM_TASKS");
    if (!tasks || std::atoi(tasks) <= 1) return;
    throw bootstrap_error(std::string("coverse: srun started ") + tasks +
                          " tasks, but without PMIx, so each would run as a job of its own; "
                          "use srun --mpi=pmix (or MpiDefault=pmix in slurm.conf)");
}

}  // namespace coverse::net
