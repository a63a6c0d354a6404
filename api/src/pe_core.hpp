// The machine core of one PE: start-up (launcher registration, data mesh), the handler
// table, the handle table of sends, send paths (to self, point to point, spanning-tree and
// flat broadcast), the network and scheduler queues, dispatch, barriers, reductions,
// conditions and timed callbacks, and shutdown. The Converse facade (converse.cpp) and the
// coroutine API (coverse.cpp) are thin layers over it.
//
// Send handle stages: free -> in flight (frames handed to the rdma layer) -> completed
// (every frame's typed completion came back: its bytes are out, or a rendezvous got its
// get-done; an AndFree buffer is freed) -> released (the user's CmiReleaseCommHandle, or at
// once for internal handles). One place, slot_sent(), completes a handle exactly once.
// A message's route: facade -> send path (here) -> rdma::layer (stream or rendezvous,
// provider per peer) -> net (mesh, wire); received messages come up once, complete, in
// each peer's order, through rdma::upcalls::on_message.
#pragma once

#include <pthread.h>
#include <unistd.h>

#include <converse.h>

#include <chrono>
#include <coroutine>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <coverse/alloc/message.hpp>
#include <coverse/coverse.hpp>
#include <coverse/net/bootstrap.hpp>
#include <coverse/net/mesh.hpp>
#include <coverse/net/startup.hpp>
#include <coverse/net/transport.hpp>
#include <coverse/rdma/layer.hpp>
#include <coverse/runtime/scheduler.hpp>
#include <coverse/runtime/scope.hpp>
#include <coverse/runtime/task.hpp>
#include <coverse/runtime/trace.hpp>
#include <coverse/runtime/trace_poller.hpp>

#include "cqs.hpp"
#include "doctor.hpp"
#include "grid.hpp"
#include "spanning_tree.hpp"

namespace coverse::detail {

/// The Converse header at the start of every message (CmiMsgHeaderBasic in converse.h).
inline CmiMsgHeaderBasic* header_of(void* msg) noexcept {
    return static_cast<CmiMsgHeaderBasic*>(msg);
}

/// Handler indices the machine uses itself; user handlers never reach them.
inline constexpr std::uint32_t internal_handler_base = 0xFFFF'0000u;
enum class internal_handler : std::uint32_t {
    reduce_contribution = internal_handler_base,
    reduce_struct_result,
    sum_result,        // coroutine API reduce_sum: the total at PE 0
    sum_final,         // coroutine API reduce_sum: the total broadcast to every PE
    barrier_arrive,    // tree barrier, up: consumed on arrival, never queued
    barrier_release,   // tree barrier, down
    cth_resume,        // a Cth thread's token came up in the Csd queue (cth.cpp)
    future_set,        // CfutureSet's value for a future of this PE (futures.cpp)
    qd_start,          // quiescence: someone waits for it (to PE 0; quiescence.cpp)
    qd_request,        // quiescence: PE 0 asks for counts once idle
    qd_reply,          // quiescence: a PE's counts (to PE 0)
    qd_done,           // quiescence: detected; raise CcdQUIESCENCE
    cpm_enqueue,       // Cpm: a CpmEnqueue* message goes into the Csd queue (cpm.cpp)
    cpm_thread,        // Cpm: a CpmMakeThread message runs in a new Cth thread
    stream_credit,     // coroutine API: a receiver returns credits of a bounded stream
    coro_collective,   // coroutine API: a typed collective's message (coro_collectives.cpp)
    peer_lost_notice,  // ON_PEER_LOST=report: a PE was lost (posted locally, never sent)
    exit_report,       // exit vote (CONNECT=lazy), up: a subtree's counts; consumed on arrival
    exit_verdict,      // exit vote, down: done, or the next wave
};

/// What a pup_er points at: coverse sizes and packs (reductions of structs), never unpacks.
struct pup_cursor {
    int mode;  // 0 sizing, 1 packing
    std::size_t size = 0;
    std::byte* out = nullptr;
};

/// Header flag: the message's receive handle is traced; `reserved` holds its index.
inline constexpr std::uint32_t header_flag_traced_receive = 0x1;
/// Header flag: a coroutine send holding a credit of a bounded stream (coverse.cpp); the
/// sending PE is in the flags' bits from header_source_shift up.
inline constexpr std::uint32_t header_flag_stream_credit = 0x2;
inline constexpr std::uint32_t header_source_shift = 8;
/// Header flag: the message also returns stream credits its sender owed the receiver,
/// `reserved` = stream handler << 16 | count (machine::take_due_credits). Taken off at
/// arrival (accept_message), before anything else reads the header.
inline constexpr std::uint32_t header_flag_carries_credits = 0x4;
/// Clears the coroutine API's header flags (stream credit, its source PE, carried credits)
/// from a header the API did not compose: set by chance in a Converse program's header they
/// would return credits nobody spent, or abort the job.
/// (Only when 0x2 or 0x4 is set: no store into a Converse program's buffer otherwise; the
/// PE bits mean nothing without 0x2. The API's own sends clear all of api_header_bits.)
inline constexpr std::uint32_t api_header_bits =
    header_flag_stream_credit | header_flag_carries_credits | (~0u << header_source_shift);
/// Whether a header holds 0x2 or 0x4 (then the API's bits need clearing).
inline bool has_api_flags(const CmiMsgHeaderBasic& h) noexcept {
    return (h.flags & (header_flag_stream_credit | header_flag_carries_credits)) != 0;
}
inline void clear_api_flags(void* msg) noexcept {
    if (has_api_flags(*header_of(msg))) [[unlikely]]
        header_of(msg)->flags &= ~api_header_bits;
}
/// Trace ids: send handles are (generation << 32 | slot); receive handles and broadcast
/// forwards have their own id spaces, marked by the top bits.
inline constexpr std::uint64_t receive_trace_id(std::uint32_t index) noexcept {
    return (1ull << 63) | index;
}
inline constexpr std::uint64_t extra_trace_id(std::uint32_t index) noexcept {
    return (1ull << 61) | index;
}

/// Protocol of a send, by size (trace events and coverse-trace use the numbers).
enum class send_protocol : std::uint8_t {
    inline_send = 0,
    stream = 1,
    rendezvous = 2,
    eager_short = 3,  // the layer put it into a short slot (frame_ticket::via_eager)
    eager_long = 4,   // into a persistent handle's long buffer
};

/// Coroutines waiting for a state change; notify_all() reschedules every one of them.
class wait_list {
public:
    auto wait() noexcept {
        struct awaiter {
            wait_list& l;
            bool await_ready() const noexcept { return false; }
            void await_suspend(std::coroutine_handle<> h) { l._waiters.push_back(h); }
            void await_resume() const noexcept {}
        };
        return awaiter{*this};
    }
    void notify_all();
    bool empty() const noexcept { return _waiters.empty(); }

private:
    std::vector<std::coroutine_handle<>> _waiters;
};

struct start_options {
    std::uint32_t num_pes_flag = 0;  // +pN (0: not given)
    bool set_affinity = false;       // +setcpuaffinity
    bool verbose = false;            // ++verbose
};

class pe_core final : private rdma::upcalls {
public:
    /// Starts the PE: consumes runtime flags from argv, launches itself when started with
    /// +pN and no launcher (then never returns), registers with the launcher, builds the
    /// mesh. Throws std::runtime_error with a clear message on failure.
    pe_core(int& argc, char** argv);
    ~pe_core();
    pe_core(const pe_core&) = delete;
    pe_core& operator=(const pe_core&) = delete;

    static pe_core* instance() noexcept { return _instance; }
    /// The running core, or a clear abort when the runtime is not initialised.
    static pe_core& get(const char* caller);

    std::uint32_t pe() const noexcept { return _pe; }
    std::uint32_t num_pes() const noexcept { return _num_pes; }
    /// Messages larger than this go by rendezvous.
    std::uint32_t medium_boundary() const noexcept { return _medium_boundary; }
    /// Each PE's host identity from the node table (index = PE); one entry for one PE.
    const std::vector<std::uint64_t>& host_ids() const noexcept { return _host_ids; }
    /// CmiProbeLatencies: a collective; every PE ends with the table and the cluster map.
    void probe_latencies();  // latency.cpp
    const latency_map& latencies() const noexcept { return _latency; }
    grid_queue& grid() noexcept { return _grid; }
    scheduler& sched() noexcept { return *_sched; }
    machine& api() noexcept { return _machine; }
    /// The one-sided layer; null on a job of one PE.
    rdma::layer* rdma() noexcept { return _rdma.get(); }
    double wall_time() const noexcept;

    // ---- handlers ------------------------------------------------------------------
    /// A handler that takes several messages at once (a coroutine stream): `n` messages of
    /// its own, in arrival order.
    using batch_handler = void (*)(void* const* msgs, std::size_t n, void* user);
    /// `hb`, when given, also takes the messages queued right behind one for it at once
    /// (`hx` still takes a message alone).
    int register_handler(CmiHandler h, CmiHandlerEx hx, void* user, batch_handler hb = nullptr);
    void set_internal_handler(internal_handler which, CmiHandlerEx hx, void* user) {
        _internal[static_cast<std::uint32_t>(which)] = handler_entry{nullptr, hx, user};
    }
    void number_handler(int n, CmiHandler h, CmiHandlerEx hx, void* user);
    CmiHandler handler_function(int n) const noexcept;

    // ---- sends ---------------------------------------------------------------------
    enum class ownership { copy, take, borrow };  // Sync, AndFree, Async
    /// Sends one message to `dest`. Returns the user's handle for borrow (0 when the send
    /// already finished), else nullptr.
    CmiCommHandle send(int dest, int size, void* msg, ownership own, const char* caller);
    /// A send to several PEs sharing one buffer (list send, multicast, flat broadcast).
    CmiCommHandle send_many(std::span<const int> pes, int size, void* msg, ownership own,
                            const char* caller);
    CmiCommHandle broadcast(int size, void* msg, ownership own, bool include_self,
                            const char* caller);
    bool handle_done(CmiCommHandle h, const char* caller);
    void release_handle(CmiCommHandle h, const char* caller);
    bool all_sends_done() const noexcept { return _sends_in_flight == 0; }
    /// Messages this PE sent (one per destination) and received, internal ones included.
    std::uint64_t messages_sent() const noexcept;
    std::uint64_t messages_received() const noexcept;
    /// Coroutine form of a send; completes when the buffer may be reused.
    task<void> send_async(std::uint32_t dest, std::span<const std::byte> msg);
    /// send_async in two halves, for a caller that skips a frame when the send finishes at
    /// once: start_send is nullopt when every handle slot is in use (then send_async), else
    /// the handle (null: finished); finish_send waits for it and releases it.
    std::optional<CmiCommHandle> start_send(std::uint32_t dest, std::span<const std::byte> msg);
    /// The small-message fast path alone (try_send_now's), for a message the coroutine API
    /// composed and checked (its header whole, its flags the API's own, `dest` a PE of the
    /// job): inline, without the checks the API made already (the coroutine API's copying
    /// send cost ~40 % more instructions than CmiAsyncSend, docs/perf.md stop 32).
    /// send_now_taking takes ownership of `msg` (a whole CmiAlloc'd message): true when it
    /// is in the peer's ring or eager slot, so the send is done and `msg` freed; false
    /// leaves it to the caller.
    bool send_now_taking(std::uint32_t dest, void* msg) {
        if (!api_send_now(dest, msg, static_cast<std::uint32_t>(alloc::msg_size(msg)),
                          _medium_boundary))
            return false;
        alloc::msg_free(msg);
        return true;
    }
    /// The same from a caller's buffer (a whole message of `size` bytes, at most the small
    /// boundary), copied into the ring or slot: true when it went.
    bool send_now_borrowing(std::uint32_t dest, const void* msg, std::uint32_t size) {
        return api_send_now(dest, msg, size, _small_boundary);
    }
    task<void> finish_send(CmiCommHandle h, std::uint32_t dest);
    task<void> broadcast_async(std::span<const std::byte> msg, bool include_self);
    /// A message the coroutine API sends for itself (ownership taken): under
    /// ON_PEER_LOST=report a dead destination drops it instead of stopping the job.
    void send_for_api(std::uint32_t dest, void* msg);
    /// One wait until a handle slot frees or a PE is lost; the caller looks again.
    task<void> slot_or_loss();

    // ---- lost peers (ON_PEER_LOST) ------------------------------------------------------
    /// ON_PEER_LOST=report: a dead PE is reported to the coroutine API (the notice message,
    /// internal_handler::peer_lost_notice, queued behind what it sent) and the job goes on.
    bool report_lost_peers() const noexcept { return _report_lost; }
    bool is_lost(std::uint32_t pe) const noexcept {
        return !_lost_order.empty() && pe < _lost.size() && _lost[pe];  // the usual: none lost
    }
    /// The first PE this PE lost (report mode), if any.
    std::optional<std::uint32_t> first_lost() const noexcept { return _first_lost; }
    /// PEs lost so far; a lost PE's index in that order (a waiter that started after it was
    /// known does not wait for it).
    std::uint32_t lost_count() const noexcept {
        return static_cast<std::uint32_t>(_lost_order.size());
    }
    std::uint32_t loss_index(std::uint32_t pe) const noexcept {
        for (std::uint32_t i = 0; i < _lost_order.size(); ++i)
            if (_lost_order[i] == pe) return i;
        return lost_count();
    }
    /// ON_PEER_LOST=report: `pe` is gone (its connection failed, a transfer found its
    /// process gone); fail what needs it, queue the notice. Once per PE.
    void lose_peer(std::uint32_t pe, const std::string& why);

    // ---- groups ----------------------------------------------------------------------
    CmiGroup establish_group(int npes, const int* pes);
    const std::vector<int>& group(CmiGroup g, const char* caller) const;

    // ---- scheduling --------------------------------------------------------------------
    int schedule(int max_msgs, bool poll_only);
    void exit_scheduler() noexcept { _exit_requested = true; }
    /// While held, schedule() keeps polling but calls no handler: coverse::run holds
    /// deliveries until its entry coroutine has started (its first statements register the
    /// streams), as ConverseInit calls the start function before its scheduler loop.
    void hold_deliveries(bool held) noexcept { _deliveries_held = held; }
    /// True while the outermost handler call runs (not one nested in another handler through
    /// CmiDeliverMsgs or CmiDeliverSpecificMsg): a coroutine stream may then resume the task it
    /// hands the message to, inline, as that handler would run.
    bool resume_inline_ok() const noexcept { return _sched->delivery_depth() == 1; }
    bool enqueue(void* msg, int strategy, int priobits, const void* prio);
    std::size_t queue_length() const noexcept { return _sched_queue.size(); }
    int deliver_network(int max_msgs);
    void deliver_specific(int handler);
    void* get_non_local();
    void handle_message(void* msg);

    // ---- collectives -------------------------------------------------------------------
    task<void> barrier(bool zero_only);
    task<void> tree_barrier();
    void reduce(void* msg, int size, CmiReduceMergeFn merge);
    void reduce_struct(void* data, CmiReducePupFn pup, CmiReduceMergeFn merge, CmiHandler dest,
                       CmiReduceDeleteFn del);
    /// CmiSpanTree*: the tree rooted at PE 0.
    static int span_parent(int pe) noexcept {
        return spanning_tree::parent(0, static_cast<std::uint32_t>(pe), 0x7FFF'FFFFu);
    }
    int span_children(int pe, int* out) const noexcept;

    // ---- conditions ----------------------------------------------------------------------
    /// One of `fn` (Charm++ 8's CcdCondFn) and `timed` (older Converse's (arg, now) form).
    int call_on_condition(int cond, CcdCondFn fn, CcdVoidFn timed, void* arg, bool keep);
    void cancel_condition(int cond, int idx, bool keep);
    void raise_condition(int cond);
    void call_after(CcdVoidFn fn, void* arg, double msecs);

    // ---- I/O through the launcher ------------------------------------------------------------
    void print(std::string_view text, bool to_stderr);
    std::optional<std::string> read_line();
    /// Stops the job (the launcher or the spawner stops every PE) saying why; this PE ends
    /// with `status`.
    [[noreturn]] void abort_job(const std::string& text, int status = 1);
    /// The program failed on this PE (its entry task or a spawned task threw): other PEs
    /// may be waiting on it, so it does not wait for them in the exit vote. By default, and
    /// under a spawner (mpirun, srun, the CRM), the job stops as CmiAbort stops it; under
    /// coverse-run with ON_PEER_LOST=report this PE alone leaves with status 1 (its sends in
    /// flight get up to 1 s) and the others see it lost.
    [[noreturn]] void fail_pe(const std::string& text, int status = 1);
    /// The process's exit handler (on_exit): exit() while this PE runs ends it there (see
    /// pe_core.cpp); a non-zero status on a job of several PEs fails it as fail_pe does.
    static void on_process_exit(int status, void*) noexcept;
    /// abort_job from any thread, without running the PE's loop.
    [[noreturn]] void stop_job_now(const std::string& text, int status) noexcept;

    // ---- the hang report (doctor.cpp, docs/doctor.md) ------------------------------------
    const pe_activity& activity() const noexcept { return _activity; }
    /// What the PE waits for, its queues and handles: on the PE thread only.
    void fill_state(net::doctor::pe_state& s);

    // ---- exit ------------------------------------------------------------------------------
    /// Finishes every pending send; under CONNECT=lazy agrees on the exit with every live PE
    /// (exit_vote.cpp); runs the disconnect handshake with each connected peer, closes
    /// everything.
    void shutdown();

    /// The rdma layer (nullptr on a single PE or before start-up).
    rdma::layer* rdma_layer() noexcept { return _rdma.get(); }

private:
    struct handler_entry {
        CmiHandler fn = nullptr;
        CmiHandlerEx fnx = nullptr;
        void* user = nullptr;
        batch_handler batch = nullptr;
        /// The function, for naming it in the hang report.
        const void* address() const noexcept {
            return fnx ? reinterpret_cast<const void*>(fnx) : reinterpret_cast<const void*>(fn);
        }
    };
    struct handle_slot {
        std::uint32_t generation = 1;
        std::uint32_t pending = 0;  // frames still in flight
        bool in_use = false;
        bool user_owned = false;  // returned to the user: released by CmiReleaseCommHandle
        bool released = false;
        void* free_when_done = nullptr;  // AndFree buffer (refcounted if shared)
        std::uint64_t trace_id = 0;
        bool traced_first = false;  // the handle's own trace id went to its first frame
        std::uint8_t protocol = 0;  // send_protocol, for the hang report
        std::uint32_t dest = 0;     // its (last) destination, for the hang report
        std::uint32_t held = 0;     // bytes of a copy or taken buffer it holds (SEND_QUEUE_BYTES)
        bool api = false;  // a coroutine API send: a lost destination is its caller's error
    };
    struct reduction {
        bool local_in = false;
        bool is_struct = false;
        void* local = nullptr;
        int local_size = 0;
        std::vector<void*> remote;
        CmiReduceMergeFn merge = nullptr;
        CmiReducePupFn pup = nullptr;
        CmiHandler dest = nullptr;
        CmiReduceDeleteFn del = nullptr;
    };
    struct timed_call {
        double due;
        CcdVoidFn fn;
        void* arg;
        bool operator>(const timed_call& o) const noexcept { return due > o.due; }
    };
    struct condition_cb {
        CcdCondFn fn;
        CcdVoidFn timed;
        void* arg;
        int id;
    };

    void consume_flags(int& argc, char** argv);
    void start_doctor();
    void start_trace(const std::string& backend);
    void stop_trace() noexcept;
    void start_networked(const net::launch_info& info);
    /// Where this PE listens: loopback for a job on one host, else by NETWORK_INTERFACE.
    struct data_address {
        std::string ip;
        std::string why;  // "eth0, the interface that reaches the launcher"
        bool multi_host = false;
    };
    data_address choose_data_address(const net::launch_info& info) const;
    task<void> receive_loop();
    void on_frame(net::received r);
    void on_barrier_frame(std::uint32_t from, const net::frame& f);
    // Latency probing (latency.cpp).
    task<void> probe_round();
    void on_latency_frame(std::uint32_t from, const net::frame& f);
    void post_control(std::uint32_t pe, net::frame_type type, std::uint32_t tag,
                      std::vector<std::byte> payload);
    /// The front of the network queue; grid messages (dispatch.cpp) are counted out.
    void* pop_network();
    /// The grid queue (when enabled): a message from another cluster for a border object.
    bool grid_jumps(std::uint32_t from, void* msg, std::uint32_t size) const;
    void send_barrier_message(std::uint32_t to, internal_handler which, std::uint32_t epoch);
    bool take_barrier_message(void* msg, std::uint32_t from);
    // The exit vote (exit_vote.cpp).
    void exit_vote();
    bool take_exit_message(void* msg, std::uint32_t from);
    void vote_step();
    void vote_send(std::uint32_t to, internal_handler which, std::uint32_t wave, bool done,
                   std::uint64_t sent, std::uint64_t received);
    /// Messages to and from live peers, the vote's own left out.
    std::pair<std::uint64_t, std::uint64_t> vote_counts() const;
    // Lazy connections: ++verbose, the launcher's notices (pe_core.cpp).
    void on_peer_ready(std::uint32_t pe) override;
    void on_copies_lost(std::uint32_t pe, int result) override;
    [[noreturn]] void send_failed(std::uint32_t dest, int result);
    void print_path(std::uint32_t pe);
    static task<void> watch_launcher(pe_core* self);
    void on_launcher_notice(std::uint32_t pe, const std::string& text);

    std::uint32_t acquire_slot(const char* caller);
    task<void> wait_for_slot();
    static task<void> timer_task(pe_core* self, double due);
    CmiCommHandle user_handle(std::uint32_t slot) const noexcept;
    std::uint32_t slot_of(CmiCommHandle h, const char* caller) const;
    void slot_sent(std::uint32_t slot);
    void free_slot(std::uint32_t slot);
    void start_frame(std::uint32_t dest, void* buf, std::uint32_t size, std::uint32_t slot,
                     bool broadcast, std::uint32_t root);
    /// The typed completion of one frame (a handle's frame to one destination, or a
    /// broadcast forward holding a reference to the received buffer). Pooled: no
    /// allocation per message once warm.
    struct frame_ticket final : rdma::send_completion {
        pe_core* core = nullptr;
        std::uint32_t slot = 0;  // the send handle whose frame this is (not for forwards)
        std::uint32_t dest = 0;
        std::uint32_t extra = 0;  // the frame's own trace handle (later destinations), 0: none
        void* forward = nullptr;  // a broadcast forward: the buffer it holds a reference to
        void sent(int result) noexcept override;
        void via_eager(bool long_buffer) noexcept override;
    };
    void accept_message(std::uint32_t from, void* msg, std::uint32_t size, bool broadcast,
                        std::uint32_t root);
    [[gnu::noinline]] void accept_message_slow(std::uint32_t from, void* msg, std::uint32_t size,
                                               bool broadcast, std::uint32_t root);
    frame_ticket* new_ticket(std::uint32_t dest);
    void frame_done(frame_ticket& t, int result);
    void transmit(std::uint32_t dest, void* buf, std::uint32_t size, bool broadcast,
                  std::uint32_t root, frame_ticket* t);
    std::uint32_t wait_for_sync_send(std::uint32_t slot);
    // ---- rdma::upcalls ------------------------------------------------------------------
    void on_message(std::uint32_t from, void* msg, std::uint32_t size, bool broadcast,
                    std::uint32_t root) override {
        accept_message(from, msg, size, broadcast, root);
    }
    void on_lost_message(std::uint32_t from, std::uint64_t, const std::string& text) override {
        if (_report_lost)
            lose_peer(from, text);
        else
            peer_lost(text);
    }
    [[noreturn]] void on_fatal(const std::string& text) override { fatal(text); }
    void on_notice(const std::string& text) override { print(text, true); }
    struct open_send {
        void* buf;           // what the frames go out from
        std::uint32_t slot;  // the handle, held until end_send()
        std::uint32_t size;
        bool user;       // an Async send that returns its handle
        bool sync_wait;  // a large Sync send that goes without a copy: wait for get-done
    };
    /// The fast path of send(): true when the message is already in the peer's eager slot or
    /// ring (then nothing else is left to do); false: take the full path.
    /// The header's API flags (stream credit, carried credits) are cleared: a Converse
    /// program's header may hold anything there (a stack message with only its handler
    /// set). Not for sends the API opens through send() (_api_send), whose flags mean what
    /// they say; the API's own fast path is api_send_now.
    bool try_send_now(int dest, int size, void* msg, ownership own);
    // The checks and the copy every fast path shares (try_send_now's, and the API's own
    // messages, see send_now_taking): at most `limit` bytes.
    bool api_send_now(std::uint32_t dest, const void* msg, std::uint32_t size,
                      std::uint32_t limit) noexcept {
        if (!_rdma || dest >= _num_pes || dest == _pe || size > limit || trace::enabled())
            [[unlikely]]
            return false;
        if (!_rdma->try_send_now(dest, static_cast<const std::byte*>(msg), size)) return false;
        ++_send_seq[dest];
        return true;
    }
    void check_message(int size, const void* msg, const char* caller);
    open_send begin_send(int size, void* msg, ownership own, const char* caller);
    void send_to_self(const open_send& o, const char* caller);
    CmiCommHandle end_send(const open_send& o, const char* caller);
    void deliver_local(void* owned_copy, std::uint32_t size);
    void trace_receive(void* msg, std::uint32_t from, std::uint32_t size);
    void trace_send(std::uint64_t id, std::uint32_t dest, std::uint32_t size);
    std::uint32_t trace_frame(std::uint32_t slot, std::uint32_t dest, std::uint32_t size);
    void self_frame_traced(std::uint32_t slot, std::uint32_t size);
    spanning_tree::children_list tree_children(std::uint32_t root,
                                               std::uint32_t of) const noexcept {
        return spanning_tree::children(root, of, _num_pes);
    }
    void* next_message();
    void call_handler(void* msg);
    /// call_handler, or, for a batch handler, that handler with `msg` and the messages for it
    /// queued right behind it (at most `limit` in all); returns how many it delivered.
    std::size_t call_handler_batch(void* msg, std::size_t limit);
    /// Whether `msg`'s handler takes runs of messages (a coroutine stream's): only then is
    /// call_handler_batch worth its call.
    bool has_batch_handler(const void* msg) const noexcept {
        const std::uint32_t n = static_cast<const CmiMsgHeaderBasic*>(msg)->handler;
        return n < _handlers.size() && _handlers[n].batch != nullptr;
    }
    [[gnu::noinline]] void call_handler_slow(void* msg);
    void take_carried_credits(std::uint32_t from, void* msg);
    void run_idle_wait();
    void fire_timers();
    void raise_periodic(double now);
    bool has_periodic() const noexcept;
    void reduce_progress(std::uint32_t seq);
    void reduce_contribution(void* msg);
    reduction& reduction_for(std::uint32_t seq);
    [[noreturn]] void fatal(const std::string& text);
    [[noreturn]] void peer_lost(const std::string& text);
    /// abort_job without a launcher: the connected PEs hear why (an abort frame), briefly.
    void relay_abort(const std::string& text);
    std::string _loss_text;  // "PE 1 lost PE 3: ..." of the first loss that stops the job

    static pe_core* _instance;

    start_options _opts;
    std::uint32_t _pe = 0;
    std::uint32_t _num_pes = 1;
    std::vector<std::uint64_t> _host_ids;  // host identity per PE (node table)
    std::chrono::steady_clock::time_point _t0;

    std::unique_ptr<scheduler> _sched;
    std::unique_ptr<net::backend> _backend;
    std::unique_ptr<net::mesh> _mesh;
    std::unique_ptr<rdma::layer> _rdma;
    std::vector<std::unique_ptr<frame_ticket>> _spare_tickets;
    std::unique_ptr<net::launcher_client> _launcher;
    std::unique_ptr<net::startup_peer> _startup;        // PMIx or the CRM instead of _launcher
    std::unique_ptr<trace::session> _trace;             // COVERSE_TRACE=DIR
    std::unique_ptr<trace::flush_poller> _trace_flush;  // hands chunks over when idle
    std::string _backend_why;
    bool _broadcast_tree = true;
    rdma::layer_config _layer_cfg;  // the settings, read once; the layer gets a copy
    std::uint32_t _small_boundary = 2048;
    std::uint32_t _medium_boundary = 16384;
    /// The protocol a message of `size` bytes takes (trace events and the handle table).
    send_protocol protocol_of(std::uint32_t size) const noexcept {
        return size <= _small_boundary    ? send_protocol::inline_send
               : size <= _medium_boundary ? send_protocol::stream
                                          : send_protocol::rendezvous;
    }

    std::vector<handler_entry> _handlers;
    std::map<std::uint32_t, handler_entry> _internal;

    std::vector<handle_slot> _slots;
    std::vector<std::uint32_t> _free_slots;
    std::uint64_t _sends_in_flight = 0;
    /// Bytes of copies and taken buffers that sends still hold, and SEND_QUEUE_BYTES: past it
    /// a new send waits (nested progress) until earlier ones have gone.
    std::uint64_t _held_bytes = 0;
    std::uint64_t _held_limit = 4u << 20;
    std::uint64_t _send_queue_waits = 0;
    wait_list _slot_waiters;
    wait_list _send_waiters;  // woken whenever a send completes
    std::vector<std::uint64_t> _send_seq;
    std::vector<std::uint64_t> _recv_seq;
    std::uint64_t _recv_ids = 0;
    std::uint64_t _forward_ids = 0;
    std::uint32_t _extra_trace_ids = 0;
    std::vector<std::uint64_t> _running_receives;  // receive handles whose handler runs

    std::deque<void*> _net_queue;
    std::size_t _grid_ahead = 0;  // messages at _net_queue's front that jumped it (grid queue)
    latency_map _latency;
    grid_queue _grid;
    struct probe_state {
        std::uint32_t round = 0;
        bool own_done = false;                // our pings of this round are done
        std::vector<std::uint32_t> own;       // our latency vector (µs, medians)
        std::vector<std::uint32_t> own_min;   // the smallest sample of each peer (µs)
        std::vector<std::uint32_t> minimums;  // PE 0: num_pes x num_pes, what clusters use
        std::uint32_t minimums_in = 0;        // PE 0: minimum vectors in (its own counts)
        std::uint64_t waiting_pong = 0;       // the stamp of the ping in flight
        std::uint32_t pong_from = 0;
        bool pong_in = false;
        bool request_pending = false;  // PE 0 asked before our pings were done
        std::uint32_t replies = 0;     // PE 0: vectors in (its own counts)
        bool table_in = false, map_in = false;
    } _probe;
    wait_list _probe_waiters;
    priority_queue_cqs _sched_queue;
    bool _exit_requested = false;
    bool _deliveries_held = false;
    bool _idle = false;
    pid_t _pid = ::getpid();               // a forked child's copy of the PE is told apart by it
    pthread_t _thread = ::pthread_self();  // the PE's thread (exit() from another one)
    // The start of every /dev/shm name of this job ("coverse-KEY-"), set before the PE runs
    // and never changed: stop_job_now removes them from another thread by it alone.
    std::string _shm_prefix;
    bool _shutting_down = false;  // shutdown() began

    std::uint32_t _barrier_epoch = 0;
    std::uint32_t _zero_epoch = 0;
    std::map<std::uint32_t, std::uint32_t> _barrier_arrivals;  // epoch -> count (PE 0)
    std::uint32_t _barrier_released = 0;                       // highest released epoch
    std::map<std::uint32_t, std::uint32_t> _tree_arrivals;     // epoch -> children arrived
    std::map<std::uint32_t, std::uint32_t> _tree_arrived;      // epoch -> bit i: child i did
    wait_list _barrier_waiters;

    std::map<std::uint32_t, reduction> _reductions;
    std::uint32_t _reduce_seq = 0;

    std::vector<std::vector<condition_cb>> _conditions;
    std::vector<std::vector<condition_cb>> _conditions_keep;
    int _condition_ids = 0;
    mutable int _periodic_known = -1;  // has_periodic(): -1 ask again, 0 no, 1 yes
    std::vector<timed_call> _timed;    // min-heap on due
    double _armed_due = -1;            // the timed callback a timer task wakes the loop for
    double _periodic_due = 0;
    double _periodic_next[CcdPERIODIC_LAST - CcdPERIODIC_10ms] = {};  // CcdPERIODIC_10ms..1day
    // When the PE went idle (CcdPROCESSOR_STILL_IDLE, LONG_IDLE); -1 busy, -2 idle since a
    // time not read (no idle callback was registered then).
    double _idle_since = -1;
    bool _long_idle_raised = false;

    std::vector<std::vector<int>> _groups;

    // The handler a spawned task's failure went to before this PE's (restored at the end).
    spawn_failure_handler _previous_spawn_failure;

    bool _receiving = false;
    bool _lazy = false;         // CONNECT=lazy
    bool _report_lost = false;  // ON_PEER_LOST=report
    std::vector<bool> _lost;    // by PE, report mode
    std::optional<std::uint32_t> _first_lost;
    std::vector<std::uint32_t> _lost_order;
    /// The exit vote of this PE (exit_vote.cpp): waves of counts up the tree of the live
    /// PEs and verdicts down, until two waves in a row find nothing in flight.
    struct exit_vote_state {
        struct report {
            std::uint32_t from, wave, lost, hash;
            std::uint64_t sent, received;
        };
        bool active = false;  // this PE is in ConverseExit, its own sends done
        bool done = false;
        bool reported = false;  // our report of `wave` went up (the root: it decided)
        std::uint32_t wave = 1;
        std::uint32_t lost = 0xFFFF'FFFFu, hash = 0;  // the view: PEs lost, a hash of which
        int parent = -1;                              // in the view's tree; -1: the root
        std::vector<std::uint32_t> children;
        std::optional<std::pair<std::uint64_t, std::uint64_t>> previous;  // root: last wave
        std::vector<report> reports;  // the children's, of any view (may come before we vote)
    } _vote;
    std::vector<std::uint64_t> _vote_out, _vote_in;  // vote messages by peer
    bool _api_send = false;  // start_send is opening the handle (handle_slot::api)
    bool _shut_down = false;
    pe_activity _activity;               // hot-path counters for the hang report
    std::unique_ptr<pe_doctor> _doctor;  // its responder thread, under coverse-run
    machine _machine{*this};
};

}  // namespace coverse::detail
