// verbs_provider (see verbs.hpp): device discovery, the address blob, and RC queue pairs.
//
// Objects and their lifetimes: one device context, one protection domain (every memory
// region and queue pair of this PE), one completion channel and one completion queue shared
// by every queue pair, and one RC queue pair per peer, made on first need (our offer's
// address_blob_for, or the peer's offer reaching connect_peer first) and moved
// RESET -> INIT at once, INIT -> RTR -> RTS when the peer's address arrives.
//
// An operation (verbs_op) is one get or put: its local buffer is registered through the
// registration cache for as long as the NIC may touch it, and it is posted as one or more
// signaled work requests, each carrying the op's address as wr_id, so the op is the one
// immovable completion object of all its WRs and finishes when the last one is reaped.
// Posting never blocks: past the queue pair's or the completion queue's depth, ops wait in
// their peer's queue (in order) and go out as completions free room.
//
// Progress: a scheduler poller reaps the completion queue while anything is in flight.
// Before the scheduler sleeps, try_sleep() arms the queue (ibv_req_notify_cq) and the
// channel task keeps a poll on the channel's fd in io_uring, so the next completion wakes the
// loop. Peers' reads and writes of our memory make no completion here: with nothing in
// flight, there is nothing to wait for.
#include <coverse/rdma/verbs.hpp>

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <deque>
#include <random>

#include <coverse/net/detail/little_endian.hpp>
#include <coverse/runtime/io.hpp>
#include <coverse/runtime/scope.hpp>
#include <coverse/runtime/task.hpp>

namespace coverse::rdma {

namespace {

std::string errno_text(int err) {
    return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
}

// ibv_get_device_list returned null: why, in the words both discovery and the provider use.
std::string no_device_list(int err) {
    return "no RDMA device (ibv_get_device_list: " + errno_text(err) +
           (err == ENOSYS ? ": this kernel has no RDMA support)"
                          : ": no RDMA driver is loaded, or /dev/infiniband is not accessible)");
}

std::string port_state_name(ibv_port_state s) {
    switch (s) {
        case IBV_PORT_ACTIVE:
            return "active";
        case IBV_PORT_DOWN:
            return "down";
        case IBV_PORT_INIT:
            return "init";
        case IBV_PORT_ARMED:
            return "armed";
        default:
            return "state " + std::to_string(static_cast<int>(s));
    }
}

}  // namespace

std::vector<verbs_device> list_verbs_devices(std::string* why) {
    std::vector<verbs_device> out;
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (!list) {
        if (why) *why = no_device_list(errno);
        return out;
    }
    for (int i = 0; i < n; ++i) {
        verbs_device d;
        d.name = ibv_get_device_name(list[i]);
        char guid[24];
        std::snprintf(guid, sizeof guid, "%016" PRIx64,
                      static_cast<std::uint64_t>(be64toh(ibv_get_device_guid(list[i]))));
        d.node_guid = guid;
        if (ibv_context* ctx = ibv_open_device(list[i])) {
            ibv_device_attr attr{};
            if (ibv_query_device(ctx, &attr) == 0) {
                d.max_qp_wr = static_cast<std::uint32_t>(attr.max_qp_wr);
                d.max_sge = static_cast<std::uint32_t>(attr.max_sge);
                d.max_mr_size = attr.max_mr_size;
                for (std::uint8_t p = 1; p <= attr.phys_port_cnt; ++p) {
                    ibv_port_attr pa{};
                    if (ibv_query_port(ctx, p, &pa) != 0) continue;
                    verbs_port port;
                    port.number = p;
                    port.state = port_state_name(pa.state);
                    port.link_layer =
                        pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
                    port.lid = pa.lid;
                    port.active_mtu = std::to_string(128 << pa.active_mtu);
                    d.ports.push_back(port);
                }
            }
            ibv_close_device(ctx);
        }
        out.push_back(std::move(d));
    }
    ibv_free_device_list(list);
    if (out.empty() && why) *why = "no RDMA device";
    return out;
}

// ---------------------------------------------------------------------------------------
// The address blob

std::vector<std::byte> encode_verbs_address(const verbs_address& a) {
    using net::detail::store_le;
    std::vector<std::byte> b(verbs_address_size);
    store_le<std::uint32_t>(b.data(), a.qpn);
    store_le<std::uint32_t>(b.data() + 4, a.psn);
    store_le<std::uint16_t>(b.data() + 8, a.lid);
    b[10] = std::byte{a.port};
    b[11] = std::byte{a.mtu};
    b[12] = std::byte{a.link_layer};
    b[13] = std::byte{a.rd_atomic};
    for (std::size_t i = 0; i < a.gid.size(); ++i)
        b[16 + i] = std::byte{a.gid[i]};
    return b;
}

std::optional<verbs_address> decode_verbs_address(std::span<const std::byte> blob,
                                                  std::string* why) {
    using net::detail::load_le;
    const auto fail = [&](std::string text) -> std::optional<verbs_address> {
        if (why) *why = std::move(text);
        return std::nullopt;
    };
    if (blob.size() != verbs_address_size)
        return fail("a verbs address of " + std::to_string(blob.size()) + " bytes (expected " +
                    std::to_string(verbs_address_size) + ")");
    verbs_address a;
    a.qpn = load_le<std::uint32_t>(blob.data());
    a.psn = load_le<std::uint32_t>(blob.data() + 4);
    a.lid = load_le<std::uint16_t>(blob.data() + 8);
    a.port = std::to_integer<std::uint8_t>(blob[10]);
    a.mtu = std::to_integer<std::uint8_t>(blob[11]);
    a.link_layer = std::to_integer<std::uint8_t>(blob[12]);
    a.rd_atomic = std::to_integer<std::uint8_t>(blob[13]);
    for (std::size_t i = 0; i < a.gid.size(); ++i)
        a.gid[i] = std::to_integer<std::uint8_t>(blob[16 + i]);
    if (a.qpn > 0xFF'FFFF || a.psn > 0xFF'FFFF)
        return fail("a verbs address with a queue pair number or PSN over 24 bits");
    if (a.mtu < IBV_MTU_256 || a.mtu > IBV_MTU_4096)
        return fail("a verbs address with MTU code " + std::to_string(a.mtu) + " (expected 1..5)");
    if (a.link_layer != verbs_link_infiniband && a.link_layer != verbs_link_ethernet)
        return fail("a verbs address with link layer " + std::to_string(a.link_layer));
    if (a.rd_atomic == 0) return fail("a verbs address that serves no RDMA reads");
    return a;
}

// ---------------------------------------------------------------------------------------
// The provider

namespace {

constexpr int mr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
constexpr std::uint32_t wanted_send_depth = 256;  // WRs in flight per queue pair
constexpr int wanted_cq_depth = 4096;             // WRs in flight in all (one CQE each)
constexpr int wanted_rd_atomic = 16;              // RDMA reads in flight per queue pair

// ibv_reg_mr pins pages: the usual refusal is RLIMIT_MEMLOCK. Said with the limit and the
// fix, as UCX says it.
class registration_category final : public std::error_category {
public:
    const char* name() const noexcept override { return "verbs registration"; }
    std::string message(int ev) const override {
        std::string text = "ibv_reg_mr failed: " + errno_text(ev);
        if (ev != ENOMEM && ev != EPERM && ev != EAGAIN) return text;
        rlimit rl{};
        std::string limit = "unknown";
        if (::getrlimit(RLIMIT_MEMLOCK, &rl) == 0)
            limit = rl.rlim_cur == RLIM_INFINITY ? std::string("unlimited")
                                                 : std::to_string(rl.rlim_cur / 1024) + " KiB";
        return text + "; the NIC pins registered memory and this process may lock " + limit +
               " (ulimit -l): set max locked memory to 'unlimited' (ulimit -l unlimited in the "
               "job's shell, memlock in /etc/security/limits.conf, LimitMEMLOCK=infinity for a "
               "systemd service, --ulimit memlock=-1 for a container)";
    }
};

const registration_category& registration_errors() {
    static const registration_category c;
    return c;
}

std::string range_text(const void* p, std::size_t n) {
    char b[64];
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    std::snprintf(b, sizeof b, "[0x%" PRIxPTR ", 0x%" PRIxPTR ")", a, a + n);
    return b;
}

// RoCE needs a GID to route to. Prefer RoCE v2 with an IPv4-mapped address (routable, what
// most fabrics configure), then any RoCE v2, then whatever index 0 holds.
int choose_gid(ibv_context* ctx, std::uint8_t port, int table_length, ibv_gid& out) {
    int best = -1, best_rank = -1;
    for (int i = 0; i < table_length; ++i) {
        ibv_gid_entry e{};
        if (ibv_query_gid_ex(ctx, port, static_cast<std::uint32_t>(i), &e, 0) != 0)
            continue;  // ENODATA: an empty slot
        const std::uint8_t* g = e.gid.raw;
        const bool v4 = std::all_of(g, g + 10, [](std::uint8_t x) { return x == 0; }) &&
                        g[10] == 0xff && g[11] == 0xff;
        const int rank = e.gid_type == IBV_GID_TYPE_ROCE_V2 ? (v4 ? 2 : 1) : 0;
        if (rank > best_rank) {
            best = i;
            best_rank = rank;
            out = e.gid;
        }
    }
    if (best < 0 && ibv_query_gid(ctx, port, 0, &out) == 0) best = 0;
    return best;
}

}  // namespace

class verbs_provider final : public provider {
public:
    verbs_provider(scheduler& sched, std::uint32_t rank, std::uint32_t num_pes)
        : _sched(sched), _rank(rank), _qps(num_pes), _poller(*this), _rng(std::random_device{}()) {}
    ~verbs_provider() override;

    /// Opens the first device with an active port and makes the PD, channel and CQ;
    /// nullopt, or why not.
    std::optional<std::string> open();
    /// Registers the poller and starts watching the channel.
    void start();

    provider_kind kind() const noexcept override { return provider_kind::verbs; }
    capabilities caps() const noexcept override {
        capabilities c;
        c.local_registration = true;
        c.max_transfer = _max_transfer;
        // RC HCAs place an RDMA WRITE in order; the eager put channel's footer-last write
        // relies on it, as MVAPICH's RDMA fast path and Open MPI's openib eager RDMA do
        // (docs/rdma.md, "Channels written by put").
        c.put_in_order = true;
        return c;
    }
    // A queue pair is per peer: the layer asks with address_blob_for. An empty blob is
    // refused by whoever reads it.
    std::vector<std::byte> address_blob() override { return {}; }
    std::vector<std::byte> address_blob_for(std::uint32_t pe) override;
    std::optional<std::string> connect_peer(std::uint32_t pe,
                                            std::span<const std::byte> blob) override;
    void post_get(std::uint32_t pe, std::span<std::byte> local, remote_memory remote,
                  op_completion& done) override {
        start_op(pe, local.data(), local.size(), remote, false, done);
    }
    void post_put(std::uint32_t pe, std::span<const std::byte> local, remote_memory remote,
                  op_completion& done) override {
        start_op(pe, const_cast<std::byte*>(local.data()), local.size(), remote, true, done);
    }
    void peer_lost(std::uint32_t pe) override;
    std::error_code register_memory(std::byte* address, std::size_t length,
                                    registration& out) override;
    void deregister_memory(registration& r) noexcept override;

private:
    struct verbs_op {
        op_completion* done = nullptr;
        std::uint32_t pe = 0;
        bool write = false;
        std::byte* local = nullptr;
        std::uint64_t length = 0;
        remote_memory remote;
        registered local_reg;         // held until the NIC is done with the buffer
        std::uint64_t posted = 0;     // bytes handed to the NIC so far
        std::uint32_t in_flight = 0;  // its WRs not reaped yet
        bool stop = false;            // post no more of it (an error, the peer is gone)
        op_result result;
    };
    struct queue_pair {
        ibv_qp* qp = nullptr;
        verbs_address local;
        bool connected = false;           // RTS
        bool lost = false;                // peer_lost(): moved to ERR
        std::optional<op_result> failed;  // a WR failed: the NIC moved the QP to ERR
        std::uint32_t in_flight = 0;
        std::deque<verbs_op*> waiting;  // not fully posted yet, in order
    };
    class cq_poller final : public poller {
    public:
        explicit cq_poller(verbs_provider& p) : _p(p) {}
        bool poll() override { return _p.reap(); }
        bool try_sleep() override { return _p.try_sleep(); }

    private:
        verbs_provider& _p;
    };

    std::string where() const { return _device + " port " + std::to_string(_port); }
    queue_pair* qp_for(std::uint32_t pe, std::string* why);
    void start_op(std::uint32_t pe, std::byte* local, std::size_t size, remote_memory remote,
                  bool write, op_completion& done);
    void pump(queue_pair& q);
    void fail_waiting(queue_pair& q, const op_result& r);
    void finish(verbs_op* op);
    void on_completion(const ibv_wc& wc);
    op_result result_of(const ibv_wc& wc, const verbs_op& op) const;
    bool reap();
    bool try_sleep();
    void take_events() noexcept;
    static task<void> channel_task(verbs_provider* self);

    scheduler& _sched;
    std::uint32_t _rank;
    std::vector<queue_pair> _qps;  // by PE; never resized, so references stay valid
    cq_poller _poller;
    std::mt19937 _rng;

    ibv_context* _ctx = nullptr;
    ibv_pd* _pd = nullptr;
    ibv_comp_channel* _channel = nullptr;
    ibv_cq* _cq = nullptr;
    std::string _device;
    std::uint8_t _port = 0;
    ibv_port_attr _port_attr{};
    int _gid_index = 0;
    ibv_gid _gid{};
    std::uint32_t _send_depth = 0;      // WRs per queue pair
    std::uint32_t _cq_depth = 0;        // WRs in flight in all: never more than the CQ holds
    std::uint8_t _responder_depth = 1;  // reads of ours a peer may have in flight
    std::uint8_t _initiator_depth = 1;  // reads we may have in flight per queue pair
    std::size_t _max_transfer = 0;

    std::uint32_t _in_flight = 0;  // WRs posted, not reaped
    std::size_t _waiting = 0;      // ops in some queue pair's waiting queue
    bool _armed = false;           // ibv_req_notify_cq done, its event not taken yet
    bool _watching = false;        // the channel task polls the fd
    bool _poller_added = false;
    bool _poll_error_said = false;
    task_scope _tasks{"verbs provider"};
};

std::optional<std::string> verbs_provider::open() {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (!list) return no_device_list(errno);
    std::string seen;  // the ports that are not active, for the message
    std::string first_name;
    for (int i = 0; i < n && !_ctx; ++i) {
        const std::string name = ibv_get_device_name(list[i]);
        if (i == 0) first_name = name;
        ibv_context* ctx = ibv_open_device(list[i]);
        if (!ctx) {
            const int err = errno;  // before anything that may allocate
            seen += (seen.empty() ? "" : ", ") + name + ": ibv_open_device: " + errno_text(err);
            continue;
        }
        ibv_device_attr da{};
        if (const int err = ibv_query_device(ctx, &da)) {
            seen += (seen.empty() ? "" : ", ") + name + ": ibv_query_device: " + errno_text(err);
            ibv_close_device(ctx);
            continue;
        }
        for (std::uint8_t p = 1; p <= da.phys_port_cnt && !_ctx; ++p) {
            ibv_port_attr pa{};
            if (ibv_query_port(ctx, p, &pa) != 0) continue;
            if (pa.state != IBV_PORT_ACTIVE) {
                seen += (seen.empty() ? "" : ", ") + name + " port " + std::to_string(p) + ": " +
                        port_state_name(pa.state);
                continue;
            }
            _ctx = ctx;
            _device = name;
            _port = p;
            _port_attr = pa;
            // Clamp what we ask for to what the device grants.
            _send_depth = std::min<std::uint32_t>(wanted_send_depth,
                                                  static_cast<std::uint32_t>(da.max_qp_wr));
            _cq_depth = static_cast<std::uint32_t>(std::min(wanted_cq_depth, da.max_cqe));
            _responder_depth =
                static_cast<std::uint8_t>(std::min(wanted_rd_atomic, da.max_qp_rd_atom));
            _initiator_depth =
                static_cast<std::uint8_t>(std::min(wanted_rd_atomic, da.max_qp_init_rd_atom));
            if (da.max_sge < 1 || _send_depth == 0 || _cq_depth == 0 || _responder_depth == 0 ||
                _initiator_depth == 0) {
                ibv_free_device_list(list);
                return "device " + name + " grants no RDMA reads or no work requests (max_qp_wr " +
                       std::to_string(da.max_qp_wr) + ", max_sge " + std::to_string(da.max_sge) +
                       ", max_qp_rd_atom " + std::to_string(da.max_qp_rd_atom) + ")";
            }
        }
        if (!_ctx) ibv_close_device(ctx);
    }
    // Opened contexts stay valid after the list is freed (ibv_get_device_list(3)).
    ibv_free_device_list(list);
    if (n == 0) return std::string("no RDMA device");
    if (!_ctx)
        return (n == 1 ? "device " + first_name + " has no usable active port ("
                       : "no RDMA device has a usable active port (") +
               seen +
               "; ibv_devinfo shows the ports: check the link, and on InfiniBand that a subnet "
               "manager runs)";

    _max_transfer = _port_attr.max_msg_sz ? _port_attr.max_msg_sz : std::size_t{1} << 30;
    if (_port_attr.link_layer == IBV_LINK_LAYER_ETHERNET) {
        _gid_index = choose_gid(_ctx, _port, _port_attr.gid_tbl_len, _gid);
        if (_gid_index < 0)
            return "device " + where() +
                   " is RoCE but has no GID (no IP address on its "
                   "network interface?)";
    } else {
        if (_port_attr.lid == 0)
            return "device " + where() + " has no LID (no subnet manager has configured it)";
        if (ibv_query_gid(_ctx, _port, 0, &_gid) != 0) std::memset(&_gid, 0, sizeof _gid);
    }
    // errno is read before the message is built: allocating may change it.
    const auto failed = [&](const char* call) {
        const std::string err = errno_text(errno);
        return std::string(call) + " on " + _device + " failed: " + err;
    };
    _pd = ibv_alloc_pd(_ctx);
    if (!_pd) return failed("ibv_alloc_pd");
    _channel = ibv_create_comp_channel(_ctx);
    if (!_channel) return failed("ibv_create_comp_channel");
    // Non-blocking: the channel task takes events only after io_uring said the fd is ready,
    // and never blocks the loop on a spurious readiness.
    const int fl = ::fcntl(_channel->fd, F_GETFL);
    if (fl < 0 || ::fcntl(_channel->fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return failed("fcntl(O_NONBLOCK) of the completion channel");
    _cq = ibv_create_cq(_ctx, static_cast<int>(_cq_depth), nullptr, _channel, 0);
    if (!_cq) return failed("ibv_create_cq");
    return std::nullopt;
}

void verbs_provider::start() {
    _sched.add_poller(_poller);
    _poller_added = true;
    if (_sched.io()) {
        _watching = true;
        _tasks.spawn(channel_task(this), "verbs completion channel", _sched);
    }
}

task<void> verbs_provider::channel_task(verbs_provider* self) {
    // Keeps a poll on the channel's fd in io_uring: a completion on an armed CQ makes it
    // readable and wakes a sleeping scheduler, whose poller then reaps the CQ.
    for (;;) {
        const int r = co_await poll_fd(self->_channel->fd, POLLIN);
        if (r < 0) break;  // -ECANCELED: the provider is closing
        self->take_events();
    }
    self->_watching = false;
}

void verbs_provider::take_events() noexcept {
    ibv_cq* cq = nullptr;
    void* context = nullptr;
    unsigned events = 0;
    while (ibv_get_cq_event(_channel, &cq, &context) == 0)
        ++events;
    if (events == 0) return;
    _armed = false;  // the arm is one-shot: it fired
    // Every event got must be acked before ibv_destroy_cq; one ack per batch (it locks).
    ibv_ack_cq_events(_cq, events);
}

verbs_provider::~verbs_provider() {
    // Stop intake: the channel's poll is cancelled and reaped before the fd can go.
    _tasks.request_stop();
    if (_tasks.live()) _sched.run_until([&] { return _tasks.live() == 0; });
    if (_poller_added) _sched.remove_poller(_poller);
    // The NIC may still write into the buffers of WRs in flight: move every queue pair to
    // ERR, which flushes them, and reap until none is left.
    const op_result closing{op_status::failed, "verbs: the provider closed"};
    for (queue_pair& q : _qps) {
        if (!q.qp) continue;
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_ERR;
        ibv_modify_qp(q.qp, &attr, IBV_QP_STATE);
        if (!q.failed) q.failed = closing;
        fail_waiting(q, closing);
    }
    const auto deadline = clock::now() + std::chrono::seconds(10);
    while (_in_flight > 0 && clock::now() < deadline)
        reap();
    if (_in_flight > 0)
        std::fprintf(stderr,
                     "coverse: PE %u: verbs: %u work requests on %s never completed; their "
                     "buffers stay registered\n",
                     _rank, _in_flight, where().c_str());
    // Memory regions go before the PD they belong to.
    cache().release_unused();
    for (queue_pair& q : _qps)
        if (q.qp) ibv_destroy_qp(q.qp);
    if (_cq) {
        take_events();
        ibv_destroy_cq(_cq);
    }
    if (_channel) ibv_destroy_comp_channel(_channel);
    if (_pd) ibv_dealloc_pd(_pd);
    if (_ctx) ibv_close_device(_ctx);
}

// The queue pair for `pe`, created and moved to INIT on first need.
verbs_provider::queue_pair* verbs_provider::qp_for(std::uint32_t pe, std::string* why) {
    queue_pair& q = _qps[pe];
    if (q.qp) return &q;
    ibv_qp_init_attr ia{};
    ia.send_cq = _cq;
    ia.recv_cq = _cq;  // no receives are ever posted
    ia.qp_type = IBV_QPT_RC;
    ia.sq_sig_all = 0;  // each WR says IBV_SEND_SIGNALED itself
    ia.cap.max_send_wr = _send_depth;
    ia.cap.max_recv_wr = 1;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    ibv_qp* qp = ibv_create_qp(_pd, &ia);
    if (!qp) {
        const std::string err = errno_text(errno);
        *why = "ibv_create_qp on " + _device + " failed: " + err;
        return nullptr;
    }
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = _port;
    attr.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    if (const int err = ibv_modify_qp(
            qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
        ibv_destroy_qp(qp);
        *why = "ibv_modify_qp to INIT on " + where() + " failed: " + errno_text(err);
        return nullptr;
    }
    q.qp = qp;
    q.local.qpn = qp->qp_num;
    q.local.psn = _rng() & 0xFF'FFFF;
    q.local.lid = _port_attr.lid;
    q.local.port = _port;
    q.local.mtu = static_cast<std::uint8_t>(_port_attr.active_mtu);
    q.local.link_layer = _port_attr.link_layer == IBV_LINK_LAYER_ETHERNET ? verbs_link_ethernet
                                                                          : verbs_link_infiniband;
    q.local.rd_atomic = _responder_depth;
    std::memcpy(q.local.gid.data(), _gid.raw, q.local.gid.size());
    return &q;
}

std::vector<std::byte> verbs_provider::address_blob_for(std::uint32_t pe) {
    std::string why;
    const queue_pair* q = pe < _qps.size() ? qp_for(pe, &why) : nullptr;
    if (!q) {
        // The peer refuses the empty blob and reads us with tcp; say the real cause here.
        std::fprintf(stderr, "coverse: PE %u: verbs: no queue pair for PE %u: %s\n", _rank, pe,
                     why.c_str());
        return {};
    }
    return encode_verbs_address(q->local);
}

// RC needs both ends connected: the peer's blob reaches us because it offered verbs, and
// ours reaches it because we did, so each side moves its own queue pair here.
std::optional<std::string> verbs_provider::connect_peer(std::uint32_t pe,
                                                        std::span<const std::byte> blob) {
    const std::string peer = "PE " + std::to_string(pe);
    if (pe >= _qps.size() || pe == _rank) return peer + " is not a peer of this job";
    std::string why;
    const auto remote = decode_verbs_address(blob, &why);
    if (!remote) return peer + " sent " + why;
    queue_pair* q = qp_for(pe, &why);
    if (!q) return why;
    if (remote->link_layer != q->local.link_layer)
        return peer + "'s port and ours (" + where() + ") have different link layers " +
               "(InfiniBand and Ethernet cannot reach each other)";
    if (remote->link_layer == verbs_link_infiniband && remote->lid == 0)
        return peer + "'s InfiniBand port has no LID";
    if (q->connected) return peer + " sent its verbs address twice";

    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = static_cast<ibv_mtu>(std::min(q->local.mtu, remote->mtu));
    attr.dest_qp_num = remote->qpn;
    attr.rq_psn = remote->psn;
    attr.max_dest_rd_atomic = _responder_depth;
    attr.min_rnr_timer = 12;  // 0.64 ms; we post no receives, so no RNR NAK is ever sent
    attr.ah_attr.dlid = remote->lid;
    attr.ah_attr.sl = 0;
    attr.ah_attr.src_path_bits = 0;
    attr.ah_attr.port_num = _port;
    if (remote->link_layer == verbs_link_ethernet) {
        // RoCE packets are routed by GID: a global route header is required.
        attr.ah_attr.is_global = 1;
        std::memcpy(attr.ah_attr.grh.dgid.raw, remote->gid.data(), remote->gid.size());
        attr.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(_gid_index);
        attr.ah_attr.grh.hop_limit = 64;
    }
    if (const int err =
            ibv_modify_qp(q->qp, &attr,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        return "ibv_modify_qp to RTR towards " + peer + " on " + where() +
               " failed: " + errno_text(err);
    attr = ibv_qp_attr{};
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = 14;   // 4.096 us * 2^14 = 67 ms per try before a retransmission
    attr.retry_cnt = 7;  // then IBV_WC_RETRY_EXC_ERR: the peer is gone
    attr.rnr_retry = 7;
    attr.sq_psn = q->local.psn;
    attr.max_rd_atomic = std::min(_initiator_depth, remote->rd_atomic);
    if (const int err =
            ibv_modify_qp(q->qp, &attr,
                          IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                              IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
        return "ibv_modify_qp to RTS towards " + peer + " on " + where() +
               " failed: " + errno_text(err);
    q->connected = true;
    return std::nullopt;
}

// ---------------------------------------------------------------------------------------
// Operations

void verbs_provider::start_op(std::uint32_t pe, std::byte* local, std::size_t size,
                              remote_memory remote, bool write, op_completion& done) {
    const char* what = write ? "RDMA WRITE to" : "RDMA READ from";
    const std::string peer = "PE " + std::to_string(pe);
    if (pe >= _qps.size() || !_qps[pe].connected) {
        done.complete({op_status::failed, std::string("verbs: ") + what + " " + peer +
                                              ": no connected queue pair to that PE"});
        return;
    }
    queue_pair& q = _qps[pe];
    if (q.lost) {
        done.complete({op_status::peer_lost, "verbs: " + peer + " is gone"});
        return;
    }
    if (q.failed) {
        done.complete({q.failed->status,
                       "verbs: the queue pair to " + peer + " failed before: " + q.failed->detail});
        return;
    }
    if (size == 0) {
        done.complete({});
        return;
    }
    if (remote.key > 0xFFFF'FFFFu || (remote.length != 0 && remote.length < size)) {
        done.complete({op_status::refused,
                       std::string("verbs: ") + what + " " + peer + " names key " +
                           std::to_string(remote.key) + " and " + std::to_string(remote.length) +
                           " bytes, which cannot hold " + std::to_string(size) + " bytes"});
        return;
    }
    auto* op = new verbs_op;
    op->done = &done;
    op->pe = pe;
    op->write = write;
    op->local = local;
    op->length = size;
    op->remote = remote;
    // The NIC writes a read's data into our buffer (and reads a write's from it): it must be
    // registered too, until the last WR is reaped.
    if (const std::error_code ec = cache().acquire(local, size, op->local_reg)) {
        delete op;
        done.complete({op_status::failed,
                       std::string("verbs: ") + what + " " + peer +
                           ": registering the local buffer " + range_text(local, size) + " (" +
                           std::to_string(size) + " bytes) failed: " + ec.message()});
        return;
    }
    q.waiting.push_back(op);
    ++_waiting;
    pump(q);
}

// Posts the waiting ops of `q` in order while the queue pair and the CQ have room.
void verbs_provider::pump(queue_pair& q) {
    while (!q.waiting.empty()) {
        verbs_op* op = q.waiting.front();
        while (!op->stop && op->posted < op->length) {
            if (q.in_flight >= _send_depth || _in_flight >= _cq_depth) return;  // back-pressure
            const auto n = static_cast<std::uint32_t>(
                std::min<std::uint64_t>(_max_transfer, op->length - op->posted));
            ibv_sge sge{};
            sge.addr = reinterpret_cast<std::uintptr_t>(op->local + op->posted);
            sge.length = n;
            sge.lkey = op->local_reg.get().local_key;
            ibv_send_wr wr{};
            wr.wr_id = reinterpret_cast<std::uintptr_t>(op);
            wr.sg_list = &sge;
            wr.num_sge = 1;
            wr.opcode = op->write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
            wr.send_flags = IBV_SEND_SIGNALED;
            wr.wr.rdma.remote_addr = op->remote.address + op->posted;
            wr.wr.rdma.rkey = static_cast<std::uint32_t>(op->remote.key);
            ibv_send_wr* bad = nullptr;
            if (const int err = ibv_post_send(q.qp, &wr, &bad)) {
                op->result = {op_status::failed,
                              std::string("verbs: ibv_post_send of an ") +
                                  (op->write ? "RDMA WRITE to" : "RDMA READ from") + " PE " +
                                  std::to_string(op->pe) + " failed: " + errno_text(err)};
                op->stop = true;
                break;
            }
            op->posted += n;
            ++op->in_flight;
            ++q.in_flight;
            ++_in_flight;
        }
        q.waiting.pop_front();
        --_waiting;
        if (op->in_flight == 0) finish(op);  // nothing of it reached the NIC
    }
}

// Ops not (fully) posted on `q` end with `r`; those with WRs in flight end when the NIC
// hands them back (flushed, once the queue pair is in ERR).
void verbs_provider::fail_waiting(queue_pair& q, const op_result& r) {
    std::deque<verbs_op*> waiting;
    waiting.swap(q.waiting);
    _waiting -= waiting.size();
    for (verbs_op* op : waiting) {
        op->stop = true;
        if (op->result.ok()) op->result = r;
        if (op->in_flight == 0) finish(op);
    }
}

void verbs_provider::finish(verbs_op* op) {
    op_completion* done = op->done;
    op_result r = std::move(op->result);
    delete op;  // releases the local registration
    done->complete(std::move(r));
}

// The one place a work completion's status becomes an op_status.
op_result verbs_provider::result_of(const ibv_wc& wc, const verbs_op& op) const {
    op_result r;
    const std::string peer = "PE " + std::to_string(op.pe);
    if (_qps[op.pe].lost) return {op_status::peer_lost, "verbs: " + peer + " is gone"};
    std::string hint;
    switch (wc.status) {
        case IBV_WC_RETRY_EXC_ERR:
        case IBV_WC_RNR_RETRY_EXC_ERR:
            r.status = op_status::peer_lost;
            hint =
                "; the peer's NIC does not answer: the PE died, the link is down, or its "
                "queue pair never reached RTR";
            break;
        case IBV_WC_REM_ACCESS_ERR:
            r.status = op_status::refused;
            hint =
                "; the peer has no memory registered under that key and range (a stale or "
                "forged key)";
            break;
        default:
            r.status = op_status::failed;
    }
    char vendor[16];
    std::snprintf(vendor, sizeof vendor, "0x%x", wc.vendor_err);
    // wc.opcode is not valid in an error completion (ibv_poll_cq(3)): the op knows.
    r.detail = std::string("verbs: ") + (op.write ? "RDMA WRITE of " : "RDMA READ of ") +
               std::to_string(op.length) + " bytes " + (op.write ? "to " : "from ") + peer +
               " failed on " + where() + ": " + ibv_wc_status_str(wc.status) + " (status " +
               std::to_string(static_cast<int>(wc.status)) + ", vendor error " + vendor + ")" +
               hint;
    return r;
}

void verbs_provider::on_completion(const ibv_wc& wc) {
    auto* op = reinterpret_cast<verbs_op*>(static_cast<std::uintptr_t>(wc.wr_id));
    queue_pair& q = _qps[op->pe];
    --op->in_flight;
    --q.in_flight;
    --_in_flight;
    bool first_failure = false;
    if (wc.status != IBV_WC_SUCCESS) {
        op_result r = result_of(wc, *op);
        if (op->result.ok()) op->result = r;
        op->stop = true;
        // The NIC moved the queue pair to ERR: everything after this flushes. Later ops
        // fail at once, naming the first cause.
        if (!q.failed) {
            q.failed = std::move(r);
            first_failure = true;
        }
    }
    if (op->in_flight == 0 && (op->stop || op->posted == op->length)) {
        // An op stopped half-posted is still the front of its queue.
        if (!q.waiting.empty() && q.waiting.front() == op) {
            q.waiting.pop_front();
            --_waiting;
        }
        finish(op);
    }
    if (first_failure) fail_waiting(q, *q.failed);
}

bool verbs_provider::reap() {
    if (_in_flight == 0) return false;  // only our own WRs make completions
    ibv_wc wc[16];
    const int n = ibv_poll_cq(_cq, 16, wc);
    if (n < 0) {
        if (!_poll_error_said)
            std::fprintf(stderr, "coverse: PE %u: verbs: ibv_poll_cq on %s failed (%d)\n", _rank,
                         where().c_str(), n);
        _poll_error_said = true;
        return false;
    }
    for (int i = 0; i < n; ++i)
        on_completion(wc[i]);
    if (n > 0 && _waiting > 0)
        for (queue_pair& q : _qps)
            if (!q.waiting.empty()) pump(q);
    return n > 0;
}

bool verbs_provider::try_sleep() {
    if (_in_flight == 0) return true;  // nothing can complete, so nothing to wake for
    if (!_watching) return false;      // no fd in io_uring (no ring): keep polling
    if (!_armed) {
        if (ibv_req_notify_cq(_cq, 0) != 0) return false;
        _armed = true;
    }
    // A completion that arrived before the arm raises no event: look once more.
    return !reap();
}

void verbs_provider::peer_lost(std::uint32_t pe) {
    if (pe >= _qps.size()) return;
    queue_pair& q = _qps[pe];
    if (q.lost) return;
    q.lost = true;
    if (!q.qp) return;
    // ERR makes the NIC flush every WR of this queue pair with IBV_WC_WR_FLUSH_ERR; those ops
    // complete as they are reaped (their buffers are the NIC's until then), as peer_lost.
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(q.qp, &attr, IBV_QP_STATE);
    fail_waiting(q, {op_status::peer_lost, "verbs: PE " + std::to_string(pe) + " is gone"});
}

std::error_code verbs_provider::register_memory(std::byte* address, std::size_t length,
                                                registration& out) {
    ibv_mr* mr = ibv_reg_mr(_pd, address, length, mr_access);
    if (!mr) return {errno ? errno : ENOMEM, registration_errors()};
    out.key = mr->rkey;
    out.local_key = mr->lkey;
    out.native = mr;
    return {};
}

void verbs_provider::deregister_memory(registration& r) noexcept {
    // Fails only while a memory window is bound to it, and we bind none.
    if (auto* mr = static_cast<ibv_mr*>(r.native)) ibv_dereg_mr(mr);
    r = registration{};
}

std::unique_ptr<provider> make_verbs_provider(scheduler& sched, std::uint32_t rank,
                                              std::uint32_t num_pes, std::string* why) {
    auto p = std::make_unique<verbs_provider>(sched, rank, num_pes);
    if (auto problem = p->open()) {
        if (why) *why = std::move(*problem);
        return nullptr;
    }
    p->start();
    return p;
}

}  // namespace coverse::rdma
