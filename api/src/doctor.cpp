// doctor (PE side): the responder thread on the doctor channel and the PE's state snapshot
// (pe_core::fill_state). Stages of one answer: request read (state_request frame) ->
// progress only: answered from pe_activity at once; full: a snapshot posted to the
// scheduler (cross-thread post queue), waited for 0.3 s -> reply written (state_reply).
// A scheduler that does not take the post in time is busy: the reply then says which
// handler runs and for how long, from the counters alone. docs/doctor.md.
#include "doctor.hpp"

#include <cxxabi.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <coverse/net/frame_reader.hpp>
#include <coverse/net/wire.hpp>

#include "pe_core.hpp"

namespace coverse::detail {

namespace {

using clock = std::chrono::steady_clock;

/// How long the responder waits for the scheduler to take a snapshot before it answers
/// by itself ("busy").
constexpr auto snapshot_limit = std::chrono::milliseconds(300);
/// The responder samples the counters this often: "last heard" and "in handler for" are
/// exact to this much, with no clock read on the PE thread.
constexpr int sample_ms = 100;

double seconds_between(clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

// The symbol of a handler function, demangled; "" when the dynamic symbol table does not
// have it (link the program with -rdynamic to see static handlers' names).
std::string symbol_of(const void* fn) {
    if (!fn) return {};
    Dl_info info{};
    if (::dladdr(fn, &info) == 0 || !info.dli_sname) return {};
    int status = 0;
    char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
    std::string name = status == 0 && demangled ? demangled : info.dli_sname;
    std::free(demangled);
    return name;
}

// Gives the calling thread a file table of its own that holds only `keep` (the responder's
// descriptors). While a second thread shares the PE thread's table, the kernel takes and
// drops a reference to the file on every system call the PE thread makes on a socket
// (fdget/fput skip that only for a table with one user): ~2 % of the CPU samples of an 8 B
// ping-pong over loopback TCP (docs/perf.md, stop 41). Without close_range (kernels
// before 5.9) the table stays shared: the copy would keep every socket of the PE open after
// the PE closes it, and a peer would never see it end.
void keep_only(std::array<int, 4> keep) noexcept {
    if (::close_range(~0U, ~0U, 0) != 0) return;  // closes nothing: says whether it exists
    if (::unshare(CLONE_FILES) != 0) return;
    std::sort(keep.begin(), keep.end());
    unsigned from = 0;
    for (const int fd : keep) {
        if (fd < 0 || static_cast<unsigned>(fd) < from) continue;
        if (static_cast<unsigned>(fd) > from) ::close_range(from, static_cast<unsigned>(fd) - 1, 0);
        from = static_cast<unsigned>(fd) + 1;
    }
    ::close_range(from, ~0U, 0);
}

bool send_all(int fd, const std::vector<std::byte>& bytes) {
    std::size_t sent = 0;
    while (sent < bytes.size()) {
        const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        sent += static_cast<std::size_t>(n);
    }
    return true;
}

}  // namespace

struct pe_doctor::shared {
    shared(pe_core& c, int channel) : core(c), fd(channel) {}
    pe_core& core;  // used on the PE thread only, and only while !cancelled
    int fd;
    int stop_fd = -1;
    int wake_fd = -1;  // the PE scheduler's eventfd, which post() writes to wake it
    clock::time_point started = clock::now();

    std::mutex lock;
    std::condition_variable taken;
    std::uint64_t asked = 0, answered = 0;  // snapshot ids
    std::optional<net::doctor::pe_state> snapshot;
    unsigned queued = 0;  // snapshots posted and not yet run
    bool cancelled = false;

    // The responder's samples of pe_activity (its thread only).
    std::vector<std::uint64_t> heard_count;
    std::vector<clock::time_point> heard_at;  // min(): never
    std::uint64_t seen_entries = ~0ull;
    std::int32_t seen_handler = -2;
    clock::time_point handler_since{};

    void sample(clock::time_point now);
    void run();
    void answer(std::uint32_t tag, net::state_want want);
    net::doctor::pe_state counters(clock::time_point now) const;
    std::optional<net::doctor::pe_state> ask_scheduler(const std::shared_ptr<shared>& self);
    std::weak_ptr<shared> self;
};

void pe_doctor::shared::sample(clock::time_point now) {
    const pe_activity& a = core.activity();
    for (std::uint32_t p = 0; p < heard_count.size(); ++p) {
        const std::uint64_t c = a.heard(p);
        if (c != heard_count[p]) {
            heard_count[p] = c;
            heard_at[p] = now;
        }
    }
    const std::uint64_t entries = a.handler_entries();
    const std::int32_t h = a.handler();
    if (entries != seen_entries || h != seen_handler) {
        seen_entries = entries;
        seen_handler = h;
        handler_since = now;
    }
}

net::doctor::pe_state pe_doctor::shared::counters(clock::time_point now) const {
    const pe_activity& a = core.activity();
    net::doctor::pe_state s;
    s.pe = core.pe();
    s.pid = ::getpid();
    s.uptime = seconds_between(started, now);
    s.progress = a.progress();
    s.handler = a.handler();
    s.in_handler = s.handler >= 0;
    if (s.in_handler) {
        s.handler_name = symbol_of(a.handler_fn());
        s.handler_seconds = seconds_between(handler_since, now);
    }
    for (std::uint32_t p = 0; p < heard_count.size(); ++p) {
        if (p == s.pe) continue;
        net::doctor::peer_entry e;
        e.pe = p;
        e.messages = heard_count[p];
        e.heard_ago =
            heard_at[p] == clock::time_point::min() ? -1 : seconds_between(heard_at[p], now);
        s.peers.push_back(e);
    }
    return s;
}

std::optional<net::doctor::pe_state> pe_doctor::shared::ask_scheduler(
    const std::shared_ptr<shared>& me) {
    std::uint64_t id;
    {
        const std::lock_guard g(lock);
        id = ++asked;
        ++queued;
    }
    // The snapshot runs on the PE thread, wherever its loop is (the outer loop, a nested
    // sync_wait, CsdSchedulePoll inside a handler); it only reads.
    core.sched().post([me, id] {
        {
            const std::lock_guard g(me->lock);
            --me->queued;
            if (me->cancelled) return;
        }
        net::doctor::pe_state st;
        me->core.fill_state(st);
        const std::lock_guard g(me->lock);
        me->snapshot = std::move(st);
        me->answered = id;
        me->taken.notify_all();
    });
    std::unique_lock g(lock);
    if (!taken.wait_for(g, snapshot_limit, [&] { return answered >= id; })) return std::nullopt;
    return std::exchange(snapshot, std::nullopt);
}

void pe_doctor::shared::answer(std::uint32_t tag, net::state_want want) {
    const auto now = clock::now();
    sample(now);
    net::doctor::pe_state s = counters(now);
    if (want == net::state_want::full) {
        if (auto snap = ask_scheduler(self.lock())) {
            s.full = true;
            s.waits = std::move(snap->waits);
            s.ready_tasks = snap->ready_tasks;
            s.network_queue = snap->network_queue;
            s.scheduler_queue = snap->scheduler_queue;
            s.deliveries = snap->deliveries;
            s.timers = snap->timers;
            s.handles_in_use = snap->handles_in_use;
            s.handles_user_held = snap->handles_user_held;
            s.handles_total = snap->handles_total;
            s.handles = std::move(snap->handles);
            s.barrier_epoch = snap->barrier_epoch;
            s.connect = std::move(snap->connect);
            s.links = std::move(snap->links);
        } else {
            s.note =
                "its scheduler did not take the state request within 0.3 s: busy in a "
                "handler or a computation that does not return to the scheduler";
        }
    }
    const auto payload = net::doctor::encode(s);
    net::frame_header h;
    h.type = net::frame_type::state_reply;
    h.source_pe = core.pe();
    h.payload_length = static_cast<std::uint32_t>(payload.size());
    h.tag = tag;
    const auto head = net::encode_header(h);
    std::vector<std::byte> bytes(head.begin(), head.end());
    bytes.insert(bytes.end(), payload.begin(), payload.end());
    send_all(fd, bytes);
}

void pe_doctor::shared::run() {
    keep_only({STDERR_FILENO, fd, stop_fd, wake_fd});
    net::frame_reader reader(net::decode_limits{net::default_max_payload, core.num_pes(), true});
    std::byte buf[4096];
    for (;;) {
        pollfd fds[2] = {{fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
        const int r = ::poll(fds, 2, sample_ms);
        sample(clock::now());
        if (r < 0 && errno != EINTR) return;
        if (r <= 0) continue;
        if (fds[1].revents != 0) return;
        if (fds[0].revents == 0) continue;
        const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) return;  // the launcher is gone
        reader.feed_all(std::span(buf, static_cast<std::size_t>(n)), [&](net::frame&& f) {
            if (f.header.type != net::frame_type::state_request) return;
            const auto req = net::decode_state_request(f.payload_bytes(), reader.limits());
            if (req.ok()) answer(f.header.tag, req.value.want);
        });
        if (reader.failed()) return;  // not the launcher's protocol: stop answering
    }
}

std::unique_ptr<pe_doctor> pe_doctor::start_from_env(pe_core& core) {
    const char* v = std::getenv(net::doctor::channel_env);
    if (!v || !*v) return nullptr;
    char* end = nullptr;
    const long fd = std::strtol(v, &end, 10);
    // Not inherited by processes this one starts (its own children are not PEs).
    ::unsetenv(net::doctor::channel_env);
    if (*end != '\0' || fd < 0 || ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC) != 0)
        return nullptr;
    return std::unique_ptr<pe_doctor>(new pe_doctor(core, static_cast<int>(fd)));
}

pe_doctor::pe_doctor(pe_core& core, int fd) : _shared(std::make_shared<shared>(core, fd)) {
    _shared->self = _shared;
    _shared->stop_fd = ::eventfd(0, EFD_CLOEXEC);
    _shared->wake_fd = core.sched().wake_fd();
    const std::uint32_t n = core.activity().num_pes();
    _shared->heard_count.assign(n, 0);
    _shared->heard_at.assign(n, clock::time_point::min());
    _shared->sample(clock::now());
    _thread = std::thread([s = _shared] { s->run(); });
    pthread_setname_np(_thread.native_handle(), "coverse-doctor");  // top -H, /proc: named
}

pe_doctor::~pe_doctor() {
    {
        const std::lock_guard g(_shared->lock);
        _shared->cancelled = true;  // a snapshot still queued on the scheduler does nothing
    }
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto w = ::write(_shared->stop_fd, &one, sizeof one);
    _thread.join();
    // A snapshot posted but not run yet owns an allocation: let the loop take it (it does
    // nothing now), so nothing is left in the queue the scheduler drops at its end.
    for (;;) {
        {
            const std::lock_guard g(_shared->lock);
            if (_shared->queued == 0) break;
        }
        _shared->core.sched().run_once();
    }
    ::close(_shared->stop_fd);
    ::close(_shared->fd);
}

// ---------------------------------------------------------------------------------------
// The snapshot, on the PE thread

void pe_core::start_doctor() {
    _activity.reset(_num_pes);
    _doctor = pe_doctor::start_from_env(*this);
}

void pe_core::fill_state(net::doctor::pe_state& s) {
    s.full = true;
    _sched->waits().for_each([&](const wait_reason& r) {
        std::string detail = r.detail ? r.detail : "";
        if (r.kind == wait_kind::barrier && r.id < 0x8000'0000u) {
            int children[4];
            const int n = span_children(static_cast<int>(_pe), children);
            const auto it = _tree_arrived.find(static_cast<std::uint32_t>(r.id));
            const std::uint32_t mask = it == _tree_arrived.end() ? 0 : it->second;
            std::vector<std::uint32_t> arrived;
            for (int i = 0; i < n; ++i)
                if (mask & (1u << i)) arrived.push_back(static_cast<std::uint32_t>(children[i]));
            if (n > 0)
                detail += "; children arrived: " +
                          (arrived.empty() ? "none" : net::doctor::pe_list(arrived));
        }
        for (auto& e : s.waits) {
            if (e.kind == r.kind && e.peer == r.peer && e.id == r.id && e.detail == detail) {
                ++e.count;
                return;
            }
        }
        s.waits.push_back(net::doctor::wait_entry{r.kind, r.peer, r.id, std::move(detail), 1});
    });
    s.ready_tasks = _sched->ready_tasks();
    s.network_queue = _net_queue.size();
    s.scheduler_queue = _sched_queue.size();
    s.deliveries = _sched->pending_deliveries();
    s.timers = _sched->pending_timers();
    // Handles by protocol; a rendezvous handle still pending waits for its get-done (the
    // rdma layer completes it from a callback, not from a suspended task).
    static constexpr const char* protocol_names[] = {"stream/inline", "stream", "rndv/get",
                                                     "eager/short", "eager/long"};
    std::uint32_t by_protocol[5] = {0, 0, 0, 0, 0};
    for (std::uint32_t i = 0; i < _slots.size(); ++i) {
        const handle_slot& slot = _slots[i];
        if (!slot.in_use) continue;
        ++s.handles_in_use;
        if (slot.user_owned && !slot.released) ++s.handles_user_held;
        ++by_protocol[std::min<std::uint8_t>(slot.protocol, 4)];
        if (slot.protocol == static_cast<std::uint8_t>(send_protocol::rendezvous) &&
            slot.pending > 0)
            s.waits.push_back(net::doctor::wait_entry{
                wait_kind::get_done, slot.dest, i, "rndv/get: the receiver has not fetched it", 1});
    }
    s.handles_total = static_cast<std::uint32_t>(_slots.size());
    for (int p = 0; p < 5; ++p)
        if (by_protocol[p]) s.handles.push_back({protocol_names[p], by_protocol[p]});
    s.barrier_epoch = _barrier_epoch;
    if (_mesh) {
        s.connect = _lazy ? "lazy" : "eager";
        for (const net::link_info& l : _mesh->links())
            s.links.push_back({l.pe, net::to_string(l.state), l.lazily, l.dialed, l.up_at});
    }
}

}  // namespace coverse::detail
