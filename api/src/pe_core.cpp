// The machine core of one PE (see pe_core.hpp for its parts and the send handle stages).
#include "pe_core.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include <coverse/alloc/config.hpp>
#include <coverse/alloc/message.hpp>
#include <coverse/runtime/settings.hpp>
#include <coverse/runtime/sync_wait.hpp>
#include <coverse/runtime/timer.hpp>

namespace coverse::detail {

pe_core* pe_core::_instance = nullptr;

void wait_list::notify_all() {
    if (_waiters.empty()) return;
    auto waiters = std::move(_waiters);
    _waiters.clear();
    auto& s = scheduler::this_thread();
    for (auto h : waiters)
        s.schedule(h);
}

namespace {

// Removes argv[i .. i+k) and keeps the NULL terminator.
void remove_args(int& argc, char** argv, int i, int k) {
    for (int j = i; j + k <= argc; ++j)
        argv[j] = argv[j + k];
    argc -= k;
}

std::uint32_t parse_pe_count(const char* text, const char* flag) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(text, &end, 10);
    if (errno || end == text || *end || v < 1 || v > 65536)
        throw std::runtime_error(std::string("coverse: ") + flag + " needs a PE count from 1 to " +
                                 "65536, got \"" + text + "\"");
    return static_cast<std::uint32_t>(v);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Start-up

pe_core& pe_core::get(const char* caller) {
    if (!_instance) {
        std::fprintf(stderr,
                     "coverse: %s called before ConverseInit (or after ConverseExit); start "
                     "the runtime with ConverseInit or coverse::run first\n",
                     caller);
        std::abort();
    }
    return *_instance;
}

void pe_core::consume_flags(int& argc, char** argv) {
    for (int i = 1; i < argc;) {
        const std::string_view a = argv[i];
        if (a == "+p" && i + 1 < argc) {
            _opts.num_pes_flag = parse_pe_count(argv[i + 1], "+p");
            remove_args(argc, argv, i, 2);
        } else if (a.size() > 2 && a.substr(0, 2) == "+p" && a[2] >= '0' && a[2] <= '9') {
            _opts.num_pes_flag = parse_pe_count(argv[i] + 2, "+p");
            remove_args(argc, argv, i, 1);
        } else if (a == "++local" || a == "++quiet") {
            remove_args(argc, argv, i, 1);
        } else if (a == "++verbose") {
            _opts.verbose = true;
            remove_args(argc, argv, i, 1);
        } else if (a == "+setcpuaffinity") {
            _opts.set_affinity = true;
            remove_args(argc, argv, i, 1);
        } else {
            ++i;
        }
    }
}

pe_core::pe_core(int& argc, char** argv) : _t0(std::chrono::steady_clock::now()) {
    if (_instance)
        throw std::runtime_error("coverse: the runtime is already initialised in this process");
    // The self-launch needs the arguments as given (the PEs consume them themselves).
    std::vector<std::string> original(argv, argv + argc);
    settings::consume_command_line(argc, argv);  // ++set NAME=VALUE
    consume_flags(argc, argv);

    std::optional<net::launch_info> info = net::launch_info_from_env();
    if (!info && _opts.num_pes_flag > 1) {
        // Started directly with +pN: become the launcher of N copies of ourselves, the
        // same way coverse-run would, and exit with the job's status.
        net::launch_options lo;
        lo.num_pes = _opts.num_pes_flag;
        lo.argv = std::move(original);
        lo.argv[0] = "/proc/self/exe";
        lo.bind = _opts.set_affinity;
        lo.verbose = _opts.verbose;
        lo.register_timeout = net::connection_timeout_from_env();
        std::fflush(nullptr);
        std::exit(net::run_job(lo));
    }

    _broadcast_tree = settings::enabled("BROADCAST_TREE");
    _small_boundary = static_cast<std::uint32_t>(
        std::min<std::size_t>(settings::count("SMALL_MESSAGE_BOUNDARY"), 0xFFFF'FFFFu));
    const std::size_t max_handles = std::max<std::size_t>(1, settings::count("MAXIMUM_HANDLES"));
    _slots.resize(max_handles);
    _free_slots.reserve(max_handles);
    for (std::size_t i = max_handles; i-- > 0;)
        _free_slots.push_back(static_cast<std::uint32_t>(i));
    _conditions.resize(CcdUSERMAX + 1);
    _internal[static_cast<std::uint32_t>(internal_handler::reduce_contribution)] = handler_entry{
        [](void* m) { pe_core::get("reduce").reduce_contribution(m); }, nullptr, nullptr};
    _internal[static_cast<std::uint32_t>(internal_handler::reduce_struct_result)] = handler_entry{
        [](void* m) {
            void* fields[2];
            std::memcpy(fields, static_cast<std::byte*>(m) + CmiMsgHeaderSizeBytes, sizeof fields);
            alloc::msg_free(m);
            reinterpret_cast<CmiHandler>(fields[0])(fields[1]);
        },
        nullptr, nullptr};
    _conditions_keep.resize(CcdUSERMAX + 1);

    const net::backend_kind kind = net::backend_kind_from_env();
    scheduler_options so = scheduler_options::from_env();
    if (kind == net::backend_kind::asio) so.use_io_uring = false;  // Asio blocks by itself
    // More PEs on this host than cores we may run on: spinning PEs would take the core from
    // the PE they wait for, so an idle PE yields while it spins.
    if (info && info->num_pes > static_cast<std::uint32_t>(CmiNumCores()))
        so.yield_while_spinning = true;
    _sched = std::make_unique<scheduler>(so);
    _instance = this;

    if (info) {
        try {
            start_networked(*info);
        } catch (...) {
            _instance = nullptr;
            throw;
        }
    } else {
        _pe = 0;
        _num_pes = 1;
        start_trace(_sched->io() ? "io_uring (no network: one PE)" : "none (one PE)");
    }
    if (_send_seq.size() != _num_pes) {  // one PE: no network start-up set them
        _send_seq.assign(_num_pes, 0);
        _recv_seq.assign(_num_pes, 0);
    }

    if (_opts.set_affinity) {
        cpu_set_t allowed;
        if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
            std::vector<int> cpus;
            for (int c = 0; c < CPU_SETSIZE; ++c)
                if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
            if (!cpus.empty()) {
                cpu_set_t one;
                CPU_ZERO(&one);
                CPU_SET(cpus[_pe % cpus.size()], &one);
                sched_setaffinity(0, sizeof one, &one);
            }
        }
    }
}

void pe_core::start_networked(const net::launch_info& info) {
    _pe = info.pe;
    _num_pes = info.num_pes;
    // Counted from the first frame: messages may arrive while start-up still waits in
    // its barrier (a faster PE's start function already sends).
    _send_seq.assign(_num_pes, 0);
    _recv_seq.assign(_num_pes, 0);
    if (_opts.num_pes_flag && _opts.num_pes_flag != _num_pes)
        throw std::runtime_error("coverse: PE " + std::to_string(_pe) + ": +p" +
                                 std::to_string(_opts.num_pes_flag) +
                                 " disagrees with the launcher's job of " +
                                 std::to_string(_num_pes) + " PEs; drop +p or make them match");
    const auto timeout = net::connection_timeout_from_env();
    _launcher = std::make_unique<net::launcher_client>(info, timeout);

    _backend = net::make_backend(*_sched, net::backend_kind_from_env(), &_backend_why);
    if (!_backend)
        throw std::runtime_error("coverse: PE " + std::to_string(_pe) +
                                 ": no network backend: " + _backend_why);
    net::endpoint here{"127.0.0.1", 0};
    auto l = _backend->listen(here);
    if (l.error)
        throw std::runtime_error("coverse: PE " + std::to_string(_pe) +
                                 ": cannot listen on 127.0.0.1: " + std::strerror(-l.error));
    const std::uint16_t port = l.value->local().port;

    start_trace(_backend_why);
    shm_create(info);  // before registering: peers may map our rings once the mesh is up
    trace::emit(trace::kind::phase_begin, 1);
    auto table = _launcher->register_node(port, "127.0.0.1", timeout);
    trace::emit(trace::kind::phase_end, 1);
    if (table.size() != _num_pes)
        throw std::runtime_error("coverse: PE " + std::to_string(_pe) + ": the launcher sent " +
                                 std::to_string(table.size()) + " entries for a job of " +
                                 std::to_string(_num_pes) + " PEs");

    net::mesh_config cfg;
    cfg.rank = _pe;
    cfg.num_pes = _num_pes;
    cfg.job_key = info.job_key;
    cfg.connect_timeout = timeout;
    // Payloads land in message memory: a standard frame's payload is the Converse message.
    cfg.payload_alloc.allocate = static_cast<void* (*)(std::size_t) noexcept>(&alloc::msg_alloc);
    cfg.payload_alloc.release = &alloc::msg_free;
    for (const auto& e : table)
        cfg.peers.push_back(net::endpoint{e.ip, e.data_port});
    _mesh = std::make_unique<net::mesh>(*_backend, std::move(l.value), std::move(cfg));
    _mesh->on_peer_failure([this](std::uint32_t pe, const std::string& why) {
        if (_shut_down) return;
        std::string text = "PE " + std::to_string(_pe) + " lost PE " + std::to_string(pe) + ": " +
                           why + "; stopping the job";
        if (_launcher)
            _launcher->error(text + "\n");
        else
            std::fprintf(stderr, "coverse: %s\n", text.c_str());
    });
    if (_num_pes > 1) {
        trace::emit(trace::kind::phase_begin, 2);
        sync_wait(_mesh->establish());
        trace::emit(trace::kind::phase_end, 2);
        _receiving = true;
        _sched->spawn(receive_loop(), "coverse receive loop");
        shm_connect(info, table);
    }
}

pe_core::~pe_core() {
    if (!_shut_down) shutdown();
    _instance = nullptr;
}

void pe_core::start_trace(const std::string& backend) {
    trace::session_info info;
    info.pe = _pe;
    info.num_pes = _num_pes;
    info.backend = backend;
    info.provider = "none (stream path only)";
    for (const auto& s : settings::all()) {
        try {
            const auto r = settings::resolve(s.name);
            info.config +=
                r.name + "=" + r.value + " (" + std::string(settings::to_string(r.from)) + ")\n";
        } catch (const std::exception&) {
        }
    }
    _trace = trace::start_from_env(info);  // null unless TRACE is set; throws on a bad DIR
    if (_trace) {
        _trace_flush = std::make_unique<trace::flush_poller>(_trace->recorder());
        _sched->add_poller(*_trace_flush);
    }
}

void pe_core::stop_trace() noexcept {
    // A handler that called ConverseExit never returns: its receive handle ends here.
    for (auto it = _running_receives.rbegin(); it != _running_receives.rend(); ++it)
        trace::emit(trace::kind::handle_released, *it);
    _running_receives.clear();
    if (_trace_flush) {
        _sched->remove_poller(*_trace_flush);
        _trace_flush.reset();
    }
    _trace.reset();  // flushes, closes, uninstalls
}

double pe_core::wall_time() const noexcept {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - _t0).count();
}

[[noreturn]] void pe_core::fatal(const std::string& text) {
    abort_job(text);
}

[[noreturn]] void pe_core::peer_lost(const std::string& text) {
    // A dead peer is usually seen by the launcher too (it reaps the process). Give it a
    // moment to stop the job and name the PE that died and how; abort only if it does not.
    if (_launcher) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    abort_job(text);
}

// ---------------------------------------------------------------------------------------
// Handlers

int pe_core::register_handler(CmiHandler h, CmiHandlerEx hx, void* user) {
    _handlers.push_back(handler_entry{h, hx, user});
    return static_cast<int>(_handlers.size() - 1);
}

void pe_core::number_handler(int n, CmiHandler h, CmiHandlerEx hx, void* user) {
    if (n < 0 || static_cast<std::uint32_t>(n) >= internal_handler_base)
        fatal("CmiNumberHandler: handler number " + std::to_string(n) +
              " is out of range; use numbers from 0 up");
    if (static_cast<std::size_t>(n) >= _handlers.size()) _handlers.resize(n + 1);
    _handlers[n] = handler_entry{h, hx, user};
}

CmiHandler pe_core::handler_function(int n) const noexcept {
    if (n < 0 || static_cast<std::size_t>(n) >= _handlers.size()) return nullptr;
    return _handlers[n].fn;
}

// ---------------------------------------------------------------------------------------
// The handle table

CmiCommHandle pe_core::user_handle(std::uint32_t slot) const noexcept {
    const std::uint64_t v = (std::uint64_t{_slots[slot].generation} << 32) | (slot + 1);
    return reinterpret_cast<CmiCommHandle>(static_cast<std::uintptr_t>(v));
}

std::uint32_t pe_core::slot_of(CmiCommHandle h, const char* caller) const {
    const auto v = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(h));
    const std::uint32_t index = static_cast<std::uint32_t>(v & 0xFFFF'FFFFu);
    const std::uint32_t gen = static_cast<std::uint32_t>(v >> 32);
    if (index == 0 || index > _slots.size() || !_slots[index - 1].in_use ||
        _slots[index - 1].generation != gen || !_slots[index - 1].user_owned ||
        _slots[index - 1].released) {
        char buf[160];
        std::snprintf(buf, sizeof buf,
                      "%s: %p is not a live communication handle of PE %u (already released, "
                      "or not returned by an async send)",
                      caller, h, _pe);
        const_cast<pe_core*>(this)->fatal(buf);
    }
    return index - 1;
}

std::uint32_t pe_core::acquire_slot(const char* caller) {
    if (_free_slots.empty()) {
        // Back-pressure: wait for a send to finish. If nothing is in flight, every handle is
        // held by the application and waiting would never end.
        if (_sends_in_flight == 0)
            fatal(std::string(caller) + ": all " + std::to_string(_slots.size()) +
                  " communication handles are held by the application (async sends whose "
                  "handles were never released with CmiReleaseCommHandle); release them or "
                  "raise MAXIMUM_HANDLES");
        _sched->run_until([&] { return !_free_slots.empty() || _sends_in_flight == 0; });
        if (_free_slots.empty()) return acquire_slot(caller);
    }
    const std::uint32_t s = _free_slots.back();
    _free_slots.pop_back();
    auto& slot = _slots[s];
    slot.in_use = true;
    slot.user_owned = false;
    slot.released = false;
    slot.pending = 0;
    slot.free_when_done = nullptr;
    slot.traced_first = false;
    slot.trace_id = (std::uint64_t{slot.generation} << 32) | s;
    return s;
}

task<void> pe_core::wait_for_slot() {
    while (_free_slots.empty()) {
        if (_sends_in_flight == 0)
            fatal("send: all " + std::to_string(_slots.size()) +
                  " communication handles are held by the application; release them or "
                  "raise MAXIMUM_HANDLES");
        co_await _slot_waiters.wait();
    }
}

void pe_core::free_slot(std::uint32_t s) {
    auto& slot = _slots[s];
    trace::emit(trace::kind::handle_released, slot.trace_id);
    slot.in_use = false;
    ++slot.generation;
    _free_slots.push_back(s);
    _slot_waiters.notify_all();
}

// A frame of the slot's send reached the kernel (or the local queue).
void pe_core::slot_sent(std::uint32_t s) {
    auto& slot = _slots[s];
    if (--slot.pending > 0) return;
    --_sends_in_flight;
    trace::emit(trace::kind::handle_completed, slot.trace_id);
    if (slot.free_when_done) {
        alloc::msg_free(slot.free_when_done);
        slot.free_when_done = nullptr;
    }
    if (!slot.user_owned || slot.released) free_slot(s);
    _send_waiters.notify_all();
}

bool pe_core::handle_done(CmiCommHandle h, const char* caller) {
    if (!h) return true;
    const std::uint32_t s = slot_of(h, caller);
    if (_slots[s].pending == 0) return true;
    // A loop around CmiAsyncMsgSent must finish on its own: make progress here.
    _sched->run_once();
    return _slots[s].pending == 0;
}

void pe_core::release_handle(CmiCommHandle h, const char* caller) {
    if (!h) return;
    const std::uint32_t s = slot_of(h, caller);
    _slots[s].released = true;
    if (_slots[s].pending == 0) free_slot(s);
}

void pe_core::trace_send(std::uint64_t id, std::uint32_t dest, std::uint32_t size) {
    if (!trace::enabled()) return;
    const auto proto = size <= _small_boundary ? send_protocol::inline_send : send_protocol::stream;
    const std::uint64_t seq = _send_seq[dest];
    trace::emit(trace::kind::handle_allocated, id, (seq << 32) | size,
                (std::uint64_t{dest} << 32) | static_cast<std::uint64_t>(proto));
}

// ---------------------------------------------------------------------------------------
// Sends

void pe_core::deliver_local(void* owned_copy, std::uint32_t size) {
    trace_receive(owned_copy, _pe, size);
    _net_queue.push_back(owned_copy);
}

// A receive handle: opened when a message arrives, completed when its handler starts,
// released when the handler returns. Its index rides in the header's machine fields,
// which every send overwrites, so a message the handler sends on is not confused with it.
void pe_core::trace_receive(void* msg, std::uint32_t from, std::uint32_t size) {
    const std::uint64_t seq = _recv_seq[from]++;
    if (!trace::enabled()) {
        header_of(msg)->flags &= ~header_flag_traced_receive;  // a sender's bit means nothing
        return;
    }
    const std::uint32_t index = static_cast<std::uint32_t>(_recv_ids++);
    const auto proto = size <= _small_boundary ? send_protocol::inline_send : send_protocol::stream;
    trace::emit(trace::kind::handle_allocated, receive_trace_id(index), (seq << 32) | size,
                (std::uint64_t{from} << 32) | (1u << 8) | static_cast<std::uint64_t>(proto));
    header_of(msg)->flags |= header_flag_traced_receive;
    header_of(msg)->reserved = index;
}

// Counts the frame in its pair's sequence and opens its trace handle: a send handle's first
// frame is the handle itself; each further destination (list send, multicast, broadcast)
// gets a handle of its own, which closes with that frame. Returns that extra handle's
// index, 0 when there is none.
std::uint32_t pe_core::trace_frame(std::uint32_t slot, std::uint32_t dest, std::uint32_t size) {
    std::uint32_t extra = 0;
    if (trace::enabled()) {
        auto& sl = _slots[slot];
        if (!sl.traced_first) {
            sl.traced_first = true;
            trace_send(sl.trace_id, dest, size);
        } else {
            if (++_extra_trace_ids == 0) ++_extra_trace_ids;
            extra = _extra_trace_ids;
            trace_send(extra_trace_id(extra), dest, size);
        }
    }
    ++_send_seq[dest];
    return extra;
}

// A destination that is this PE: delivered by copy at once, so an extra handle closes now.
void pe_core::self_frame_traced(std::uint32_t slot, std::uint32_t size) {
    if (const std::uint32_t extra = trace_frame(slot, _pe, size)) {
        trace::emit(trace::kind::handle_completed, extra_trace_id(extra));
        trace::emit(trace::kind::handle_released, extra_trace_id(extra));
    }
}

void pe_core::start_frame(std::uint32_t dest, void* buf, std::uint32_t size, std::uint32_t slot,
                          std::uint16_t flags, std::uint32_t tag) {
    const std::uint32_t extra = trace_frame(slot, dest, size);
    ++_slots[slot].pending;
    void* ctx =
        reinterpret_cast<void*>(static_cast<std::uintptr_t>((std::uint64_t{extra} << 32) | slot));
    transmit(dest, buf, size, flags, tag, ctx);
}

// One frame to `dest`: through its shared-memory ring when it is on this host, else the
// mesh. Every frame to one PE takes the same path, so they stay in order. `ctx` says what
// completes when the bytes are out (see frame_sent).
void pe_core::transmit(std::uint32_t dest, void* buf, std::uint32_t size, std::uint16_t flags,
                       std::uint32_t tag, void* ctx) {
    if (!_shm_out.empty() && _shm_out[dest].ring) {
        shm_send(dest, static_cast<const std::byte*>(buf), size,
                 (flags & net::frame_flags::broadcast) ? net::shm_flags::broadcast : 0, tag, ctx);
        return;
    }
    net::frame_header h;
    h.type = net::frame_type::standard;
    h.flags = flags;
    h.tag = tag;
    // Posted, not awaited: no coroutine frame per message; the writer calls back.
    const int rc =
        _mesh->post(dest, h, std::span<const std::byte>(static_cast<std::byte*>(buf), size),
                    &pe_core::frame_sent, ctx);
    if (rc < 0) frame_sent(ctx, rc, dest);
}

void pe_core::frame_sent(void* ctx, int result) {
    frame_sent(ctx, result, 0xFFFF'FFFFu);
}

void pe_core::frame_sent(void* ctx, int result, std::uint32_t dest) {
    pe_core& self = *_instance;
    if (result < 0 && !self._shut_down)
        self.peer_lost(
            "PE " + std::to_string(self._pe) + " could not send a message" +
            (dest != 0xFFFF'FFFFu ? " to PE " + std::to_string(dest) : std::string()) + ": " +
            std::strerror(-result) +
            (result == -ENOTCONN || result == -EPIPE ? " (that PE has exited or failed)" : ""));
    const auto v = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(ctx));
    if (v & forward_ctx_bit) {  // a broadcast forward: drop its reference to the buffer
        alloc::msg_free(reinterpret_cast<void*>(static_cast<std::uintptr_t>(v & ~forward_ctx_bit)));
        --self._sends_in_flight;
        self._send_waiters.notify_all();
        return;
    }
    if (const auto extra = static_cast<std::uint32_t>(v >> 32)) {
        trace::emit(trace::kind::handle_completed, extra_trace_id(extra));
        trace::emit(trace::kind::handle_released, extra_trace_id(extra));
    }
    self.slot_sent(static_cast<std::uint32_t>(v));
}

CmiCommHandle pe_core::send(int dest, int size, void* msg, ownership own, const char* caller) {
    const int one[1] = {dest};
    return send_many(std::span<const int>(one, 1), size, msg, own, caller);
}

void pe_core::check_message(int size, const void* msg, const char* caller) {
    if (size < CmiMsgHeaderSizeBytes || !msg)
        fatal(std::string(caller) + ": a message of " + std::to_string(size) +
              " bytes is shorter than the Converse header (CmiMsgHeaderSizeBytes = " +
              std::to_string(CmiMsgHeaderSizeBytes) + "); allocate header + data");
}

// Opens a send: the buffer its frames go out from (a copy for Sync and small Async sends,
// the caller's for AndFree and large Async ones) and its handle, held until end_send().
pe_core::open_send pe_core::begin_send(int size, void* msg, ownership own, const char* caller) {
    const auto usize = static_cast<std::uint32_t>(size);
    // Small async sends are copied: the caller gets handle 0 and its buffer back at once.
    if (own == ownership::borrow && usize <= _small_boundary) own = ownership::copy;
    void* buf = msg;
    if (own == ownership::copy) {
        buf = alloc::msg_alloc(usize);
        if (!buf)
            fatal(std::string(caller) + ": out of memory copying " + std::to_string(size) +
                  " bytes");
        std::memcpy(buf, msg, usize);
    }
    const std::uint32_t s = acquire_slot(caller);
    ++_sends_in_flight;
    _slots[s].pending = 1;  // held until every frame is started
    if (own != ownership::borrow) _slots[s].free_when_done = buf;
    return open_send{buf, s, usize, own == ownership::borrow};
}

// The destination that is this PE: a copy goes straight to the network queue.
void pe_core::send_to_self(const open_send& o, const char* caller) {
    self_frame_traced(o.slot, o.size);
    void* copy = alloc::msg_alloc(o.size);
    if (!copy) fatal(std::string(caller) + ": out of memory");
    std::memcpy(copy, o.buf, o.size);
    deliver_local(copy, o.size);
}

// Drops the hold of begin_send(); returns the user's handle, or 0 when the send is done.
CmiCommHandle pe_core::end_send(const open_send& o, const char* caller) {
    _slots[o.slot].user_owned = o.user;
    CmiCommHandle h = o.user ? user_handle(o.slot) : nullptr;
    slot_sent(o.slot);  // completes now if every frame already went (all local, or copied)
    if (o.user && _slots[o.slot].pending == 0) {
        release_handle(h, caller);  // finished: the handle would only need releasing
        return nullptr;
    }
    return h;
}

CmiCommHandle pe_core::send_many(std::span<const int> pes, int size, void* msg, ownership own,
                                 const char* caller) {
    check_message(size, msg, caller);
    for (int p : pes)
        if (p < 0 || static_cast<std::uint32_t>(p) >= _num_pes)
            fatal(std::string(caller) + ": destination PE " + std::to_string(p) +
                  " is out of range (the job has " + std::to_string(_num_pes) + " PEs)");
    if (pes.empty()) {
        if (own == ownership::take) alloc::msg_free(msg);
        return nullptr;
    }
    const open_send o = begin_send(size, msg, own, caller);
    for (int p : pes) {
        if (static_cast<std::uint32_t>(p) == _pe)
            send_to_self(o, caller);
        else
            start_frame(static_cast<std::uint32_t>(p), o.buf, o.size, o.slot, 0, 0);
    }
    return end_send(o, caller);
}

std::vector<std::uint32_t> pe_core::tree_children(std::uint32_t root, std::uint32_t of) const {
    std::vector<std::uint32_t> out;
    const std::uint32_t rel = (of + _num_pes - root) % _num_pes;
    for (std::uint32_t k = 1; k <= 4; ++k) {
        const std::uint64_t c = std::uint64_t{rel} * 4 + k;
        if (c >= _num_pes) break;
        out.push_back(static_cast<std::uint32_t>((c + root) % _num_pes));
    }
    return out;
}

CmiCommHandle pe_core::broadcast(int size, void* msg, ownership own, bool include_self,
                                 const char* caller) {
    check_message(size, msg, caller);
    header_of(msg)->root_plus_one = _pe + 1;
    if (!_broadcast_tree) {
        std::vector<int> all;
        for (std::uint32_t p = 0; p < _num_pes; ++p)
            if (p != _pe || include_self) all.push_back(static_cast<int>(p));
        return send_many(all, size, msg, own, caller);
    }
    const open_send o = begin_send(size, msg, own, caller);
    if (include_self) send_to_self(o, caller);
    for (std::uint32_t c : tree_children(_pe, _pe))
        start_frame(c, o.buf, o.size, o.slot, net::frame_flags::broadcast, _pe);
    return end_send(o, caller);
}

task<void> pe_core::send_async(std::uint32_t dest, std::span<const std::byte> msg) {
    co_await wait_for_slot();
    CmiCommHandle h = send(static_cast<int>(dest), static_cast<int>(msg.size()),
                           const_cast<std::byte*>(msg.data()), ownership::borrow, "send");
    while (h && _slots[slot_of(h, "send")].pending > 0)
        co_await _send_waiters.wait();
    release_handle(h, "send");
}

task<void> pe_core::broadcast_async(std::span<const std::byte> msg, bool include_self) {
    co_await wait_for_slot();
    CmiCommHandle h = broadcast(static_cast<int>(msg.size()), const_cast<std::byte*>(msg.data()),
                                ownership::borrow, include_self, "broadcast");
    while (h && _slots[slot_of(h, "broadcast")].pending > 0)
        co_await _send_waiters.wait();
    release_handle(h, "broadcast");
}

// ---------------------------------------------------------------------------------------
// Groups

CmiGroup pe_core::establish_group(int npes, const int* pes) {
    if (npes < 0 || (npes > 0 && !pes)) fatal("CmiEstablishGroup: invalid PE list");
    std::vector<int> members(pes, pes + npes);
    for (int p : members)
        if (p < 0 || static_cast<std::uint32_t>(p) >= _num_pes)
            fatal("CmiEstablishGroup: PE " + std::to_string(p) + " is out of range (the job has " +
                  std::to_string(_num_pes) + " PEs)");
    _groups.push_back(std::move(members));
    return CmiGroup{static_cast<std::uint32_t>(_groups.size())};
}

const std::vector<int>& pe_core::group(CmiGroup g, const char* caller) const {
    if (g.id == 0 || g.id > _groups.size())
        const_cast<pe_core*>(this)->fatal(std::string(caller) + ": group " + std::to_string(g.id) +
                                          " was not made by CmiEstablishGroup on this PE");
    return _groups[g.id - 1];
}

// ---------------------------------------------------------------------------------------
// Receiving

task<void> pe_core::receive_loop() {
    for (;;) {
        std::optional<net::received> r;
        std::string failure;
        try {
            r = co_await _mesh->receive();
        } catch (const std::exception& e) {
            failure = e.what();
        }
        if (!failure.empty()) {
            if (_shut_down) co_return;
            peer_lost("PE " + std::to_string(_pe) + ": " + failure);
        }
        if (!r) break;
        on_frame(std::move(*r));
    }
    _receiving = false;
}

void pe_core::on_frame(net::received r) {
    const auto& h = r.frame.header;
    switch (h.type) {
        case net::frame_type::standard: {
            accept_message(r.from, r.frame.payload.release(), h.payload_length,
                           (h.flags & net::frame_flags::broadcast) != 0, h.tag);
            return;
        }
        case net::frame_type::barrier:
            on_barrier_frame(r.from, r.frame);
            return;
        default:
            print("coverse: PE " + std::to_string(_pe) + " ignored a " +
                      std::string(net::frame_type_name(h.type)) + " frame from PE " +
                      std::to_string(r.from) + "\n",
                  true);
    }
}

// A received message (CmiAlloc'd, owned): forwarded along its broadcast tree, then queued
// for its handler. The same for both paths (TCP mesh, shared-memory ring).
void pe_core::accept_message(std::uint32_t from, void* msg, std::uint32_t size, bool broadcast,
                             std::uint32_t root) {
    if (size < CmiMsgHeaderSizeBytes) {  // a peer's bug: report it, never hand it on
        if (msg) alloc::msg_free(msg);
        ++_recv_seq[from];
        print("coverse: PE " + std::to_string(_pe) + " dropped a " + std::to_string(size) +
                  "-byte message from PE " + std::to_string(from) +
                  ": shorter than the Converse header\n",
              true);
        return;
    }
    std::vector<std::uint32_t> children;
    if (broadcast) children = tree_children(root, _pe);
    if (!children.empty()) {
        // The received buffer goes on to the tree children (each holding a reference); the
        // handler gets a copy it may change or free while those sends are still queued.
        void* fwd = msg;
        msg = alloc::msg_alloc(size);
        if (!msg) fatal("out of memory receiving " + std::to_string(size) + " bytes");
        std::memcpy(msg, fwd, size);
        _sends_in_flight += children.size();
        for (std::uint32_t c : children) {
            if (trace::enabled()) {
                const std::uint64_t id = (1ull << 62) | _forward_ids++;
                trace_send(id, c, size);
                trace::emit(trace::kind::handle_completed, id);
                trace::emit(trace::kind::handle_released, id);
            }
            ++_send_seq[c];
            alloc::msg_reference(fwd);
            transmit(c, fwd, size, net::frame_flags::broadcast, root, forward_ctx(fwd));
        }
        alloc::msg_free(fwd);
    }
    trace_receive(msg, from, size);
    if (take_barrier_message(msg)) {
        if (header_of(msg)->flags & header_flag_traced_receive) {  // consumed here: closed
            const auto id = receive_trace_id(header_of(msg)->reserved);
            trace::emit(trace::kind::handle_completed, id);
            trace::emit(trace::kind::handle_released, id);
        }
        alloc::msg_free(msg);
        return;
    }
    _net_queue.push_back(msg);
    _sched->end_turn();  // the handler runs before the loop enters the kernel again
}

// ---------------------------------------------------------------------------------------
// Scheduling and dispatch

void* pe_core::next_message() {
    if (!_net_queue.empty()) {
        void* m = _net_queue.front();
        _net_queue.pop_front();
        return m;
    }
    return _sched_queue.pop();
}

void pe_core::call_handler(void* msg) {
    const std::uint32_t n = header_of(msg)->handler;
    const handler_entry* e = nullptr;
    if (n >= internal_handler_base) {
        auto it = _internal.find(n);
        if (it != _internal.end()) e = &it->second;
    } else if (n < _handlers.size() && (_handlers[n].fn || _handlers[n].fnx)) {
        e = &_handlers[n];
    }
    if (!e)
        fatal("PE " + std::to_string(_pe) + " received a message for handler " + std::to_string(n) +
              ", which is not registered here (" + std::to_string(_handlers.size()) +
              " handlers registered); register the same handlers in the same order on every PE "
              "before messages for them arrive");
    std::uint64_t traced = 0;
    if (header_of(msg)->flags & header_flag_traced_receive) {
        header_of(msg)->flags &= ~header_flag_traced_receive;
        traced = receive_trace_id(header_of(msg)->reserved);
        trace::emit(trace::kind::handle_completed, traced);
        _running_receives.push_back(traced);
    }
    {
        delivery_guard guard(*_sched);
        if (e->fnx)
            e->fnx(msg, e->user);
        else
            e->fn(msg);
    }
    if (traced) {
        _running_receives.pop_back();
        trace::emit(trace::kind::handle_released, traced);
    }
}

void pe_core::handle_message(void* msg) {
    call_handler(msg);
}

task<void> pe_core::timer_task(pe_core* self, double due) {
    const auto wait = std::chrono::duration<double>(std::max(0.0, due - self->wall_time()));
    try {
        co_await sleep_for(std::chrono::duration_cast<std::chrono::microseconds>(wait) +
                           std::chrono::microseconds(1));
    } catch (const cancelled_error&) {
        co_return;  // shutting down
    }
    if (self->_armed_due == due) self->_armed_due = -1;
}

void pe_core::run_idle_wait() {
    double due = _timed.empty() ? -1 : _timed.front().due;
    // Registered periodic conditions need the loop awake when they come due, too.
    if (has_periodic()) {
        const double next = std::max(_periodic_due, wall_time() + 0.001);
        due = due < 0 ? next : std::min(due, next);
    }
    // Re-arm unless a timer task already waits for this deadline or an earlier one that
    // has not passed yet (an armed deadline in the past is stale: its task may not have
    // run yet, but it will not wake us again).
    if (due >= 0 && (_armed_due < 0 || due < _armed_due || _armed_due <= wall_time())) {
        // Wake the loop for the earliest timed callback; its wake-up alone ends the wait.
        _armed_due = due;
        _sched->spawn(timer_task(this, due), "ccd timer");
    }
    _sched->run_until([&] {
        return !_net_queue.empty() || !_sched_queue.empty() || _exit_requested ||
               (due >= 0 && wall_time() >= due);
    });
}

int pe_core::schedule(int max_msgs, bool poll_only) {
    int delivered = 0;
    for (;;) {
        if (_exit_requested) {
            _exit_requested = false;
            break;
        }
        if (max_msgs > 0 && delivered >= max_msgs) break;
        fire_timers();
        void* msg = next_message();
        if (!msg) {
            _sched->run_once();
            msg = next_message();
        }
        if (msg) {
            if (_idle) {
                _idle = false;
                raise_condition(CcdPROCESSOR_END_IDLE);
            }
            call_handler(msg);
            ++delivered;
            continue;
        }
        if (poll_only) break;
        if (!_idle) {
            _idle = true;
            raise_condition(CcdPROCESSOR_BEGIN_IDLE);
            continue;  // a callback may have sent or enqueued something
        }
        run_idle_wait();
    }
    return delivered;
}

bool pe_core::enqueue(void* msg, int strategy, int priobits, const void* prio) {
    return _sched_queue.push(msg, strategy, priobits, prio);
}

int pe_core::deliver_network(int max_msgs) {
    _sched->run_once();
    int n = 0;
    while (!_net_queue.empty() && (max_msgs <= 0 || n < max_msgs)) {
        void* m = _net_queue.front();
        _net_queue.pop_front();
        call_handler(m);
        ++n;
    }
    return max_msgs - n;
}

void pe_core::deliver_specific(int handler) {
    for (;;) {
        for (auto it = _net_queue.begin(); it != _net_queue.end(); ++it) {
            if (header_of(*it)->handler == static_cast<std::uint32_t>(handler)) {
                void* m = *it;
                _net_queue.erase(it);
                call_handler(m);
                return;
            }
        }
        if (_num_pes == 1 || !_receiving)
            fatal("CmiDeliverSpecificMsg(" + std::to_string(handler) +
                  "): no such message is queued and none can arrive");
        const std::size_t seen = _net_queue.size();
        _sched->run_until([&] { return _net_queue.size() != seen; });
    }
}

void* pe_core::get_non_local() {
    _sched->run_once();
    if (_net_queue.empty()) return nullptr;
    void* m = _net_queue.front();
    _net_queue.pop_front();
    if (header_of(m)->flags & header_flag_traced_receive) {  // handed over: its handle ends
        header_of(m)->flags &= ~header_flag_traced_receive;
        trace::emit(trace::kind::handle_completed, receive_trace_id(header_of(m)->reserved));
        trace::emit(trace::kind::handle_released, receive_trace_id(header_of(m)->reserved));
    }
    return m;
}

// ---------------------------------------------------------------------------------------
// Conditions and timed callbacks

int pe_core::call_on_condition(int cond, CcdVoidFn fn, void* arg, bool keep) {
    if (cond < 0 || cond > CcdUSERMAX)
        fatal("CcdCallOnCondition: condition " + std::to_string(cond) + " is out of range (0.." +
              std::to_string(CcdUSERMAX) + ")");
    const int id = ++_condition_ids;
    (keep ? _conditions_keep : _conditions)[cond].push_back(condition_cb{fn, arg, id});
    return id;
}

void pe_core::cancel_condition(int cond, int idx, bool keep) {
    if (cond < 0 || cond > CcdUSERMAX) return;
    auto& v = (keep ? _conditions_keep : _conditions)[cond];
    v.erase(std::remove_if(v.begin(), v.end(), [&](const condition_cb& c) { return c.id == idx; }),
            v.end());
}

void pe_core::raise_condition(int cond) {
    if (cond < 0 || cond > CcdUSERMAX) return;
    const double now = wall_time();
    auto once = std::move(_conditions[cond]);
    _conditions[cond].clear();
    for (const auto& c : once)
        c.fn(c.arg, now);
    auto keep = _conditions_keep[cond];  // a callback may register more
    for (const auto& c : keep)
        c.fn(c.arg, now);
}

void pe_core::call_after(CcdVoidFn fn, void* arg, double msecs) {
    _timed.push_back(timed_call{wall_time() + msecs / 1000.0, fn, arg});
    std::push_heap(_timed.begin(), _timed.end(), std::greater<>{});
}

void pe_core::raise_periodic(double now) {
    // CcdPERIODIC (every loop turn with callbacks), 10 ms, 100 ms and 1 s conditions,
    // raised from the scheduler loop like Converse's periodic checks.
    static constexpr struct {
        int cond;
        double period;
    } periods[] = {
        {CcdPERIODIC_10ms, 0.010}, {CcdPERIODIC_100ms, 0.100}, {CcdPERIODIC_1second, 1.0}};
    if (!_conditions[CcdPERIODIC].empty() || !_conditions_keep[CcdPERIODIC].empty())
        raise_condition(CcdPERIODIC);
    for (const auto& p : periods) {
        double& next = _periodic_next[p.cond - CcdPERIODIC_10ms];
        if (now < next) continue;
        next = now + p.period;
        if (!_conditions[p.cond].empty() || !_conditions_keep[p.cond].empty())
            raise_condition(p.cond);
    }
}

bool pe_core::has_periodic() const noexcept {
    for (int cond = CcdPERIODIC; cond <= CcdPERIODIC_1second; ++cond)
        if (!_conditions[cond].empty() || !_conditions_keep[cond].empty()) return true;
    return false;
}

void pe_core::fire_timers() {
    // Called between messages: without timed or periodic callbacks, not even a clock read.
    const bool periodic = has_periodic();
    if (_timed.empty() && !periodic) return;
    const double now = wall_time();
    if (periodic && now >= _periodic_due) {
        _periodic_due = now + 0.005;  // check the periodic conditions every 5 ms at most
        raise_periodic(now);
    }
    while (!_timed.empty() && _timed.front().due <= now) {
        std::pop_heap(_timed.begin(), _timed.end(), std::greater<>{});
        const timed_call c = _timed.back();
        _timed.pop_back();
        c.fn(c.arg, now);
    }
}

// ---------------------------------------------------------------------------------------
// Barrier: arrivals go to PE 0, which releases everyone. Out of band: no handler runs
// while a PE waits, arriving messages stay queued.

// The ordinary barrier: a spanning tree (fan-out 4, root PE 0) of internal messages over
// the same paths as user messages (the shared-memory rings on one host). Arrivals go up
// once a PE's whole subtree arrived; the release comes down. The messages are taken out
// at arrival (accept_message), never queued for a handler, so the barrier stays below the
// message queue.
task<void> pe_core::tree_barrier() {
    const std::uint32_t epoch = ++_barrier_epoch;
    trace::emit(trace::kind::phase_begin, 5, epoch);
    int children[4];
    const int n = span_children(static_cast<int>(_pe), children);
    while (_tree_arrivals[epoch] < static_cast<std::uint32_t>(n))
        co_await _barrier_waiters.wait();
    _tree_arrivals.erase(epoch);
    if (_pe != 0) {
        send_barrier_message(static_cast<std::uint32_t>(span_parent(static_cast<int>(_pe))),
                             internal_handler::barrier_arrive, epoch);
        while (_barrier_released < epoch)
            co_await _barrier_waiters.wait();
    }
    for (int i = 0; i < n; ++i)
        send_barrier_message(static_cast<std::uint32_t>(children[i]),
                             internal_handler::barrier_release, epoch);
    trace::emit(trace::kind::phase_end, 5, epoch);
}

void pe_core::send_barrier_message(std::uint32_t to, internal_handler which, std::uint32_t epoch) {
    const int size = static_cast<int>(CmiMsgHeaderSizeBytes + sizeof epoch);
    void* m = alloc::msg_alloc(static_cast<std::size_t>(size));
    if (!m) fatal("out of memory in a barrier");
    CmiInitMsgHeader(m, size);
    header_of(m)->handler = static_cast<std::uint32_t>(which);
    std::memcpy(static_cast<std::byte*>(m) + CmiMsgHeaderSizeBytes, &epoch, sizeof epoch);
    send(static_cast<int>(to), size, m, ownership::take, "CmiBarrier");
}

// Barrier messages are consumed where they arrive; returns whether `msg` was one.
bool pe_core::take_barrier_message(void* msg) {
    const std::uint32_t h = header_of(msg)->handler;
    if (h != static_cast<std::uint32_t>(internal_handler::barrier_arrive) &&
        h != static_cast<std::uint32_t>(internal_handler::barrier_release))
        return false;
    std::uint32_t epoch = 0;
    if (alloc::msg_size(msg) >= CmiMsgHeaderSizeBytes + sizeof epoch)
        std::memcpy(&epoch, static_cast<std::byte*>(msg) + CmiMsgHeaderSizeBytes, sizeof epoch);
    if (h == static_cast<std::uint32_t>(internal_handler::barrier_arrive))
        ++_tree_arrivals[epoch];
    else
        _barrier_released = std::max(_barrier_released, epoch);
    _barrier_waiters.notify_all();
    return true;
}

// CmiBarrierZero: every PE reports to PE 0 over the mesh (a barrier frame); only PE 0
// waits for all of them.
task<void> pe_core::barrier(bool zero_only) {
    if (_num_pes == 1) co_return;
    if (!zero_only) {
        co_await tree_barrier();
        co_return;
    }
    // Zero barriers count epochs of their own (the top bit marks them).
    const std::uint32_t epoch = 0x8000'0000u | ++_zero_epoch;
    trace::emit(trace::kind::phase_begin, 5, epoch);
    if (_pe != 0) {
        const auto payload = net::encode(net::barrier_payload{epoch, net::barrier_phase::arrive});
        net::frame_header h;
        h.type = net::frame_type::barrier;
        h.source_pe = _pe;
        h.payload_length = static_cast<std::uint32_t>(payload.size());
        const int rc = co_await _mesh->send(0, h, payload);
        if (rc < 0) peer_lost("PE " + std::to_string(_pe) + ": barrier: PE 0 is gone");
    } else {
        while (_barrier_arrivals[epoch] < _num_pes - 1)
            co_await _barrier_waiters.wait();
        _barrier_arrivals.erase(epoch);
    }
    trace::emit(trace::kind::phase_end, 5, epoch);
}

void pe_core::on_barrier_frame(std::uint32_t from, const net::frame& f) {
    net::decode_limits lim;
    lim.num_pes = _num_pes;
    auto d = net::decode_barrier(f.payload_bytes(), lim);
    if (!d.ok()) {
        print("coverse: PE " + std::to_string(_pe) + ": bad barrier frame from PE " +
                  std::to_string(from) + "\n",
              true);
        return;
    }
    // Only CmiBarrierZero uses barrier frames (arrivals at PE 0); CmiBarrier's tree travels
    // as internal messages (take_barrier_message).
    if (d.value.phase != net::barrier_phase::arrive || _pe != 0) {
        print("coverse: PE " + std::to_string(_pe) + ": unexpected barrier frame from PE " +
                  std::to_string(from) + "\n",
              true);
        return;
    }
    ++_barrier_arrivals[d.value.epoch];
    _barrier_waiters.notify_all();
}

// ---------------------------------------------------------------------------------------
// Reductions over the spanning tree rooted at PE 0 (fan-out 4). A contribution travels as
// a message for the internal reduce handler: {u32 sequence, u32 is_struct} then the
// child's merged message (header included) or its packed struct.

namespace {
struct reduce_prefix {
    std::uint32_t seq;
    std::uint32_t is_struct;
};
constexpr std::size_t reduce_data_offset = CmiMsgHeaderSizeBytes + sizeof(reduce_prefix);
}  // namespace

int pe_core::span_children(int pe, int* out) const noexcept {
    int n = 0;
    for (int k = 1; k <= 4; ++k) {
        const long c = static_cast<long>(pe) * 4 + k;
        if (c >= static_cast<long>(_num_pes)) break;
        if (out) out[n] = static_cast<int>(c);
        ++n;
    }
    return n;
}

pe_core::reduction& pe_core::reduction_for(std::uint32_t seq) {
    return _reductions[seq];
}

void pe_core::reduce(void* msg, int size, CmiReduceMergeFn merge) {
    const std::uint32_t seq = _reduce_seq++;
    auto& r = reduction_for(seq);
    r.local_in = true;
    r.local = msg;
    r.local_size = size;
    r.merge = merge;
    reduce_progress(seq);
}

void pe_core::reduce_struct(void* data, CmiReducePupFn pup, CmiReduceMergeFn merge, CmiHandler dest,
                            CmiReduceDeleteFn del) {
    const std::uint32_t seq = _reduce_seq++;
    auto& r = reduction_for(seq);
    r.local_in = true;
    r.is_struct = true;
    r.local = data;
    r.merge = merge;
    r.pup = pup;
    r.dest = dest;
    r.del = del;
    reduce_progress(seq);
}

void pe_core::reduce_contribution(void* msg) {
    reduce_prefix pre;
    std::memcpy(&pre, static_cast<std::byte*>(msg) + CmiMsgHeaderSizeBytes, sizeof pre);
    const int bytes = alloc::msg_size(msg) > reduce_data_offset
                          ? static_cast<int>(alloc::msg_size(msg) - reduce_data_offset)
                          : 0;
    // The remote part becomes a message (or packed data) of its own, as merge expects.
    void* part = alloc::msg_alloc(static_cast<std::size_t>(std::max(bytes, 1)));
    if (!part) fatal("out of memory in a reduction");
    std::memcpy(part, static_cast<std::byte*>(msg) + reduce_data_offset,
                static_cast<std::size_t>(bytes));
    alloc::msg_free(msg);
    reduction_for(pre.seq).remote.push_back(part);
    reduce_progress(pre.seq);
}

void pe_core::reduce_progress(std::uint32_t seq) {
    auto it = _reductions.find(seq);
    if (it == _reductions.end()) return;
    auto& r = it->second;
    const int children = span_children(static_cast<int>(_pe), nullptr);
    if (!r.local_in || static_cast<int>(r.remote.size()) < children) return;

    int size = r.is_struct ? 0 : r.local_size;
    void* merged = r.merge
                       ? r.merge(&size, r.local, r.remote.data(), static_cast<int>(r.remote.size()))
                       : r.local;
    for (void* m : r.remote)
        alloc::msg_free(m);
    reduction done = std::move(r);
    _reductions.erase(it);

    if (_pe == 0) {
        if (!done.is_struct) {
            _net_queue.push_back(merged);  // to the handler set in the message
        } else {
            // The struct result goes to `dest` from the scheduler loop, like a message.
            void* note = alloc::msg_alloc(CmiMsgHeaderSizeBytes + 2 * sizeof(void*));
            if (!note) fatal("out of memory in a reduction");
            CmiInitMsgHeader(note, CmiMsgHeaderSizeBytes);
            header_of(note)->handler =
                static_cast<std::uint32_t>(internal_handler::reduce_struct_result);
            void* fields[2] = {reinterpret_cast<void*>(done.dest), merged};
            std::memcpy(static_cast<std::byte*>(note) + CmiMsgHeaderSizeBytes, fields,
                        sizeof fields);
            _net_queue.push_back(note);
        }
        return;
    }
    // Pack what goes to the parent.
    std::size_t bytes = 0;
    if (done.is_struct) {
        pup_cursor sizing{0};
        if (done.pup) done.pup(reinterpret_cast<pup_er>(&sizing), merged);
        bytes = sizing.size;
    } else {
        bytes = static_cast<std::size_t>(size);
    }
    void* out = alloc::msg_alloc(reduce_data_offset + bytes);
    if (!out) fatal("out of memory in a reduction");
    CmiInitMsgHeader(out, static_cast<int>(reduce_data_offset + bytes));
    header_of(out)->handler = static_cast<std::uint32_t>(internal_handler::reduce_contribution);
    const reduce_prefix pre{seq, done.is_struct ? 1u : 0u};
    std::memcpy(static_cast<std::byte*>(out) + CmiMsgHeaderSizeBytes, &pre, sizeof pre);
    if (done.is_struct) {
        pup_cursor packing{1, 0, static_cast<std::byte*>(out) + reduce_data_offset};
        if (done.pup) done.pup(reinterpret_cast<pup_er>(&packing), merged);
        if (done.del) done.del(merged);
    } else {
        std::memcpy(static_cast<std::byte*>(out) + reduce_data_offset, merged, bytes);
        alloc::msg_free(merged);
    }
    send(span_parent(static_cast<int>(_pe)), static_cast<int>(reduce_data_offset + bytes), out,
         ownership::take, "CmiReduce");
}

// ---------------------------------------------------------------------------------------
// Output, input, abort

void pe_core::print(std::string_view text, bool to_stderr) {
    if (_launcher) {
        if (to_stderr)
            _launcher->error(text);
        else
            _launcher->print(text);
        return;
    }
    std::FILE* f = to_stderr ? stderr : stdout;
    std::fwrite(text.data(), 1, text.size(), f);
    std::fflush(f);
}

std::optional<std::string> pe_core::read_line() {
    if (_launcher) return _launcher->read_line();
    std::string line;
    int c;
    while ((c = std::fgetc(stdin)) != EOF && c != '\n')
        line.push_back(static_cast<char>(c));
    if (c == EOF && line.empty()) return std::nullopt;
    return line;
}

[[noreturn]] void pe_core::abort_job(const std::string& text) {
    std::fflush(stdout);
    if (_trace) _trace->flush();  // what led to the abort is what the trace is for
    if (_launcher) {
        _launcher->abort(1, text);
    } else {
        std::fprintf(stderr, "coverse: PE %u aborted: %s\n", _pe, text.c_str());
    }
    std::fflush(nullptr);
    std::_Exit(1);
}

// ---------------------------------------------------------------------------------------
// Shutdown

void pe_core::shutdown() {
    if (_shut_down) return;
    // Every pending send first, then the disconnect handshake: nothing in flight is lost.
    _sched->run_until([&] { return _sends_in_flight == 0; });
    if (_mesh) {
        trace::emit(trace::kind::phase_begin, 4);
        std::string failure;
        try {
            sync_wait(_mesh->shutdown());
        } catch (const std::exception& e) {
            failure = e.what();
        }
        trace::emit(trace::kind::phase_end, 4);
        _shut_down = true;
        if (_receiving) _sched->run_until([&] { return !_receiving; });
        if (!failure.empty())
            print("coverse: PE " + std::to_string(_pe) + ": " + failure + "\n", true);
    }
    _shut_down = true;
    shm_close();
    for (void* m : _net_queue)
        alloc::msg_free(m);
    _net_queue.clear();
    while (void* m = _sched_queue.pop())
        alloc::msg_free(m);
    _mesh.reset();
    _backend.reset();
    _launcher.reset();
    stop_trace();
    _sched.reset();
}

}  // namespace coverse::detail
