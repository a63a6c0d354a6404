// The coroutine-native API: one `machine` per process (one PE), with awaitable sends that
// take ownership of a message (no copy), bounded per-handler message streams with
// cancellable receives and timeouts, typed collectives on the spanning tree, a task scope
// the job waits for, and `coverse::run`, which starts the PE and runs an entry task on its
// scheduler. Legacy Converse handlers (converse.h) and coroutines share that scheduler.
// docs/coroutines.md is the tutorial.
#pragma once

#include <converse.h>

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include <coverse/detail/message_queue.hpp>
#include <coverse/runtime/detail/waiter.hpp>
#include <coverse/runtime/event.hpp>
#include <coverse/runtime/scheduler.hpp>
#include <coverse/runtime/scope.hpp>
#include <coverse/runtime/semaphore.hpp>
#include <coverse/runtime/task.hpp>
#include <coverse/runtime/timer.hpp>
#include <coverse/runtime/when.hpp>

namespace coverse {

namespace detail {
class pe_core;
struct stream_access;  // defined by tests that look into a stream's queue
}  // namespace detail

/// A PE this operation needs has died (its process ended, its connection was reset or
/// closed outside the disconnect handshake). Thrown only under ON_PEER_LOST=report; by
/// default a dead PE stops the job, naming it. See docs/coroutines.md, "When a PE dies".
class peer_lost : public std::runtime_error {
public:
    explicit peer_lost(std::uint32_t pe, const std::string& during = {});
    /// The PE that was lost.
    std::uint32_t pe() const noexcept { return _pe; }

private:
    std::uint32_t _pe;
};

/// What an operation gave, or the PE whose loss ended it: catch_lost's result.
template <class T>
using or_lost = std::variant<std::conditional_t<std::is_void_v<T>, std::monostate, T>, peer_lost>;

/// Runs `t` and returns its result, or the peer_lost it threw, as a value (other
/// exceptions pass through): `if (auto* e = std::get_if<peer_lost>(&r)) ... e->pe()`.
template <class T>
task<or_lost<T>> catch_lost(task<T> t) {
    try {
        if constexpr (std::is_void_v<T>) {
            co_await std::move(t);
            co_return or_lost<T>{std::monostate{}};
        } else {
            co_return or_lost<T>{std::in_place_index<0>, co_await std::move(t)};
        }
    } catch (const peer_lost& e) {
        co_return or_lost<T>{std::in_place_index<1>, e};
    }
}

/// A type that travels as its bytes: sends, typed receives and collectives take these.
template <class T>
concept wire_value = std::is_trivially_copyable_v<T> && !std::is_pointer_v<T>;

/// A received (or to-be-sent) Converse message: owns the CmiAlloc'd buffer (header
/// included) and frees it.
class message {
public:
    message() = default;
    /// Takes ownership of a CmiAlloc'd message.
    explicit message(void* msg) noexcept : _msg(msg) {}
    message(message&& o) noexcept : _msg(o.release()) {}
    message& operator=(message&& o) noexcept {
        if (this != &o) {
            if (_msg) free_message(_msg);
            _msg = o.release();
        }
        return *this;
    }
    ~message() {
        if (_msg) free_message(_msg);  // inline: a moved-from message costs a test
    }

    /// A message for `handler` with `payload_size` bytes of payload left uninitialised, to
    /// be filled in place (payload()) and sent without a copy.
    static message allocate(int handler, std::size_t payload_size);

    explicit operator bool() const noexcept { return _msg != nullptr; }
    /// The whole message, header first.
    std::span<std::byte> bytes() const noexcept;
    /// The user data after CmiMsgHeaderSizeBytes.
    std::span<std::byte> payload() const noexcept;
    int handler() const noexcept { return CmiGetHandler(_msg); }
    void set_handler(int h) noexcept { CmiSetHandler(_msg, h); }
    void* get() const noexcept { return _msg; }
    /// Gives up ownership (the caller must CmiFree it).
    void* release() noexcept {
        void* m = _msg;
        _msg = nullptr;
        return m;
    }

    /// The payload as an array of T, in place (no copy). Throws std::length_error when the
    /// payload is not a whole number of T.
    template <wire_value T>
    std::span<T> as_span() const {
        const auto p = payload();
        if (p.size() % sizeof(T) != 0) size_mismatch(sizeof(T), true);
        // Message memory is 16-byte aligned and the header is 16 bytes: the payload is too.
        static_assert(alignof(T) <= 16,
                      "coverse::message::as_span: T needs over 16-byte alignment");
        return {reinterpret_cast<T*>(p.data()), p.size() / sizeof(T)};
    }
    /// The payload as one T (a copy). Throws std::length_error when its size is not sizeof(T).
    template <wire_value T>
    T as() const {
        const auto p = payload();
        if (p.size() != sizeof(T)) size_mismatch(sizeof(T), false);
        T v;
        std::memcpy(&v, p.data(), sizeof v);
        return v;
    }

private:
    [[noreturn]] void size_mismatch(std::size_t want, bool array) const;
    static void free_message(void* msg) noexcept;
    void* _msg = nullptr;
};

/// Builds a message for `handler` holding a copy of `payload`.
message make_message(int handler, std::span<const std::byte> payload);
/// Builds a message for `handler` holding a copy of `data` (an array of T).
template <wire_value T>
message make_message(int handler, std::span<const T> data) {
    return make_message(handler, std::as_bytes(data));
}

/// A region of a PE's memory that other PEs may read (machine::get) and write
/// (machine::put): what machine::expose returns, trivially copyable so it can be sent to
/// them (send_value, broadcast, allgather). It names one registration per provider the
/// owner has, so the same descriptor serves peers on this host (cma) and over TCP or verbs.
struct remote_region {
    static constexpr unsigned max_providers = 3;  // cma, tcp, verbs
    std::uint32_t pe = 0;                         // the owner
    std::uint32_t providers = 0;                  // bit k: keys[k] holds provider kind k + 1
    std::uint64_t address = 0;
    std::uint64_t length = 0;
    std::uint64_t keys[max_providers] = {};

    /// `length` bytes from `offset`; throws std::out_of_range past the region's end.
    remote_region slice(std::uint64_t offset, std::uint64_t length) const;
};

/// The owner's side of an exposed region: holds its registrations (through the
/// registration cache: memory exposed again is not registered again) and releases them
/// exactly once, when it is destroyed. Keep it alive while peers may reach the memory.
class exposed_region {
public:
    exposed_region() = default;
    exposed_region(exposed_region&&) noexcept;
    exposed_region& operator=(exposed_region&&) noexcept;
    ~exposed_region();

    /// What to send to the PEs that will get or put.
    const remote_region& descriptor() const noexcept { return _desc; }
    std::span<std::byte> memory() const noexcept { return _memory; }

private:
    friend class machine;
    struct holder;
    remote_region _desc;
    std::span<std::byte> _memory;
    std::unique_ptr<holder> _holder;
};

class machine;

/// Messages for one handler, delivered in arrival order to whoever awaits `next()`.
/// Bounded: a stream of capacity C lets each sending PE have at most C of its coroutine
/// sends (machine::send) here that no `next()` took yet; the next send waits for a credit,
/// which the receiving PE returns as its tasks take messages. Converse-facade sends and
/// broadcasts to a stream's handler are not counted.
class message_stream {
public:
    /// The awaiter of one receive. Waiters are served in order; a message is handed to
    /// exactly one of them. Cancelled (its task's stop token, a timeout) before it resumed,
    /// a receive gives its message back to the front of the stream: none is half-taken.
    /// Under ON_PEER_LOST=report, a receive that was waiting when this PE learnt of a PE's
    /// loss throws peer_lost (messages that PE sent before it died and that arrived are
    /// handed out first); one that starts later waits for the other PEs' messages.
    class receive_awaiter : public detail::cancellable_wait<receive_awaiter> {
    public:
        explicit receive_awaiter(message_stream& s) noexcept : _s(s) {}
        ~receive_awaiter() {
            if (st == state::waiting || _msg) [[unlikely]]
                leave();
        }
        bool try_now() noexcept {
            if (_s._queue.empty() || !_s._waiters.empty()) return false;  // FIFO among receivers
            _msg = _s._queue.front();
            _s._queue.pop_front();
            return true;
        }
        void enqueue() noexcept;
        void dequeue() noexcept { _s._waiters.remove(this); }
        template <class P>
        bool await_suspend(std::coroutine_handle<P> h) {
            if constexpr (detail::has_stop_v<P>) _stop = h.promise().stop();
            return cancellable_wait::await_suspend(h);
        }
        message await_resume() {
            void* m = _msg;
            if (!m || (_stop && _stop->stop_requested())) [[unlikely]]
                return resume_without_message();
            _msg = nullptr;
            if (_reserved) [[unlikely]] {  // taken for good: its room in the queue goes
                _reserved = false;
                _s._queue.unreserve_one();
            }
            _s.taken(m);
            return message(m);
        }

    private:
        [[noreturn]] message resume_without_message();
        void leave() noexcept;
        friend class message_stream;
        // Handed its message by the dispatch loop's handler call: resumes its task now.
        void resume_now() noexcept {
            st = state::woken;
            _stop = nullptr;  // nothing can stop it between here and await_resume
            handle.resume();
        }
        message_stream& _s;
        void* _msg = nullptr;
        // _msg was handed over with a deferred wake-up: the queue keeps a slot for it to
        // come back to (message_queue::reserve_one), so a give-back never allocates.
        bool _reserved = false;
        const std::stop_token* _stop = nullptr;
        // Set by enqueue(), read only by a receive that waited.
        std::uint32_t _lost;    // woken by the loss of this PE (no_pe: not)
        std::uint32_t _losses;  // PEs known lost when it began to wait
    };

    message_stream() = default;
    message_stream(const message_stream&) = delete;
    message_stream& operator=(const message_stream&) = delete;
    ~message_stream();

    /// `co_await stream.receive()`: the next message, without a task frame.
    receive_awaiter receive() noexcept { return receive_awaiter{*this}; }
    /// The next message for the handler (suspends until one arrives). Throws
    /// cancelled_error when the task's stop token fires first (no message is taken then).
    task<message> next();
    /// The next message's payload as one T; throws std::length_error (the message is
    /// dropped) when its size is not sizeof(T).
    template <wire_value T>
    task<T> next() {
        message m = co_await receive();
        co_return m.as<T>();
    }
    /// The next message, or nullopt when none came within `timeout` (nothing is taken then).
    task<std::optional<message>> next(clock::duration timeout);
    /// A message if one is queued, without waiting.
    std::optional<message> try_next();
    /// Messages that arrived and were not taken by next() yet.
    std::size_t pending() const noexcept { return _queue.size(); }
    int handler() const noexcept { return _handler; }
    /// Credits per sending PE (0: unbounded).
    std::uint32_t capacity() const noexcept { return _capacity; }
    /// Sends this PE may make now to `pe`'s stream of this handler without waiting: the
    /// credits it holds for it (the capacity until one is spent; unbounded_credits for an
    /// unbounded stream).
    std::uint32_t credits_for(std::uint32_t pe) const noexcept;
    /// Credits this PE owes `pe` for this stream: messages of it taken here, not yet
    /// returned (they go back at half the capacity). `pe`'s credits_for(this PE), its
    /// messages on their way or queued here and not yet taken, these, and those on their
    /// way back add up to the capacity (while neither PE is lost).
    std::uint32_t owed_to(std::uint32_t pe) const noexcept;
    static constexpr std::uint32_t unbounded_credits = ~0u;

private:
    friend class machine;
    friend struct detail::stream_access;  // tests: the queue's room and reservations
    void push(void* msg);
    void push(void* const* msgs, std::size_t n);
    void give_back(void* msg, bool reserved) noexcept;
    /// Hands `msg` to the first waiting receive: its task runs now, or (later) it is woken,
    /// the message's room in the queue reserved already.
    void hand_over_now(void* msg) noexcept;
    void hand_over_later(void* msg) noexcept;
    // A message taken by a receive: a credited one (its header's flags say so) owes its
    // sender a credit.
    static constexpr std::uint32_t header_credit_bit = 0x2;  // detail::header_flag_stream_credit
    static constexpr std::uint32_t header_source_shift = 8;  // detail::header_source_shift
    // Inline up to the common case, the credits owed to the sender still below their return
    // point: a receive's path to the task's next send (the 8 B ping-pong beside the facade's).
    void taken(void* msg) {
        auto* h = static_cast<CmiMsgHeaderBasic*>(msg);
        const std::uint32_t flags = h->flags;
        if (!(flags & header_credit_bit)) return;
        const std::uint32_t from = flags >> header_source_shift;
        h->flags = flags & ~(header_credit_bit | (~0u << header_source_shift));
        if (from < _owed.size() && ++_owed[from] < _return_at) return;
        credits_owed(from);
    }
    // The credits owed to `from` reached their return point (or `from` is out of range).
    void credits_owed(std::uint32_t from);
    void lost(std::uint32_t pe, std::uint32_t index);
    static constexpr std::uint32_t no_pe = ~0u;
    machine* _machine = nullptr;
    int _handler = -1;
    std::uint32_t _capacity = 0;
    std::uint32_t _return_at = 0;  // owed credits go back at half the capacity
    detail::message_queue _queue;
    detail::waiter_list _waiters;
    std::vector<std::uint32_t> _owed;  // credits to return, by PE
    // The sender's side: credits this PE holds for the stream of the same handler on each
    // PE, made on the first send there.
    std::vector<std::unique_ptr<semaphore>> _credits;
};

/// What `machine::send(pe, message)` gives: awaiting it sends the message. A small one that
/// fits the peer's ring or eager slot (and has a stream credit, if its stream is bounded)
/// goes within the `co_await` itself, without a coroutine frame; any other runs the send as
/// a task. It converts to `task<void>` for what takes tasks (when_all, spawn, catch_lost, a
/// vector of tasks). Like a task it is lazy: nothing is sent until it is awaited, and
/// dropping it unawaited frees the message unsent.
class [[nodiscard]] send_op {
public:
    send_op(machine& m, std::uint32_t pe, message msg) noexcept
        : _m(&m), _pe(pe), _msg(std::move(msg)) {}
    /// A copying send: `payload` for `handler`, read when the send_op is awaited (keep it
    /// valid until then). A small one goes from the caller's bytes straight into the peer's
    /// ring, with no message allocated.
    send_op(machine& m, std::uint32_t pe, int handler, std::span<const std::byte> payload) noexcept
        : _m(&m), _pe(pe), _handler(handler), _payload(payload), _copying(true) {}
    /// A moved-from send_op sends nothing.
    send_op(send_op&& o) noexcept
        : _m(o._m),
          _pe(o._pe),
          _handler(o._handler),
          _payload(o._payload),
          _copying(std::exchange(o._copying, false)),
          _msg(std::move(o._msg)),
          _slow(std::move(o._slow)) {}
    send_op& operator=(send_op&&) = delete;

    /// Sends now when it can (true); else prepares the task that await_suspend starts.
    /// Throws as the send would (std::out_of_range, std::invalid_argument, peer_lost).
    bool await_ready();  // inline, after machine
    template <class P>
    auto await_suspend(std::coroutine_handle<P> caller) noexcept {
        return task<void>::awaiter{_slow.handle()}.await_suspend(caller);
    }
    void await_resume() {
        if (_slow.valid()) _slow.handle().promise().take();
    }
    /// The same send as a task (started when that task is awaited).
    operator task<void>() &&;

private:
    static task<void> run(send_op op);
    // A copying send after its frameless attempt: the checks that throw, the stream credit
    // to wait for, the copy, the send as a task when it cannot go at once.
    bool send_copy_or_prepare();
    // The send as a task (false), for a message send_at_once could not send at once.
    bool prepare(semaphore* wait);
    machine* _m;
    std::uint32_t _pe;
    int _handler = -1;                    // a copying send's handler
    std::span<const std::byte> _payload;  // a copying send's bytes
    bool _copying = false;                // until await_ready made its message, if it had to
    message _msg;
    task<void> _slow;
};

/// catch_lost for a send: `co_await catch_lost(m.send(pe, std::move(msg)))`.
inline task<or_lost<void>> catch_lost(send_op op) {
    return catch_lost(task<void>(std::move(op)));
}

/// This process's PE. Obtained from `coverse::run` (or `machine::current()` once the
/// runtime is up, also under ConverseInit).
class machine {
public:
    /// Credits per sending PE of a stream unless register_stream says otherwise.
    static constexpr std::uint32_t default_stream_capacity = 64;

    static machine& current();
    machine(const machine&) = delete;
    machine& operator=(const machine&) = delete;

    std::uint32_t pe() const noexcept;
    std::uint32_t num_pes() const noexcept;
    scheduler& sched() noexcept;
    /// Under ON_PEER_LOST=report: whether this PE has learnt that `pe` died (always false
    /// with the default, where a death stops the job).
    bool is_lost(std::uint32_t pe) const noexcept;

    /// A handler called with each message (it owns it). Same order on every PE.
    int register_handler(std::function<void(message)> fn);
    /// A handler whose messages are queued for `co_await stream.next()`. Register the same
    /// streams, with the same capacities, in the same order on every PE.
    message_stream& register_stream(std::uint32_t capacity = default_stream_capacity);

    /// Sends `msg` (handler already set) to `pe`, taking ownership: no copy is made, and
    /// the await completes once the message has gone (in the kernel or the peer's ring; for
    /// a large one, when the receiver's get finished). To a bounded stream it first waits
    /// for a credit (cancellable: nothing is sent then). Throws std::out_of_range for a PE
    /// outside the job. Returns a send_op (a task<void> where one is wanted).
    send_op send(std::uint32_t pe, message msg) noexcept {
        return send_op(*this, pe, std::move(msg));
    }
    /// Same, setting the handler first.
    send_op send(std::uint32_t pe, int handler, message msg) noexcept {
        if (msg) msg.set_handler(handler);
        return send_op(*this, pe, std::move(msg));
    }
    /// Sends a whole message (header included, handler set) from the caller's buffer.
    /// Completes when `msg` may be reused. (To a bounded stream it goes as a copy.)
    task<void> send(std::uint32_t pe, std::span<const std::byte> msg);
    /// Sends a copy of `payload` to `handler` on `pe`; the bytes are read when the send is
    /// awaited and may be reused once it completes. A small payload that fits the peer's
    /// ring or eager slot is copied straight there, with no message allocated.
    send_op send(std::uint32_t pe, int handler, std::span<const std::byte> payload) noexcept {
        return send_op(*this, pe, handler, payload);
    }
    /// Sends a copy of an array of T (trivially copyable) to `handler` on `pe`, as above.
    template <wire_value T>
    requires(!std::same_as<std::remove_const_t<T>, std::byte>) send_op
        send(std::uint32_t pe, int handler, std::span<T> data)
    noexcept { return send_op(*this, pe, handler, std::as_bytes(data)); }
    /// Sends one value of T to `handler` on `pe` (`stream.next<T>()` receives it): a task
    /// (for when_all and the like as it is) around a copying send of the value.
    template <wire_value T>
    task<void> send_value(std::uint32_t pe, int handler, T value) {
        co_await send(pe, handler, std::as_bytes(std::span<const T>(&value, 1)));
    }
    /// To every PE (spanning tree or flat per BROADCAST_TREE); include_self adds a local copy.
    /// `msg` (a whole message, header first) is only read. It goes from a copy unless its
    /// header already names this PE as the root (`root_plus_one == pe() + 1`, which
    /// make_message does not set) and holds none of the API's flags; only such a header
    /// lets a large one go straight from `msg` (then, over verbs, `msg` must be writable
    /// memory: it is registered for RDMA).
    task<void> broadcast(std::span<const std::byte> msg, bool include_self = false);
    /// Completes once every PE reached the barrier (a collective: numbered, cancellable, and
    /// failed by a lost PE like the typed ones below).
    task<void> barrier();
    /// Sum-reduces `value` over all PEs; every PE gets the total.
    task<std::int64_t> reduce_sum(std::int64_t value);

    // ---- typed collectives on the spanning tree ------------------------------------------
    // Every PE calls the same collectives in the same order (they are numbered). `op`
    // combines two values and must be associative and commutative (the tree's order of
    // combining is not the PEs' order). T travels as its bytes (trivially copyable).
    //
    // Cancellation (a stop token, with_timeout): a cancelled collective throws
    // cancelled_error and is abandoned on this PE. Its number stays used, so the next
    // collective never takes its messages (those that arrive late are dropped); the other
    // PEs' part of it finishes only if they did not need this PE's, so cancel it on every PE
    // (the same timeout everywhere) and go on with the next one.
    // ON_PEER_LOST=report: once a PE is lost, every collective waiting then, and every later
    // one, throws peer_lost naming it (the tree needs every PE).

    /// Combines every PE's `value` with `op`; the root gets the result, the others nullopt.
    template <wire_value T, class Op>
    task<std::optional<T>> reduce(T value, Op op, std::uint32_t root = 0) {
        const std::uint32_t seq = next_collective();
        auto total =
            co_await reduce_bytes(bytes_of(value), &merge_values<T, Op>, &op, root, {seq, 0});
        if (total.empty()) co_return std::nullopt;
        co_return value_from<T>(total);
    }
    /// reduce, with the result on every PE.
    template <wire_value T, class Op>
    task<T> allreduce(T value, Op op) {
        const std::uint32_t seq = next_collective();
        auto total = co_await reduce_bytes(bytes_of(value), &merge_values<T, Op>, &op, 0, {seq, 0});
        total = co_await broadcast_bytes(std::move(total), 0, {seq, 1});
        co_return value_from<T>(total);
    }
    /// The root's `value` on every PE (the others' `value` is ignored).
    template <wire_value T>
    requires(!std::is_convertible_v<T, std::span<const std::byte>>) task<T> broadcast(
        T value, std::uint32_t root) {
        auto v = co_await broadcast_bytes(bytes_of(value), root, {next_collective(), 0});
        co_return value_from<T>(v);
    }
    /// Every PE's `value`, in PE order, at the root (empty elsewhere).
    template <wire_value T>
    task<std::vector<T>> gather(T value, std::uint32_t root = 0) {
        auto all = co_await gather_bytes(bytes_of(value), root, {next_collective(), 0});
        co_return values_from<T>(all);
    }
    /// Every PE's `value`, in PE order, on every PE.
    template <wire_value T>
    task<std::vector<T>> allgather(T value) {
        const std::uint32_t seq = next_collective();
        auto all = co_await gather_bytes(bytes_of(value), 0, {seq, 0});
        all = co_await broadcast_bytes(std::move(all), 0, {seq, 1});
        co_return values_from<T>(all);
    }

    // ---- one-sided memory ---------------------------------------------------------------------
    // Over the provider that reaches each peer (cma on this host, tcp or verbs otherwise;
    // RDMA_PROVIDER forces one), the same code everywhere. A transfer that fails (it does not
    // know the region) throws std::runtime_error naming the PE and why; the PE's death is
    // peer_lost under ON_PEER_LOST=report.
    // Cancellation: a stop requested before a transfer is posted throws cancelled_error and
    // nothing is read or written; once posted, the operation waits for the provider's final
    // completion (the buffers stay in use until then) and reports what happened.

    /// Registers `memory` with every provider of this PE; the result's descriptor() may be
    /// sent to other PEs.
    task<exposed_region> expose(std::span<std::byte> memory);
    /// Reads `remote` (owned by `pe`) into `local` (local.size() bytes from its start).
    task<void> get(std::uint32_t pe, remote_region remote, std::span<std::byte> local);
    /// Writes `local` into `remote` (owned by `pe`); completes once the bytes are in that
    /// PE's memory.
    task<void> put(std::uint32_t pe, std::span<const std::byte> local, remote_region remote);
    /// put, then `note` (its handler set) to `pe`: when the note arrives there, the data is
    /// in place. Completes when the note has gone.
    task<void> put_notify(std::uint32_t pe, std::span<const std::byte> local, remote_region remote,
                          message note);

    // ---- structured concurrency ------------------------------------------------------------
    /// The machine's task scope: tasks started here run beside the entry task, and
    /// coverse::run waits for all of them before it shuts the PE down. An exception that
    /// escapes one is reported with the task's name and fails the PE: the job stops (under
    /// coverse-run with ON_PEER_LOST=report, this PE leaves it; docs/coroutines.md).
    task_scope& scope() noexcept { return _scope; }
    void spawn(task<void> t, std::string name) { _scope.spawn(std::move(t), std::move(name)); }

    detail::pe_core& core() noexcept { return *_core; }

    /// How this PE's copying sends (`send(pe, handler, span)`, `send_value`) went: composed
    /// on the stack and copied straight into the peer's ring or eager slot, or copied into
    /// an allocated message first (over 512 bytes, to this PE itself, over a connection, a
    /// stream credit to wait for, or a ring that could not take it then).
    struct send_counters {
        std::uint64_t copied_frameless = 0;
        std::uint64_t copied_allocated = 0;
        /// Stream credits this PE returned: in the header of a copying send to that PE
        /// (riding), and by a credit message of their own.
        std::uint64_t credits_riding = 0;
        std::uint64_t credit_messages = 0;
    };
    const send_counters& send_stats() const noexcept { return _send_stats; }

private:
    friend class detail::pe_core;
    friend class message_stream;
    friend class send_op;
    explicit machine(detail::pe_core& c);
    ~machine();
    /// One collective's part: its number and, for two-step ones (allreduce: a reduce, then a
    /// broadcast), the step.
    struct collective_id {
        std::uint32_t seq;
        std::uint32_t step;
    };
    std::uint32_t next_collective() noexcept { return _collective_seq++; }
    using merge_fn = void (*)(std::vector<std::byte>& acc, std::span<const std::byte> in,
                              const void* op);
    template <class T>
    static std::vector<std::byte> bytes_of(const T& v) {
        std::vector<std::byte> b(sizeof(T));
        std::memcpy(b.data(), &v, sizeof(T));
        return b;
    }
    template <class T>
    static T value_from(const std::vector<std::byte>& b) {
        if (b.size() != sizeof(T)) collective_size_mismatch(b.size(), sizeof(T));
        T v;
        std::memcpy(&v, b.data(), sizeof(T));
        return v;
    }
    template <class T>
    static std::vector<T> values_from(const std::vector<std::byte>& b) {
        if (b.size() % sizeof(T) != 0) collective_size_mismatch(b.size(), sizeof(T));
        std::vector<T> out(b.size() / sizeof(T));
        if (!out.empty()) std::memcpy(out.data(), b.data(), b.size());
        return out;
    }
    template <class T, class Op>
    static void merge_values(std::vector<std::byte>& acc, std::span<const std::byte> in,
                             const void* op) {
        if (in.size() != sizeof(T) || acc.size() != sizeof(T))
            collective_size_mismatch(in.size(), sizeof(T));
        T a, b;
        std::memcpy(&a, acc.data(), sizeof(T));
        std::memcpy(&b, in.data(), sizeof(T));
        const T r = (*static_cast<const Op*>(op))(a, b);
        std::memcpy(acc.data(), &r, sizeof(T));
    }
    [[noreturn]] static void collective_size_mismatch(std::size_t got, std::size_t want);
    task<std::vector<std::byte>> reduce_bytes(std::vector<std::byte> mine, merge_fn merge,
                                              const void* op, std::uint32_t root, collective_id id);
    task<std::vector<std::byte>> broadcast_bytes(std::vector<std::byte> data, std::uint32_t root,
                                                 collective_id id);
    task<std::vector<std::byte>> gather_bytes(std::vector<std::byte> mine, std::uint32_t root,
                                              collective_id id);
    task<message> collective_message(collective_id id, std::uint32_t from);
    task<void> send_collective(std::uint32_t to, collective_id id, std::span<const std::byte> data);
    /// A collective that ended without finishing (cancelled, a PE lost): its messages that
    /// wait here are dropped, and so are those that arrive later.
    void abandon_collective(std::uint32_t seq);
    /// Sends `bytes` (a whole message) and waits until it went; peer_lost if `pe` is or
    /// becomes lost first.
    task<void> send_bytes(std::uint32_t pe, std::span<const std::byte> bytes);
    /// send_op's halves: the frameless attempt (true: gone; else `wait`: the stream credit
    /// still to wait for, if any), and the rest as a task.
    bool send_at_once(std::uint32_t pe, message& msg, semaphore*& wait);
    /// The same for a copying send: false leaves the copy made in `msg`.
    bool send_copy_at_once(std::uint32_t pe, int handler, std::span<const std::byte> payload,
                           message& msg, semaphore*& wait);
    /// A copying send's frameless attempt alone, all or nothing: true when it went; false
    /// leaves no credit taken and nothing carried (send_copy_at_once then does the rest).
    bool send_copy_now(std::uint32_t pe, int handler, std::span<const std::byte> payload);
    task<void> send_rest(std::uint32_t pe, message msg, semaphore* wait);
    void mark_credited(message& msg) const noexcept;
    /// The header flags of a send that took a stream credit: the flag and this PE.
    std::uint32_t credited_flags() const noexcept;
    /// The credits this PE holds for `handler`'s stream on `pe`; null for an unbounded
    /// stream or a handler that is no stream. Inline: every copying send looks.
    semaphore* bounded_credits(int handler, std::uint32_t pe) {
        if (handler == _last_credits.handler && pe == _last_credits.pe) [[likely]]
            return _last_credits.credits;
        return bounded_credits_lookup(handler, pe);
    }
    semaphore* bounded_credits_lookup(int handler, std::uint32_t pe);
    bool send_small(std::uint32_t pe, message& msg);
    /// Puts the credits this PE owes `pe` into header `h` of a small message (`size` bytes) about
    /// to go to `pe` (it waits for no stream credit; by the full path it may still wait for a
    /// handle slot or for queued sends to drain, as a credit message would).
    /// Returns what it put there (0: nothing), counted as riding until restored.
    std::uint32_t carry_due_credits(std::uint32_t pe, CmiMsgHeaderBasic& h,
                                    std::size_t size) noexcept;
    void carry_due_credits(std::uint32_t pe, message& msg) noexcept;
    void check_not_lost(std::uint32_t pe, const char* what) const;
    void check_pe(std::uint32_t pe, const char* what) const;
    message_stream* stream_for(int handler) noexcept {
        const auto index = static_cast<std::size_t>(handler);  // internal handlers: past the end
        return handler >= 0 && index < _stream_by_handler.size() ? _stream_by_handler[index]
                                                                 : nullptr;
    }
    semaphore& credits(int handler, std::uint32_t pe);
    void return_credits(std::uint32_t to, int handler, std::uint32_t count);
    /// Credits a stream owes `pe` reached its return point (`stream` took them): they go
    /// back with this PE's next small send to `pe`, else by a credit message from a task
    /// spawned now (it runs once the taking task suspends).
    void credits_due(std::uint32_t pe, message_stream* stream);
    /// Due credits for `pe` as a send's header carries them (stream handler << 16 | count),
    /// taken off the due list; 0 when none (or they do not fit the field).
    std::uint32_t take_due_credits(std::uint32_t pe) noexcept;
    /// A send that took them did not go: they are due again (and not counted as riding).
    void restore_due_credits(std::uint32_t pe, std::uint32_t carried);
    /// Sends what is still due, each by a credit message.
    void return_due_credits();
    /// At shutdown: returns what is due, and stops the spawned returns.
    void close_credits();
    /// Credits that arrived in a message's header from `from` (pe_core::accept_message).
    void credits_carried(std::uint32_t from, std::uint32_t carried);
    void credits_arrived(std::uint32_t from, int handler, std::uint32_t count);
    void on_credit(void* msg);
    void on_collective(void* msg);
    void on_peer_lost(void* msg);

    detail::pe_core* _core;
    std::vector<std::unique_ptr<message_stream>> _streams;
    // Streams whose credits owed to a PE reached their return point: (PE, stream).
    std::vector<std::pair<std::uint32_t, message_stream*>> _due_credits;
    // Returns what is due at the loop's next turn, once the task that took them suspended.
    deferred_call _credit_flush;
    bool _closing = false;  // the PE shuts down: close_credits() ran
    // By handler index (handlers are numbered from 0): every send looks its stream up.
    std::vector<message_stream*> _stream_by_handler;
    // The last bounded_credits answer: a task sending to one stream on one PE again and
    // again (a window, a reply) finds its semaphore in two compares. Semaphores live as long
    // as the machine; register_stream forgets it (a handler could become a stream's).
    struct {
        int handler = -1;
        std::uint32_t pe = ~0u;
        semaphore* credits = nullptr;
    } _last_credits;
    std::vector<std::unique_ptr<std::function<void(message)>>> _functions;
    std::uint32_t _collective_seq = 0;
    // Collective messages that arrived, by (sequence << 32 | step << 31 | sending PE).
    std::unordered_map<std::uint64_t, void*> _collective_inbox;
    std::unordered_set<std::uint32_t> _abandoned_collectives;
    event _collective_arrived;
    task_scope _scope{"coverse::machine"};
    send_counters _send_stats;
};

inline bool send_op::await_ready() {
    if (!_copying) {
        semaphore* wait = nullptr;
        return _m->send_at_once(_pe, _msg, wait) || prepare(wait);
    }
    if (_m->send_copy_now(_pe, _handler, _payload)) {
        _copying = false;  // sent: awaiting it again sends nothing (an empty message throws)
        return true;
    }
    return send_copy_or_prepare();
}

/// Starts this PE (launcher, mesh, handlers), runs `entry(machine)` on its scheduler while
/// delivering Converse messages, waits for the tasks of machine::scope(), then shuts down
/// (every send finished, disconnect handshake with every peer) and returns the exit status
/// (0). An exception escaping the entry fails the PE: on a job of several PEs it does not
/// return (the job stops; under ON_PEER_LOST=report this PE exits with status 1), alone it
/// returns 1.
int run(int argc, char** argv, std::function<task<void>(machine&)> entry);

}  // namespace coverse
