// mesh: full-mesh or on-first-use set-up with hello checks, per-connection ordered writer
// and reader tasks, peer-failure detection, and the disconnect handshake.
#include <coverse/net/mesh.hpp>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <utility>

#include <coverse/alloc/config.hpp>
#include <coverse/runtime/event.hpp>
#include <coverse/runtime/scheduler.hpp>
#include <coverse/runtime/timer.hpp>
#include <coverse/runtime/wait_reason.hpp>
#include <coverse/runtime/when.hpp>

namespace coverse::net {

namespace {
constexpr std::size_t read_chunk = 64 * 1024;
// Payload bytes still missing at or above this go straight into the frame's buffer.
constexpr std::size_t direct_receive_min = 16 * 1024;
constexpr std::size_t batch_frames = 64;
constexpr std::size_t batch_bytes = 1 << 20;
// post_copy(): the bytes of small frames a connection holds copied, back to back, as one
// queued entry. Up to 64 KiB: four of the largest frames the fast path copies (16 KiB), a
// burst of ~2 000 small ones; the rest wait their turn by post(). It starts at 4 KiB (a
// reply, a short burst) and doubles as bursts need: a PE of a large all-to-all job keeps
// little per connection.
constexpr std::size_t copies_first = 4 * 1024;
constexpr std::size_t copies_most = 64 * 1024;
constexpr std::uint32_t any_pe = 0xFFFF'FFFF;

std::string errno_text(int negative_errno) {
    return std::strerror(-negative_errno);
}

std::string hex(std::uint64_t v) {
    char b[24];
    std::snprintf(b, sizeof b, "0x%016" PRIx64, v);
    return b;
}

task<void> until_set(event* e) {
    co_await e->wait();
}

std::string seconds(std::chrono::milliseconds d) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3g s", static_cast<double>(d.count()) / 1000.0);
    return b;
}
}  // namespace

std::chrono::milliseconds connection_timeout_from_env() {
    const auto v = alloc::env_setting("CONNECTION_TIMEOUT");
    if (!v) return std::chrono::seconds(300);
    const auto us = alloc::parse_duration_us(v->value, 1'000'000);  // the settings' one parser
    if (!us || *us == 0)
        throw std::invalid_argument("coverse: " + v->variable + "=" + v->value +
                                    " is not a positive number of seconds (0.5, 500ms, 2min)");
    return std::chrono::milliseconds(static_cast<long long>(*us / 1000));
}

std::uint64_t max_message_from_env() {
    const auto v = alloc::env_setting("MAX_MESSAGE");
    if (!v) return default_max_message;
    const auto n = alloc::parse_size(v->value);  // the settings' one parser: 64M works
    if (!n || *n == 0 || *n > default_max_message)
        throw std::invalid_argument("coverse: " + v->variable + "=" + v->value +
                                    " is not a size in bytes from 1 to 2147483647 (the largest "
                                    "Converse message); set the same value on every PE");
    return *n;
}

const char* to_string(connection_state s) noexcept {
    switch (s) {
        case connection_state::connecting:
            return "connecting";
        case connection_state::connected:
            return "connected";
        case connection_state::disconnecting:
            return "disconnecting";
        case connection_state::disconnected:
            return "disconnected";
        case connection_state::error:
            return "error";
        case connection_state::idle:
            return "idle";
    }
    return "?";
}

const char* to_string(connect_mode m) noexcept {
    return m == connect_mode::lazy ? "lazy" : "eager";
}

struct mesh::connection {
    connection(mesh* m, std::uint32_t p, std::string n, frame_reader r)
        : owner(m), pe(p), name(std::move(n)), reader(std::move(r)) {
        copies.copies_of = this;
    }
    mesh* owner;
    std::uint32_t pe;
    std::string name;           // "PE 3 (127.0.0.1:40123)"
    std::unique_ptr<stream> s;  // null until the hello exchange is done (lazy: while dialing)
    frame_reader reader;
    std::vector<frame> early;  // frames that arrived in the same receive as the hello
    connection_state st = connection_state::connecting;  // connected once its tasks run
    std::deque<outgoing*> queue;
    event wake;                  // the writer waits here for queued frames
    bool writer_idle = false;    // the writer waits on `wake` with nothing of its own in flight
    bool flush_pending = false;  // in mesh::_flush: flush() sends its queue if the writer idles
    event bye;                   // the peer's disconnect frame arrived (or the peer failed)
    event reader_done;           // the reader saw the end of the stream or stopped
    event writer_done;           // the writer has ended
    bool writer_closing = false;
    bool failed = false;
    // Lazy set-up (CONNECT=lazy).
    bool lazily = false;   // made on first use, after start-up
    bool dialed = false;   // our dial (else we accepted the peer's)
    bool claimed = false;  // a stream is being attached (a hello answered): no other may be
    event attached;        // s is set, or the connection failed
    double up_at = -1;     // seconds after the mesh was made
    // post_copy(): the queued entry of copied frames. The first frame's header is its
    // header (stamp_credits writes there), the rest of its bytes its payload, in `copied`
    // after header_size bytes of room that add_parts copies the header into: the entry
    // goes as one part (a lone frame by send(), not a gather).
    outgoing copies;
    std::unique_ptr<std::byte[]> copied;  // header_size + copies_room bytes, made on first use
    std::size_t copies_room = 0;
    bool copies_queued = false;            // in `queue` or in the writer's hands
    std::uint64_t sent_direct_at = ~0ull;  // mesh::_flushes when post_copy last sent by itself
    bool copies_appended = false;          // `copies` holds more than its first frame
    bool bursts = false;  // the last flush of this connection's queue sent more than one frame
    lost_callback copies_lost = nullptr;
    void* copies_ctx = nullptr;
};

void mesh::done_flag::set() noexcept {
    done = true;
    if (waiter) scheduler::this_thread().schedule(std::exchange(waiter, {}));
}

auto mesh::done_flag::wait() noexcept {
    struct awaiter {
        done_flag* f;
        bool await_ready() const noexcept { return f->done; }
        void await_suspend(std::coroutine_handle<> h) noexcept { f->waiter = h; }
        void await_resume() const noexcept {}
    };
    return awaiter{this};
}

mesh::mesh(backend& b, std::unique_ptr<listener> l, mesh_config cfg)
    : _backend(b), _listener(std::move(l)), _cfg(std::move(cfg)) {
    if (_cfg.num_pes == 0 || _cfg.rank >= _cfg.num_pes || _cfg.peers.size() != _cfg.num_pes)
        throw std::invalid_argument("coverse mesh: rank " + std::to_string(_cfg.rank) + " of " +
                                    std::to_string(_cfg.num_pes) + " PEs with " +
                                    std::to_string(_cfg.peers.size()) +
                                    " peer addresses: need rank < num_pes and one address per PE");
    _limits.max_payload = _cfg.max_payload;
    // Publish sizes pass the reader up to the largest Converse message; the rdma layer
    // holds them to MAX_MESSAGE itself, so its refusal can name the setting and the fix.
    _limits.num_pes = _cfg.num_pes;
    _conns.resize(_cfg.num_pes);
    _dial_errors.assign(_cfg.num_pes, 0);
}

mesh::~mesh() = default;

mesh::connection* mesh::make_connection(std::uint32_t pe) {
    _conns[pe] = std::make_unique<connection>(this, pe, peer_name(pe),
                                              frame_reader(_limits, _cfg.payload_alloc));
    return _conns[pe].get();
}

std::string mesh::peer_name(std::uint32_t pe) const {
    if (pe < _conns.size() && _conns[pe]) return _conns[pe]->name;
    if (pe < _cfg.peers.size())
        return "PE " + std::to_string(pe) + " (" + _cfg.peers[pe].to_string() + ")";
    return "PE " + std::to_string(pe);
}

connection_state mesh::state(std::uint32_t pe) const {
    if (pe >= _conns.size() || !_conns[pe])
        return _cfg.connect == connect_mode::lazy ? connection_state::idle
                                                  : connection_state::connecting;
    return _conns[pe]->st;
}

std::vector<link_info> mesh::links() const {
    std::vector<link_info> out;
    for (const auto& c : _conns)
        if (c) out.push_back(link_info{c->pe, c->st, c->lazily, c->dialed, c->up_at});
    return out;
}

// ---- hello ---------------------------------------------------------------------------

task<int> mesh::send_frame(stream& s, frame_type type, std::span<const std::byte> payload) {
    frame_header h;
    h.type = type;
    h.source_pe = _cfg.rank;
    h.payload_length = static_cast<std::uint32_t>(payload.size());
    const auto head = encode_header(h);
    const std::span<const std::byte> parts[] = {head, payload};
    co_return co_await s.send_all(parts);
}

std::optional<std::string> mesh::hello_problem(const io_result<frame>& hello,
                                               const frame_reader& reader, const std::string& who,
                                               std::uint32_t expected_pe) const {
    if (hello.error == -EPROTO) return describe(reader.error(), who);
    if (hello.error != 0)
        return "the connection ended before the hello was complete (" +
               (hello.error == -ENODATA ? std::string("end of stream") : errno_text(hello.error)) +
               "); see that side's error output";
    return check_hello(hello.value, expected_pe);
}

std::array<std::byte, hello_payload::wire_size> mesh::hello_bytes() const {
    hello_payload p;
    p.job_key = _cfg.job_key;
    p.rank = _cfg.rank;
    p.num_pes = _cfg.num_pes;
    p.protocol_version = _cfg.protocol_version;
    return encode(p);
}

std::optional<std::string> mesh::check_hello(const frame& f, std::uint32_t expected_pe) const {
    const auto& h = f.header;
    if (h.type == frame_type::abort) {
        auto a = decode_abort(f.payload_bytes(), _limits);
        return "it refused our hello: " +
               (a.ok() ? std::string(a.value.text) : std::string("(unreadable reason)"));
    }
    if (h.type != frame_type::hello)
        return "it sent a frame of type " + std::to_string(static_cast<int>(h.type)) +
               " before its hello; is it a coverse PE of this version?";
    auto d = decode_hello(f.payload_bytes(), _limits);
    if (!d.ok()) return describe(d.error, "the peer");
    const hello_payload& p = d.value;
    if (p.job_key != _cfg.job_key)
        return "it belongs to another job: job key " + hex(p.job_key) + ", ours is " +
               hex(_cfg.job_key) +
               "; another coverse job may be using this port — give each job its own key "
               "and ports";
    if (p.protocol_version != _cfg.protocol_version)
        return "it speaks coverse protocol version " + std::to_string(p.protocol_version) +
               ", this PE speaks " + std::to_string(_cfg.protocol_version) +
               "; run the same coverse build on every PE";
    if (p.num_pes != _cfg.num_pes)
        return "it was started with " + std::to_string(p.num_pes) + " PEs, this PE with " +
               std::to_string(_cfg.num_pes) + "; start every PE of a job with the same count";
    if (p.rank != h.source_pe)
        return "its hello names PE " + std::to_string(p.rank) + " but its frame comes from PE " +
               std::to_string(h.source_pe);
    if (expected_pe != any_pe && p.rank != expected_pe)
        return "it answered as PE " + std::to_string(p.rank) + ", expected PE " +
               std::to_string(expected_pe) + "; check the node table";
    if (expected_pe == any_pe && _cfg.connect == connect_mode::lazy && p.rank == _cfg.rank)
        return "it claims to be PE " + std::to_string(p.rank) + ", this PE itself";
    if (expected_pe == any_pe && _cfg.connect == connect_mode::eager &&
        (p.rank <= _cfg.rank || _conns[p.rank]))
        return "PE " + std::to_string(p.rank) +
               (p.rank <= _cfg.rank ? " must not dial PE " + std::to_string(_cfg.rank) +
                                          " (lower ranks accept, higher ranks dial)"
                                    : " is connected already");
    return std::nullopt;
}

task<io_result<frame>> mesh::read_hello(stream& s, frame_reader& reader,
                                        std::vector<frame>& early) {
    std::vector<std::byte> buf(4096);
    for (;;) {
        const int n = co_await s.recv_some(buf);
        if (n == 0) co_return io_result<frame>{{}, -ENODATA};
        if (n < 0) co_return io_result<frame>{{}, n};
        std::optional<frame> first;
        reader.feed_all(std::span<const std::byte>(buf.data(), static_cast<std::size_t>(n)),
                        [&](frame&& f) {
                            if (!first)
                                first.emplace(std::move(f));
                            else
                                early.push_back(std::move(f));
                        });
        if (first) co_return io_result<frame>{std::move(*first), 0};
        if (reader.failed()) co_return io_result<frame>{{}, -EPROTO};
    }
}

task<void> mesh::refuse(stream& s, const std::string& why) {
    abort_payload a;
    a.exit_code = 1;
    a.origin_pe = _cfg.rank;
    a.text = why;
    (void)co_await send_frame(s, frame_type::abort, encode(a));
}

// ---- establish -------------------------------------------------------------------------

std::string mesh::unreached(std::uint32_t pe) const {
    std::string out = peer_name(pe) + (pe < _cfg.rank || _cfg.connect == connect_mode::lazy
                                           ? ": we could not connect to it"
                                           : ": it never connected to us");
    if (pe < _dial_errors.size() && _dial_errors[pe] != 0)
        out += " (last attempt: " + errno_text(_dial_errors[pe]) + ")";
    return out;
}

task<void> mesh::establish() {
    if (_cfg.connect == connect_mode::lazy) {
        // Nothing to wait for: the listener stays open and every pair connects on its
        // first frame (route()).
        _accepting = true;
        _tasks.spawn(accept_loop(), "mesh accept loop");
        co_return;
    }
    const auto limit = _cfg.connect_timeout;
    // The set-up tasks treat the deadline's cancellation as an ordinary end, so whether
    // every peer is connected is what decides, not whether the task "finished".
    (void)co_await with_timeout(establish_all(), limit);
    bool complete = true;
    for (std::uint32_t pe = 0; pe < _cfg.num_pes; ++pe)
        if (pe != _cfg.rank && !_conns[pe]) complete = false;
    if (!complete) {
        std::string missing;
        for (std::uint32_t pe = 0; pe < _cfg.num_pes; ++pe) {
            if (pe == _cfg.rank || _conns[pe]) continue;
            if (!missing.empty()) missing += "; ";
            missing += unreached(pe);
        }
        if (!_cfg.address_note.empty()) missing += "; " + _cfg.address_note;
        throw mesh_error("coverse: PE " + std::to_string(_cfg.rank) +
                         ": connection set-up timed out after " + seconds(limit) +
                         " (CONNECTION_TIMEOUT): " + missing +
                         ". Is that PE running and reachable? Raise CONNECTION_TIMEOUT if "
                         "PEs start slowly.");
    }
    for (auto& c : _conns)
        if (c) start(c.get());
    if (_listener) co_await _listener->close();
}

void mesh::start(connection* c) {
    c->st = connection_state::connected;
    _tasks.spawn(reader(c), "mesh reader " + c->name);
    _tasks.spawn(writer(c), "mesh writer " + c->name);
}

task<void> mesh::establish_all() {
    std::vector<task<void>> parts;
    const std::size_t higher = _cfg.num_pes - 1 - _cfg.rank;
    if (higher > 0) parts.push_back(accept_all(higher));
    for (std::uint32_t pe = 0; pe < _cfg.rank; ++pe)
        parts.push_back(dial(pe));
    co_await when_all(std::move(parts));
}

task<void> mesh::accept_all(std::size_t expected) {
    std::size_t have = 0;
    while (have < expected) {
        auto r = co_await _listener->accept();
        if (r.error == -ECANCELED) co_return;  // the set-up deadline passed
        if (!r)
            throw mesh_error("coverse: PE " + std::to_string(_cfg.rank) + ": accept on " +
                             _listener->local().to_string() + " failed: " + errno_text(r.error) +
                             (r.error == -EMFILE || r.error == -ENFILE
                                  ? " (raise the open-files limit: ulimit -n)"
                                  : ""));
        stream& s = *r.value;
        frame_reader reader(_limits, _cfg.payload_alloc);
        std::vector<frame> early;
        // A connection that never says hello (a port probe) must not hold up the PEs
        // queued behind it: it gets a few seconds, not the whole set-up deadline.
        const auto hello_limit =
            std::min<std::chrono::milliseconds>(_cfg.connect_timeout, std::chrono::seconds(5));
        auto timed = co_await with_timeout(read_hello(s, reader, early), hello_limit);
        if ((co_await this_task::stop_token()).stop_requested()) {  // the set-up deadline
            co_await s.close();
            co_return;
        }
        io_result<frame> hello = timed ? std::move(*timed) : io_result<frame>{{}, -ETIMEDOUT};
        if (hello.error == -ECANCELED) hello.error = -ETIMEDOUT;  // our hello limit
        const std::optional<std::string> problem =
            hello_problem(hello, reader, s.peer_name(), any_pe);
        if (problem) {
            std::fprintf(stderr, "coverse: PE %u: refused a connection from %s: %s\n", _cfg.rank,
                         s.peer_name().c_str(), problem->c_str());
            // A peer that sent a whole (if invalid) frame is told why it was refused.
            if (hello.error == 0 || hello.error == -EPROTO) co_await refuse(s, *problem);
            co_await s.close();
            continue;
        }
        const int sent = co_await send_frame(s, frame_type::hello, hello_bytes());
        const std::uint32_t pe = hello.value.header.source_pe;
        if (sent == -ECANCELED) {
            co_await s.close();
            co_return;
        }
        if (sent < 0) {
            std::fprintf(stderr, "coverse: PE %u: answering the hello of PE %u failed: %s\n",
                         _cfg.rank, pe, errno_text(sent).c_str());
            co_await s.close();
            continue;
        }
        attach(make_connection(pe), std::move(r.value), std::move(reader), std::move(early));
        ++have;
    }
}

task<void> mesh::dial(std::uint32_t pe) {
    const endpoint& to = _cfg.peers[pe];
    const std::string who = "PE " + std::to_string(pe) + " (" + to.to_string() + ")";
    auto delay = _cfg.retry_initial;
    std::unique_ptr<stream> s;
    for (;;) {
        auto r = co_await _backend.connect(to);
        if (r) {
            s = std::move(r.value);
            break;
        }
        if (r.error == -ECANCELED) co_return;
        _dial_errors[pe] = r.error;
        // Nobody listens yet (the PE is starting) or the network blinked: retry with
        // backoff until the set-up deadline cancels us.
        co_await sleep_for(delay);
        delay = std::min(delay * 2, _cfg.retry_max);
    }
    const int sent = co_await send_frame(*s, frame_type::hello, hello_bytes());
    if (sent == -ECANCELED) co_return;
    if (sent < 0)
        throw mesh_error("coverse: PE " + std::to_string(_cfg.rank) + ": sending our hello to " +
                         who + " failed: " + errno_text(sent));
    frame_reader reader(_limits, _cfg.payload_alloc);
    std::vector<frame> early;
    auto hello = co_await read_hello(*s, reader, early);
    if (hello.error == -ECANCELED) {
        co_await s->close();
        co_return;
    }
    const std::optional<std::string> problem = hello_problem(hello, reader, who, pe);
    if (problem) {
        co_await s->close();
        throw mesh_error("coverse: PE " + std::to_string(_cfg.rank) + ": connecting to " + who +
                         ": " + *problem);
    }
    connection* c = make_connection(pe);
    c->dialed = true;
    attach(c, std::move(s), std::move(reader), std::move(early));
}

void mesh::attach(connection* c, std::unique_ptr<stream> s, frame_reader reader,
                  std::vector<frame> early) {
    c->name = "PE " + std::to_string(c->pe) + " (" + s->peer_name() + ")";
    c->s = std::move(s);
    c->reader = std::move(reader);
    c->early = std::move(early);
    c->reader.set_placement(payload_placement{&mesh::place_payload, c});
    c->up_at = std::chrono::duration<double>(std::chrono::steady_clock::now() - _made).count();
    c->attached.set();
}

// ---- lazy set-up -------------------------------------------------------------------------

mesh::connection* mesh::route(std::uint32_t pe) {
    connection* c = _conns[pe].get();
    if (c || _cfg.connect != connect_mode::lazy || !_accepting) return c;
    c = make_connection(pe);
    c->lazily = true;
    c->dialed = true;
    _tasks.spawn(dial_lazily(c), "mesh dial " + c->name);
    return c;
}

task<void> mesh::accept_loop() {
    bool said = false;
    for (;;) {
        auto r = co_await _listener->accept();
        // Shutdown closed the listener (a backend may say so with EBADF).
        if (r.error == -ECANCELED || !_accepting) {
            if (r) co_await r.value->close();
            co_return;
        }
        if (!r) {
            // Out of descriptors is usually brief (a burst of dials): say so once, go on.
            if (!said)
                std::fprintf(stderr, "coverse: PE %u: accept on %s failed: %s%s\n", _cfg.rank,
                             _listener->local().to_string().c_str(), errno_text(r.error).c_str(),
                             r.error == -EMFILE || r.error == -ENFILE
                                 ? " (raise the open-files limit: ulimit -n)"
                                 : "");
            said = true;
            co_await sleep_for(std::chrono::milliseconds(100));
            continue;
        }
        // Each hello is read by a task of its own: a slow or silent dialer (a port probe)
        // holds up nobody else.
        _tasks.spawn(accept_lazily(std::move(r.value)), "mesh accept");
    }
}

task<void> mesh::accept_lazily(std::unique_ptr<stream> s) {
    frame_reader reader(_limits, _cfg.payload_alloc);
    std::vector<frame> early;
    const auto hello_limit =
        std::min<std::chrono::milliseconds>(_cfg.connect_timeout, std::chrono::seconds(5));
    auto timed = co_await with_timeout(read_hello(*s, reader, early), hello_limit);
    io_result<frame> hello = timed ? std::move(*timed) : io_result<frame>{{}, -ETIMEDOUT};
    if (hello.error == -ECANCELED) hello.error = -ETIMEDOUT;
    std::optional<std::string> problem = hello_problem(hello, reader, s->peer_name(), any_pe);
    const std::uint32_t pe = problem ? 0 : hello.value.header.source_pe;
    connection* c = problem ? nullptr : _conns[pe].get();
    if (!problem && !_accepting) problem = "PE " + std::to_string(_cfg.rank) + " is shutting down";
    if (!problem && c && c->failed)
        problem = "PE " + std::to_string(_cfg.rank) + " already gave up on PE " +
                  std::to_string(pe) + " (" + to_string(c->st) + ")";
    if (!problem && c && pe > _cfg.rank) {
        // Both dialed at once. The lower rank's dial carries the pair: ours is under way (or
        // already up: the peer adopted it before its own hello reached us), so this one is
        // declined; the peer takes ours when our hello reaches it.
        (void)co_await send_frame(*s, frame_type::connect_declined, {});
        co_await s->close();
        co_return;
    }
    if (!problem && c && (c->s || c->claimed))
        problem = "PE " + std::to_string(pe) + " is connected already";
    if (problem) {
        std::fprintf(stderr, "coverse: PE %u: refused a connection from %s: %s\n", _cfg.rank,
                     s->peer_name().c_str(), problem->c_str());
        // A peer that sent a whole (if invalid) frame is told why it was refused.
        if (hello.error == 0 || hello.error == -EPROTO) co_await refuse(*s, *problem);
        co_await s->close();
        co_return;
    }
    if (!c) {
        c = make_connection(pe);
        c->lazily = true;
    }
    // From here frames to `pe` queue on `c` and nothing else attaches to it; our own dial,
    // if one runs (the peer is lower: its dial wins), is declined by the peer and stops.
    c->claimed = true;
    const int sent = co_await send_frame(*s, frame_type::hello, hello_bytes());
    if (sent < 0) {
        co_await s->close();
        if (!c->failed)
            fail(c, "answering the hello of " + c->name + " failed: " + errno_text(sent));
        co_return;
    }
    if (c->failed) {  // the launcher said it died while we answered
        co_await s->close();
        co_return;
    }
    c->dialed = false;
    attach(c, std::move(s), std::move(reader), std::move(early));
    start(c);
}

task<void> mesh::dial_lazily(connection* c) {
    const wait_scope waiting({wait_kind::connect, c->pe, 0, "lazy connect: dialing it"});
    // Whether the steps "finished" says nothing (a step stopped by the deadline returns
    // normally): the connection's state does.
    (void)co_await with_timeout(dial_steps(c), _cfg.connect_timeout);
    if (c->s || c->claimed || c->failed || !_accepting) co_return;
    std::string why = "connection set-up timed out after " + seconds(_cfg.connect_timeout) +
                      " (CONNECTION_TIMEOUT): " + unreached(c->pe);
    if (!_cfg.address_note.empty()) why += "; " + _cfg.address_note;
    why += ". Is that PE running and reachable? Raise CONNECTION_TIMEOUT if PEs start slowly.";
    fail(c, why);
}

task<void> mesh::dial_steps(connection* c) {
    auto delay = _cfg.retry_initial;
    for (;;) {
        if (c->s || c->claimed || c->failed) co_return;  // the peer's dial came first
        if (co_await dial_once(c)) co_return;
        // Nobody listens (yet), or the network blinked: retry with backoff until the
        // deadline stops us.
        co_await sleep_for(delay);
        delay = std::min(delay * 2, _cfg.retry_max);
    }
}

// One attempt: true when it ended the dial (connected, declined, refused or stopped), false
// to try again.
task<bool> mesh::dial_once(connection* c) {
    const std::uint32_t pe = c->pe;
    auto r = co_await _backend.connect(_cfg.peers[pe]);
    if (!r) {
        _dial_errors[pe] = r.error;
        co_return r.error == -ECANCELED;
    }
    stream& s = *r.value;
    const int sent = co_await send_frame(s, frame_type::hello, hello_bytes());
    if (sent < 0) {
        _dial_errors[pe] = sent;
        co_await s.close();
        co_return sent == -ECANCELED;
    }
    frame_reader reader(_limits, _cfg.payload_alloc);
    std::vector<frame> early;
    auto hello = co_await read_hello(s, reader, early);
    if (hello.error == -ECANCELED) {
        co_await s.close();
        co_return true;
    }
    if (hello.error == 0 && hello.value.header.type == frame_type::connect_declined) {
        // The peer (a lower rank) dials us as well and keeps its own connection: it
        // reaches our listener, and accept_lazily() puts it under `c`.
        co_await s.close();
        co_await c->attached.wait();
        co_return true;
    }
    const std::string who = peer_name(pe);
    if (const auto problem = hello_problem(hello, reader, who, pe)) {
        co_await s.close();
        // The peer's own dial may have come up meanwhile (then this one is the spare).
        if (!c->failed && !c->s && !c->claimed) fail(c, "connecting to " + who + ": " + *problem);
        co_return true;
    }
    if (c->s || c->claimed || c->failed) {  // cannot happen: the peer would have declined
        co_await s.close();
        co_return true;
    }
    attach(c, std::move(r.value), std::move(reader), std::move(early));
    start(c);
    co_return true;
}

void mesh::peer_gone(std::uint32_t pe, const std::string& why) {
    if (pe >= _conns.size() || pe == _cfg.rank) return;
    connection* c = _conns[pe].get();
    if (!c) c = make_connection(pe);
    if (c->failed || c->st == connection_state::disconnected) return;
    if (!c->s) {
        fail(c, why);  // nothing came from it on this connection: nothing to hand out first
        return;
    }
    _tasks.spawn(fail_unless_ended(c, why), "mesh: " + c->name + " died");
}

task<void> mesh::fail_unless_ended(connection* c, std::string why) {
    // A dead process's socket ends by itself (the kernel closes it): the reader hands out
    // what arrived before and reports the end. A host that vanished sends nothing, so the
    // launcher's word ends it after a while.
    (void)co_await with_timeout(until_set(&c->reader_done), std::chrono::seconds(2));
    if (!c->failed && c->st != connection_state::disconnected) fail(c, why);
}

std::byte* mesh::place_payload(void* conn, const frame_header& h) noexcept {
    auto* c = static_cast<connection*>(conn);
    // A frame claiming another source is failed in deliver(); it never lands in memory.
    if (!c->owner->_hook || h.source_pe != c->pe) return nullptr;
    return c->owner->_hook->place(c->pe, h);
}

// ---- data path ---------------------------------------------------------------------------

// Connected, or disconnecting while the peer's disconnect has not arrived (we still answer);
// lazy: also while connecting (frames wait for the dial in order).
bool mesh::writable(const connection* c) const noexcept {
    return c && !c->failed && !c->writer_closing &&
           (c->st == connection_state::connected || c->st == connection_state::disconnecting ||
            (c->st == connection_state::connecting && _cfg.connect == connect_mode::lazy));
}

task<int> mesh::send(std::uint32_t pe, frame_header header, std::span<const std::byte> payload) {
    if (pe >= _conns.size() || pe == _cfg.rank) co_return -EINVAL;
    connection* c = route(pe);
    if (!writable(c)) co_return -ENOTCONN;
    if (payload.size() > _cfg.max_payload) co_return -EMSGSIZE;
    co_return co_await transmit(c, header, payload);
}

task<int> mesh::transmit(connection* c, frame_header header, std::span<const std::byte> payload) {
    outgoing item;
    encode_ours(header, payload.size(), item.header);
    item.payload = payload;
    c->queue.push_back(&item);  // behind every frame queued before: nothing is overtaken
    c->wake.set();
    // Not cancellable: the writer holds a pointer to `item` until it completes it.
    co_await item.done.wait();
    co_return item.result;
}

int mesh::post(std::uint32_t pe, const frame_header& header, std::span<const std::byte> payload,
               sent_callback on_sent, void* ctx) {
    if (pe >= _conns.size() || pe == _cfg.rank) return -EINVAL;
    connection* c = route(pe);
    if (!writable(c)) return -ENOTCONN;
    if (payload.size() > _cfg.max_payload) return -EMSGSIZE;
    std::unique_ptr<outgoing> o;
    if (_spare.empty()) {
        o = std::make_unique<outgoing>();
    } else {
        o = std::move(_spare.back());
        _spare.pop_back();
    }
    encode_ours(header, payload.size(), o->header);
    o->payload = payload;
    o->sent = 0;
    o->on_sent = on_sent;
    o->ctx = ctx;
    c->queue.push_back(o.release());
    queued(c);
    return 0;
}

// The header as we send it: from us, with the payload's length.
void mesh::encode_ours(const frame_header& header, std::size_t payload_length,
                       std::span<std::byte, header_size> out) const noexcept {
    frame_header h = header;
    h.source_pe = _cfg.rank;
    h.payload_length = static_cast<std::uint32_t>(payload_length);
    encode_header(h, out);
}

// A frame was posted on `c`: its writer sends it on its next turn. If the caller flushes
// first (the machine core does when a handler returns), the frames posted since go at once,
// as one gather.
void mesh::queued(connection* c) noexcept {
    if (c->writer_idle && !c->flush_pending) {
        try {
            _flush.push_back(c);
            c->flush_pending = true;
        } catch (const std::bad_alloc&) {  // the writer, woken below, sends it
        }
    }
    c->wake.set();
}

int mesh::post_copy(std::uint32_t pe, const frame_header& header,
                    std::span<const std::byte> payload, lost_callback on_lost, void* ctx) noexcept {
    if (pe >= _conns.size() || pe == _cfg.rank) return -EINVAL;
    connection* c = _conns[pe].get();  // not route(): a lazy dial is post()'s to start
    if (!c) return -EAGAIN;
    if (!writable(c)) return -ENOTCONN;
    if (payload.size() > _cfg.max_payload) return -EMSGSIZE;
    outgoing& o = c->copies;
    // Appending is safe only while the entry is the last queued (order) and nothing took it
    // off the queue (the writer's gather holds its bytes as they were). Its bytes may move
    // then: what a flush sent of it already is the kernel's.
    if (c->copies_queued && (c->queue.empty() || c->queue.back() != &o)) return -EAGAIN;
    const std::size_t kept = c->copies_queued ? o.payload.size() + header_size : 0;
    const std::size_t need = kept + payload.size();  // (a first frame's header is o.header)
    if (need > copies_most) return -EAGAIN;
    if (!c->copied || need > c->copies_room) {  // made on first use, an empty frame's too
        std::size_t room = std::max(c->copies_room * 2, copies_first);
        while (room < need)
            room *= 2;
        std::unique_ptr<std::byte[]> more(new (std::nothrow) std::byte[header_size + room]);
        if (!more) return -ENOMEM;
        if (c->copies_queued)
            std::memcpy(more.get() + header_size, c->copied.get() + header_size, o.payload.size());
        c->copied = std::move(more);  // o.payload is set again below, on the new bytes
        c->copies_room = room;
    }
    if (!c->copies_queued) {
        try {
            c->queue.push_back(&o);
        } catch (const std::bad_alloc&) {
            return -ENOMEM;
        }
        o.sent = 0;
        o.payload = {};
        c->copies_queued = true;
    }
    c->copies_appended = kept > 0;
    std::byte* const bytes = c->copied.get() + header_size;
    std::byte* at = bytes + o.payload.size();
    if (kept == 0) {
        encode_ours(header, payload.size(), o.header);
    } else {
        encode_ours(header, payload.size(), std::span<std::byte, header_size>(at, header_size));
        at += header_size;
    }
    if (!payload.empty()) std::memcpy(at, payload.data(), payload.size());
    o.payload = std::span<const std::byte>(bytes, need);  // all after the first header
    c->copies_lost = on_lost;
    c->copies_ctx = ctx;
    if (kept == 0 && send_copies_now(c)) return 0;
    queued(c);
    return 0;
}

// A frame that post_copy() just made the connection's only queued entry goes to the socket
// at once, when nothing else could be ahead of it: no frame queued, the writer idle. Then
// the entry is never queued for a flush, the writer is not woken and nothing is completed:
// the send side of an 8 B hop over TCP takes ~550 instructions instead of ~740, and the
// writer's ~120 after it go (callgrind; docs/perf.md, stop 41). Once per connection between
// two flush() calls, so a handler's burst still leaves in one gather; and not while the
// connection's last flush sent several frames: a burst's first frame sent alone costs the
// receiver a second arrival (the 8 B rate over TCP fell by 12 %). True when the whole frame
// went; else the entry stays queued, with what went counted.
bool mesh::send_copies_now(connection* c) noexcept {
    if (c->sent_direct_at == _flushes || c->bursts || c->queue.size() != 1 || !c->writer_idle ||
        !c->s || c->failed || c->st != connection_state::connected)
        return false;
    c->sent_direct_at = _flushes;
    outgoing& o = c->copies;
    stamp_credits(c, &o);  // the credits go with the frame, as when a flush sends it
    const std::span<const std::byte> whole = whole_copies(&o);
    const int r = c->s->try_send(std::span(&whole, 1));
    if (r <= 0) return false;  // full, or an error the writer meets again and reports
    if (static_cast<std::size_t>(r) < whole.size()) {
        o.sent = static_cast<std::size_t>(r);  // the writer goes on from here
        return false;
    }
    c->queue.pop_back();
    c->copies_queued = false;
    o.payload = {};
    return true;
}

// What post() queued on connections whose writer is idle goes now, one non-blocking gather
// per connection (stream::try_send), instead of on the writers' next turn: a handler's sends
// leave together when it returns (TCP's small-message latency without a system call per
// frame of a window). What a socket does not take is left to its writer, already woken,
// with how much of its first frame went.
void mesh::flush_queued() noexcept {
    for (std::size_t i = 0; i < _flush.size(); ++i) {  // a callback may post (and append)
        connection* c = _flush[i];
        c->flush_pending = false;
        if (!c->writer_idle || c->queue.empty() || !c->s || c->failed ||
            c->st != connection_state::connected)
            continue;  // the writer has it (or it is failing)
        _flush_parts.clear();
        std::size_t frames = 0, bytes = 0;
        bool several = false;  // frames, counting those of the copies entry
        for (outgoing* o : c->queue) {
            if (frames == batch_frames || (frames > 0 && bytes >= batch_bytes)) break;
            stamp_credits(c, o);
            bytes += add_parts(o, _flush_parts);
            several |= ++frames > 1 || (o == &c->copies && c->copies_appended);
        }
        c->bursts = several;
        const int r = c->s->try_send(_flush_parts);
        if (r <= 0) continue;  // full, or an error the writer meets again and reports
        // Complete every frame that went whole, oldest first; a callback may post behind.
        std::size_t left = static_cast<std::size_t>(r);
        while (left > 0) {
            outgoing* o = c->queue.front();
            const std::size_t rest = header_size + o->payload.size() - o->sent;
            if (left < rest) {
                o->sent += left;  // the writer goes on from here
                break;
            }
            left -= rest;
            c->queue.pop_front();
            complete(o, 0);
        }
    }
    _flush.clear();
}

std::size_t mesh::add_parts(const outgoing* o, std::vector<std::span<const std::byte>>& parts) {
    // post() may have had the start of this frame sent by flush() (only the first queued
    // frame can have been): the rest goes on from there.
    const std::size_t skip = o->sent;
    if (skip == 0 && o->copies_of) {
        parts.push_back(whole_copies(o));
        return parts.back().size();
    }
    if (skip < header_size) parts.push_back(std::span<const std::byte>(o->header).subspan(skip));
    const std::size_t pskip = skip > header_size ? skip - header_size : 0;
    if (pskip < o->payload.size()) parts.push_back(o->payload.subspan(pskip));
    return header_size + o->payload.size() - skip;
}

std::span<const std::byte> mesh::whole_copies(const outgoing* o) noexcept {
    // Header and payload as one part: the header goes into the room before the copies
    // (after stamp_credits; post_copy made the buffer before it queued the entry). A gather of
    // two parts costs the kernel more than one buffer: ~3 % of an 8 B hop over loopback TCP
    // (docs/perf.md, stop 39).
    std::byte* const at = o->copies_of->copied.get();
    std::memcpy(at, o->header.data(), header_size);
    return {at, header_size + o->payload.size()};
}

void mesh::stamp_credits(const connection* c, outgoing* o) noexcept {
    if (!_hook || o->sent > 0) return;  // a frame partly sent has its credits already
    const auto t = static_cast<frame_type>(o->header[header_field::type.offset]);
    if (t == frame_type::hello || t == frame_type::disconnect) return;
    // Added to what the header carries: post() stamps a frame it then may not send, and
    // credits_for hands each credit out once.
    std::byte* field = o->header.data() + header_field::credits.offset;
    const auto had = static_cast<std::uint32_t>(std::to_integer<std::uint8_t>(field[0])) |
                     static_cast<std::uint32_t>(std::to_integer<std::uint8_t>(field[1])) << 8;
    if (had == 0xFFFF) return;  // full: the rest waits for the next frame
    if (const std::uint16_t cr = _hook->credits_for(c->pe, t)) {
        const std::uint32_t total = had + cr;  // credits never near 2^16: slots are few
        field[0] = static_cast<std::byte>(total & 0xFF);
        field[1] = static_cast<std::byte>((total >> 8) & 0xFF);
    }
}

void mesh::complete(outgoing* o, int result) {
    o->result = result;
    if (connection* c = o->copies_of) {  // post_copy()'s entry: free for the next copies
        c->copies_queued = false;
        o->payload = {};
        // -ECANCELED: our own shutdown stopped the writer (its watchdog); mesh::shutdown
        // says what was left in flight.
        if (result < 0 && result != -ECANCELED && c->copies_lost)
            c->copies_lost(c->copies_ctx, c->pe, result);
        return;
    }
    if (!o->on_sent) {
        o->done.set();
        return;
    }
    const sent_callback cb = o->on_sent;
    void* ctx = o->ctx;
    o->on_sent = nullptr;
    o->payload = {};
    _spare.emplace_back(o);  // recycled before the callback, which may post again
    cb(ctx, result);
}

task<void> mesh::writer(connection* c) {
    std::vector<outgoing*> batch;
    std::vector<std::span<const std::byte>> parts;
    for (;;) {
        while (c->queue.empty()) {
            if (c->writer_closing || c->failed) {
                c->writer_done.set();
                co_return;
            }
            c->wake.reset();
            c->writer_idle = true;
            co_await c->wake.wait();
            c->writer_idle = false;
        }
        // Gather what is queued into one send: fewer system calls under load, and each
        // frame's header and payload stay adjacent, so frames never interleave.
        batch.clear();
        parts.clear();
        std::size_t bytes = 0;
        while (!c->queue.empty() && batch.size() < batch_frames &&
               (batch.empty() || bytes < batch_bytes)) {
            outgoing* o = c->queue.front();
            c->queue.pop_front();
            stamp_credits(c, o);  // eager credits ride on whatever goes to the peer now
            batch.push_back(o);
            bytes += add_parts(o, parts);
        }
        const int r = co_await c->s->send_all(parts);
        for (outgoing* o : batch)
            complete(o, r < 0 ? r : 0);
        if (r < 0) {
            // With writer_closing (the answers that follow the handshake), the frames behind
            // the batch stay queued with no callback: failing them would fail their sends
            // inside the PE's shutdown, and mesh::shutdown reports what was left in flight.
            if (!(r == -ECANCELED && c->writer_closing)) {
                // -ECANCELED: our own tasks were stopped (shutdown's deadline, see there).
                fail(c,
                     r == -ECANCELED
                         ? "sending to " + c->name +
                               " was stopped by this PE's shutdown: the disconnect "
                               "handshake's deadline passed with frames still going out"
                         : "sending to " + c->name + " failed: " + errno_text(r) +
                               (r == -EPIPE || r == -ECONNRESET ? " (the PE probably died)" : ""));
            }
            c->writer_done.set();
            co_return;
        }
    }
}

task<void> mesh::reader(connection* c) {
    for (frame& f : c->early)
        deliver(c, std::move(f));
    c->early.clear();
    std::vector<std::byte> buf(read_chunk);
    while (!c->failed) {
        std::span<std::byte> window = c->reader.payload_window();
        const bool direct = window.size() >= direct_receive_min;
        // A large payload of known length is received in place, in one request; anything
        // else is decoded where it arrives (take_bytes), until such a payload comes.
        const int n = direct ? co_await c->s->recv_all(window)
                             : co_await c->s->recv_each(std::span<std::byte>(buf),
                                                        net::recv_sink{&mesh::take_bytes, c});
        if (n > 0) {
            if (direct) {
                c->reader.commit_payload(static_cast<std::size_t>(n));
                if (c->reader.has_frame()) deliver(c, c->reader.take_frame());
                if (c->reader.failed()) fail(c, describe(c->reader.error(), c->name));
            }
            continue;
        }
        if (n == 0) {
            if (!c->bye.is_set())
                fail(c, c->reader.at_frame_boundary()
                            ? c->name +
                                  " closed the connection outside the disconnect handshake: "
                                  "the PE died or exited without ConverseExit"
                            : c->name +
                                  " closed the connection in the middle of a frame: the "
                                  "PE probably died");
            break;
        }
        if (n == -ECANCELED) break;  // we are closing
        fail(c, "receiving from " + c->name + " failed: " + errno_text(n) +
                    (n == -ECONNRESET ? " (the PE probably died)" : ""));
        break;
    }
    c->reader_done.set();
}

// The reader's sink: bytes from the socket, decoded and handed out at once (from the loop's
// poll while the stream spins). Goes on while no large payload waits to be received in
// place and nothing failed.
bool mesh::take_bytes(void* conn, std::span<const std::byte> bytes) {
    auto* c = static_cast<connection*>(conn);
    mesh& m = *c->owner;
    c->reader.feed_all(bytes, [&](frame&& f) { m.deliver(c, std::move(f)); });
    if (c->reader.failed()) m.fail(c, describe(c->reader.error(), c->name));
    return !c->failed && c->reader.payload_window().size() < direct_receive_min;
}

void mesh::deliver(connection* c, frame f) {
    if (c->failed) return;  // nothing after an invalid frame is handed out
    if (f.header.source_pe != c->pe) {
        fail(c, "frame from " + c->name + " claims to come from PE " +
                    std::to_string(f.header.source_pe) + "; closing the connection");
        return;
    }
    if (f.header.type == frame_type::disconnect) {
        c->bye.set();
        wake_receiver();  // a receive() draining the inbox may now end with nullopt
        return;
    }
    if (_hook && _hook->take(c->pe, f)) return;
    _inbox.push_back(received{c->pe, std::move(f)});
    wake_receiver();
}

void mesh::fail(connection* c, const std::string& why) {
    if (c->failed) return;
    c->failed = true;
    c->st = connection_state::error;
    c->wake.set();
    c->bye.set();       // nobody waits for a bye from a dead peer
    c->attached.set();  // nor for a dial that gave up
    if (_failure.empty() && _cfg.peer_failure_ends_receive) _failure = why;
    // Said before the queued frames fail: their senders may stop the job on the spot, and
    // this is the text that names the cause.
    if (_on_failure)
        _on_failure(c->pe, why);
    else
        std::fprintf(stderr, "coverse: PE %u: %s\n", _cfg.rank, why.c_str());
    while (!c->queue.empty()) {
        outgoing* o = c->queue.front();
        c->queue.pop_front();
        complete(o, -EPIPE);
    }
    wake_receiver();
}

void mesh::wake_receiver() noexcept {
    if (_receiver) scheduler::this_thread().schedule(std::exchange(_receiver, {}));
}

std::optional<received> mesh::try_receive() {
    if (_inbox.empty()) return std::nullopt;
    received r = std::move(_inbox.front());
    _inbox.pop_front();
    return r;
}

task<std::optional<received>> mesh::receive() {
    struct awaiter {
        mesh* m;
        bool await_ready() const noexcept { return false; }
        void await_suspend(std::coroutine_handle<> h) noexcept { m->_receiver = h; }
        void await_resume() const noexcept {}
    };
    for (;;) {
        if (auto r = try_receive()) co_return r;
        if (!_failure.empty()) throw mesh_error(_failure);
        bool any_open = _accepting;  // lazy: a peer may still connect
        for (auto& c : _conns)
            if (c &&
                (c->st == connection_state::connected ||
                 c->st == connection_state::disconnecting) &&
                !c->reader_done.is_set() && !c->bye.is_set())
                any_open = true;
        if (!any_open) co_return std::nullopt;
        co_await awaiter{this};
    }
}

// ---- shutdown ----------------------------------------------------------------------------

task<void> mesh::disconnect(connection* c) {
    // A lazy connection still being made: frames wait on it, so the handshake follows them.
    while (!c->s && !c->failed)
        co_await c->attached.wait();
    if (c->failed) co_return;
    c->st = connection_state::disconnecting;
    const auto body = encode(disconnect_payload{});
    frame_header h;
    h.type = frame_type::disconnect;
    if (co_await transmit(c, h, body) < 0) co_return;  // fail() reported it
    co_await c->bye.wait();  // everything the peer sent has been delivered
    // The peer starts nothing new either: what we still had to answer is queued. The writer
    // ends once that is out.
    c->writer_closing = true;
    c->wake.set();
    co_await c->writer_done.wait();
    if (c->failed) co_return;
    c->s->shutdown_send();
    co_await c->reader_done.wait();  // the peer half-closed too
    if (!c->failed) c->st = connection_state::disconnected;
}

task<void> mesh::shutdown() {
    // No new connections from here: peers that still had something for us have connected
    // (CONNECT=lazy: the machine layer agreed on the exit first).
    _accepting = false;
    if (_listener) co_await _listener->close();
    std::vector<task<void>> parts;
    for (auto& c : _conns)
        if (c && !c->failed &&
            (c->st == connection_state::connected ||
             (c->st == connection_state::connecting && _cfg.connect == connect_mode::lazy)))
            parts.push_back(disconnect(c.get()));
    // The deadline stops the connection tasks themselves: a writer blocked on a peer that
    // does not read would otherwise keep the disconnect frame (and this call) waiting.
    // The connections still in the handshake are named as the deadline finds them: stopping
    // their tasks fails some of them (a writer stopped mid-frame), which ends that state.
    auto watchdog = [](mesh* m, std::chrono::milliseconds limit, std::string* stuck) -> task<void> {
        co_await sleep_for(limit);
        for (auto& c : m->_conns)
            if (c && c->st == connection_state::disconnecting) {
                if (!stuck->empty()) *stuck += ", ";
                *stuck += c->name;
            }
        m->_tasks.request_stop();
    };
    std::string stuck;
    const auto race =
        co_await when_any(when_all(std::move(parts)), watchdog(this, _cfg.connect_timeout, &stuck));
    const bool finished = race.index == 0;
    _tasks.request_stop();
    co_await _tasks.join();
    for (auto& c : _conns) {
        if (!c) continue;
        if (c->st == connection_state::disconnecting) c->st = connection_state::error;
        if (c->s) co_await c->s->close();
        c->reader_done.set();
    }
    wake_receiver();
    if (!finished)
        throw mesh_error("coverse: PE " + std::to_string(_cfg.rank) +
                         ": the disconnect handshake did not finish within " +
                         seconds(_cfg.connect_timeout) + " with " +
                         (stuck.empty() ? std::string("a peer") : stuck) +
                         "; frames it still had in flight may be lost");
}

}  // namespace coverse::net
