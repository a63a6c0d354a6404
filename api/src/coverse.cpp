// The coroutine-native API (coverse.hpp) over the machine core: messages, bounded streams
// and their credits, ownership-taking sends, the machine's task scope and coverse::run.
// The typed collectives are in coro_collectives.cpp.
//
// Stream credits: a coroutine send to a stream of capacity C takes one of C credits that
// the sender holds for that (stream, destination); the message's header carries
// header_flag_stream_credit and the sender's PE. The receiver counts the flagged messages
// its tasks take from each sender and returns them in one stream_credit message once half
// the capacity is owed. A sender out of credits therefore has all C messages unread at the
// receiver, or owed back in a credit message already on its way: it never waits forever.
#include <coverse/coverse.hpp>

#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <coverse/alloc/message.hpp>

#include "pe_core.hpp"

namespace coverse {

namespace detail {
std::unique_ptr<pe_core>& core_slot();
}

using detail::header_of;
using detail::pe_core;

namespace {
constexpr std::uint32_t credit_flag = detail::header_flag_stream_credit;
constexpr std::uint32_t source_shift = detail::header_source_shift;

// The payload of a stream_credit message.
struct credit_return {
    std::int32_t handler;
    std::uint32_t from;   // the PE whose stream the credits are for
    std::uint32_t count;  // messages its tasks took
};

// `n` bytes from `src` to `dst`; 8 to 16 of them without a call to memcpy (two overlapping
// 8-byte loads and stores): a copying send's 8 B payload spent ~24 instructions in the call.
inline void copy_bytes(std::byte* dst, const std::byte* src, std::size_t n) noexcept {
    if (n >= 8 && n <= 16) {
        std::uint64_t head, tail;
        std::memcpy(&head, src, 8);
        std::memcpy(&tail, src + n - 8, 8);
        std::memcpy(dst, &head, 8);
        std::memcpy(dst + n - 8, &tail, 8);
    } else if (n > 0) {
        std::memcpy(dst, src, n);
    }
}
}  // namespace

// ---- peer_lost -------------------------------------------------------------------------------

peer_lost::peer_lost(std::uint32_t pe, const std::string& during)
    : std::runtime_error("coverse: PE " + std::to_string(pe) + " was lost" +
                         (during.empty() ? "" : " (" + during + ")") +
                         "; it died or its connection failed"),
      _pe(pe) {}

// ---- message ---------------------------------------------------------------------------------

void message::free_message(void* msg) noexcept {
    alloc::msg_free(msg);
}

message message::allocate(int handler, std::size_t payload_size) {
    const std::size_t size = CmiMsgHeaderSizeBytes + payload_size;
    if (size > 0x7FFF'FFFFu)
        throw std::length_error("coverse::message::allocate: " + std::to_string(payload_size) +
                                " bytes is over the 2 GiB a message may hold");
    void* m = alloc::msg_alloc(size);
    if (!m) throw std::bad_alloc();
    CmiInitMsgHeader(m, static_cast<int>(size));
    CmiSetHandler(m, handler);
    return message(m);
}

std::span<std::byte> message::bytes() const noexcept {
    if (!_msg) return {};
    return {static_cast<std::byte*>(_msg), alloc::msg_size(_msg)};
}

std::span<std::byte> message::payload() const noexcept {
    auto b = bytes();
    return b.size() > CmiMsgHeaderSizeBytes ? b.subspan(CmiMsgHeaderSizeBytes)
                                            : std::span<std::byte>{};
}

void message::size_mismatch(std::size_t want, bool array) const {
    throw std::length_error("coverse::message: a payload of " + std::to_string(payload().size()) +
                            " bytes for handler " + std::to_string(_msg ? handler() : -1) +
                            " is not " + (array ? "a whole number of " : "one ") +
                            std::to_string(want) + "-byte value" + (array ? "s" : "") +
                            "; sender and receiver disagree on the type");
}

message make_message(int handler, std::span<const std::byte> payload) {
    message m = message::allocate(handler, payload.size());
    if (!payload.empty()) std::memcpy(m.payload().data(), payload.data(), payload.size());
    return m;
}

// ---- message_stream ----------------------------------------------------------------------------

message_stream::~message_stream() {
    _queue.for_each([](void* m) { alloc::msg_free(m); });
}

void message_stream::push(void* msg) {
    if (_waiters.empty()) {
        _queue.push_back(msg);
        return;
    }
    // Called by the outermost handler call (not nested in another handler): the receiving
    // task runs now, as a handler would. Else it runs from the ready queue, after whatever
    // the caller still does (which may stop it: it then gives the message back).
    if (_machine->_core->resume_inline_ok()) [[likely]] {
        hand_over_now(msg);
        return;
    }
    _queue.reserve_one();  // may throw: nothing was handed out yet
    hand_over_later(msg);
}

// The message goes to the first waiting receive, whose task runs now.
void message_stream::hand_over_now(void* msg) noexcept {
    auto* r = static_cast<receive_awaiter*>(_waiters.pop_front());
    r->_msg = msg;
    r->resume_now();
}

// The message goes to the first waiting receive with a wake-up; the room it may come back
// to is reserved in the queue already (give_back).
void message_stream::hand_over_later(void* msg) noexcept {
    auto* r = static_cast<receive_awaiter*>(_waiters.pop_front());
    r->_msg = msg;
    r->_reserved = true;
    r->wake();
}

// Messages that arrived together. With one task waiting (or none), that task gets the first
// and the rest are queued before it is resumed: it takes them without suspending for each.
// With more waiting, each message goes as push() of each in turn would hand it out (which
// task gets which, and in what order they run, stay as they were).
void message_stream::push(void* const* msgs, std::size_t n) {
    const detail::waiter* w = _waiters.front();
    if (!w || w->next) {  // none waits (all are queued), or several do
        for (std::size_t i = 0; i < n; ++i)
            push(msgs[i]);
        return;
    }
    if (_machine->_core->resume_inline_ok()) [[likely]] {
        _queue.push_back(msgs + 1, n - 1);  // the queue is empty while a task waits
        hand_over_now(msgs[0]);
        return;
    }
    _queue.reserve_one();  // before anything is queued: a bad_alloc changes nothing
    try {
        _queue.push_back(msgs + 1, n - 1);
    } catch (...) {
        _queue.unreserve_one();
        throw;
    }
    hand_over_later(msgs[0]);
}

// A receive that will not take its message after all puts it back where it came from, from
// noexcept clean-ups (receive_awaiter::leave) too, so it never allocates. A message handed
// over by a wake-up has its room reserved (push); the room moves with it to the next
// waiting receive. One taken from the queue by a receive that then found itself stopped
// (try_now, then await_resume, with nothing between) goes back to the slot it just left,
// and no receive waits then (try_now takes only when none does).
void message_stream::give_back(void* msg, bool reserved) noexcept {
    if (auto* w = _waiters.pop_front()) {
        auto* r = static_cast<receive_awaiter*>(w);
        r->_msg = msg;
        r->_reserved = reserved;
        w->wake();
        return;
    }
    if (reserved)
        _queue.push_front_reserved(msg);
    else
        _queue.push_front_again(msg);
}

std::uint32_t message_stream::credits_for(std::uint32_t pe) const noexcept {
    if (_capacity == 0) return unbounded_credits;
    if (pe < _credits.size() && _credits[pe])
        return static_cast<std::uint32_t>(_credits[pe]->available());
    return _capacity;
}

std::uint32_t message_stream::owed_to(std::uint32_t pe) const noexcept {
    return pe < _owed.size() ? _owed[pe] : 0;
}

void message_stream::credits_owed(std::uint32_t from) {
    static_assert(header_credit_bit == detail::header_flag_stream_credit);
    static_assert(header_source_shift == detail::header_source_shift);
    // Sized for every PE at registration; a sender PE out of range is a peer's bug.
    if (from >= _owed.size()) [[unlikely]]
        return;
    std::uint32_t& owed = _owed[from];  // counted by taken()
    if (owed >= _capacity) {
        // Every credit of that sender: back at once (it may be waiting for them now).
        _machine->return_credits(from, _handler, owed);
        owed = 0;
    } else if (owed == _return_at) {
        _machine->credits_due(from, this);
    }
}

// Every receive that was waiting when the loss became known (the `index`-th loss) ends with
// peer_lost: a stream has no fixed sender, so each such waiter learns of the loss and
// decides whether to wait again. Waiting means the queue is empty: what the lost PE sent
// before it died was handed out already. Receives that began later knew of it.
void message_stream::lost(std::uint32_t pe, std::uint32_t index) {
    for (detail::waiter* w = _waiters.front(); w != nullptr;) {
        detail::waiter* next = w->next;
        auto* r = static_cast<receive_awaiter*>(w);
        if (r->_losses <= index) {
            _waiters.remove(w);
            r->_lost = pe;
            w->wake();
        }
        w = next;
    }
}

void message_stream::receive_awaiter::enqueue() noexcept {
    _lost = no_pe;
    _losses = _s._machine->core().lost_count();
    _s._waiters.push_back(this);
}

// The receive's frame is destroyed while it waits, or after it was handed a message.
void message_stream::receive_awaiter::leave() noexcept {
    this->leave_if_waiting();
    if (_msg)  // woken, then its task was dropped
        _s.give_back(std::exchange(_msg, nullptr), std::exchange(_reserved, false));
}

// A wait that ended without a message (cancelled, a PE lost), or one stopped after the
// message was handed over but before its task ran again (a timeout, a when_any loser): that
// message goes back first, whatever is thrown (an awaiter awaited again after a cancelled
// wait keeps that wait's state: the message must not stay with it), and the receive is
// cancelled.
message message_stream::receive_awaiter::resume_without_message() {
    if (_msg) _s.give_back(std::exchange(_msg, nullptr), std::exchange(_reserved, false));
    check_cancelled();
    if (_lost != no_pe)
        throw peer_lost(_lost, "waiting for a message of handler " + std::to_string(_s._handler));
    throw cancelled_error{};
}

task<message> message_stream::next() {
    co_return co_await waiting_for(
        {wait_kind::message, no_peer, static_cast<std::uint64_t>(_handler), "message_stream::next"},
        receive());
}

task<std::optional<message>> message_stream::next(clock::duration timeout) {
    co_return co_await with_timeout(next(), timeout);
}

std::optional<message> message_stream::try_next() {
    if (_queue.empty() || !_waiters.empty()) return std::nullopt;
    void* m = _queue.front();
    _queue.pop_front();
    taken(m);
    return message(m);
}

// ---- machine -----------------------------------------------------------------------------------

machine::machine(detail::pe_core& c) : _core(&c) {
    _credit_flush.fn = [](void* self) {
        auto* m = static_cast<machine*>(self);
        if (!m->_closing) m->return_due_credits();
    };
    _credit_flush.context = this;
    _credit_flush.name = "stream credits";
    // Installed with the core, before any peer can send: a PE may get a credit or a
    // collective's message before its own tasks first use them.
    c.set_internal_handler(
        detail::internal_handler::stream_credit,
        [](void* msg, void* self) { static_cast<machine*>(self)->on_credit(msg); }, this);
    c.set_internal_handler(
        detail::internal_handler::coro_collective,
        [](void* msg, void* self) { static_cast<machine*>(self)->on_collective(msg); }, this);
    c.set_internal_handler(
        detail::internal_handler::peer_lost_notice,
        [](void* msg, void* self) { static_cast<machine*>(self)->on_peer_lost(msg); }, this);
}

machine::~machine() {
    for (auto& [key, msg] : _collective_inbox)
        alloc::msg_free(msg);
}

void machine::check_not_lost(std::uint32_t pe, const char* what) const {
    if (_core->is_lost(pe)) [[unlikely]]
        throw peer_lost(pe, what);
}

// ON_PEER_LOST=report: the core queued this behind what the PE sent. Everything waiting on it
// wakes and finds it lost: receives, senders waiting for its stream credits or a handle
// slot, collectives. (Sends and one-sided transfers in flight fail in the core and rdma.)
void machine::on_peer_lost(void* msg) {
    std::uint32_t pe = 0;
    std::memcpy(&pe, static_cast<std::byte*>(msg) + CmiMsgHeaderSizeBytes, sizeof pe);
    alloc::msg_free(msg);
    const std::uint32_t index = _core->loss_index(pe);
    for (auto& s : _streams) {
        s->lost(pe, index);
        if (pe < s->_credits.size() && s->_credits[pe])
            s->_credits[pe]->release(std::size_t{1} << 30);  // senders wake, see it lost
    }
    _collective_arrived.set();
    _collective_arrived.reset();
}

machine& machine::current() {
    return pe_core::get("coverse::machine::current").api();
}

std::uint32_t machine::pe() const noexcept {
    return _core->pe();
}
std::uint32_t machine::num_pes() const noexcept {
    return _core->num_pes();
}
scheduler& machine::sched() noexcept {
    return _core->sched();
}
bool machine::is_lost(std::uint32_t pe) const noexcept {
    return _core->is_lost(pe);
}

void machine::check_pe(std::uint32_t pe, const char* what) const {
    if (pe >= _core->num_pes()) [[unlikely]]
        throw std::out_of_range(std::string("coverse::machine::") + what + ": PE " +
                                std::to_string(pe) + " is not in this job of " +
                                std::to_string(_core->num_pes()) + " PEs (0.." +
                                std::to_string(_core->num_pes() - 1) + ")");
}

int machine::register_handler(std::function<void(message)> fn) {
    _functions.push_back(std::make_unique<std::function<void(message)>>(std::move(fn)));
    return _core->register_handler(
        nullptr,
        [](void* msg, void* user) {
            (*static_cast<std::function<void(message)>*>(user))(message(msg));
        },
        _functions.back().get());
}

message_stream& machine::register_stream(std::uint32_t capacity) {
    _streams.push_back(std::make_unique<message_stream>());
    message_stream* s = _streams.back().get();
    s->_machine = this;
    s->_capacity = capacity;
    s->_return_at = (capacity + 1) / 2;
    if (capacity > 0) s->_owed.assign(num_pes(), 0);
    s->_handler = _core->register_handler(
        nullptr, [](void* msg, void* user) { static_cast<message_stream*>(user)->push(msg); }, s,
        [](void* const* msgs, std::size_t n, void* user) {
            static_cast<message_stream*>(user)->push(msgs, n);
        });
    const auto index = static_cast<std::size_t>(s->_handler);
    if (_stream_by_handler.size() <= index) _stream_by_handler.resize(index + 1, nullptr);
    _stream_by_handler[index] = s;
    _last_credits = {};
    return *s;
}

semaphore* machine::bounded_credits_lookup(int handler, std::uint32_t pe) {
    const message_stream* s = stream_for(handler);
    semaphore* c = s && s->_capacity > 0 ? &credits(handler, pe) : nullptr;
    _last_credits = {handler, pe, c};
    return c;
}

semaphore& machine::credits(int handler, std::uint32_t pe) {
    message_stream& s = *stream_for(handler);
    if (s._credits.empty()) s._credits.resize(num_pes());
    auto& slot = s._credits[pe];
    if (!slot) slot = std::make_unique<semaphore>(s.capacity());
    return *slot;
}

void machine::return_credits(std::uint32_t to, int handler, std::uint32_t count) {
    if (_core->is_lost(to)) return;  // nobody will send again
    ++_send_stats.credit_messages;
    const int size = static_cast<int>(CmiMsgHeaderSizeBytes + sizeof(credit_return));
    void* msg = CmiAlloc(size);
    CmiInitMsgHeader(msg, size);
    CmiSetHandler(msg, static_cast<int>(detail::internal_handler::stream_credit));
    const credit_return c{handler, _core->pe(), count};
    std::memcpy(static_cast<std::byte*>(msg) + CmiMsgHeaderSizeBytes, &c, sizeof c);
    // Never waits for a credit itself: credit messages go to an internal handler.
    _core->send_for_api(to, msg);
}

// Credits owed to a PE go back at half the stream's capacity. A task that took them often
// answers that PE before it suspends (an acknowledgement, a reply): they then ride in that
// copying send's header instead of a credit message of their own (stream_credit). What no
// send took goes by a credit message from a deferred call (scheduler::defer), which runs
// once the task that took them suspends, at the next turn of whatever loop runs then (a
// nested one too: a task that waits inside CmiDeliverSpecificMsg for what the sender sends
// after its next window must not hold the credits that window needs). A credit message per
// window of a stream cost the coroutine API's 8 B rate ~7 % (docs/perf.md, stop 29); a
// task spawned per return point instead of the deferred call, ~3 % (stop 38).
void machine::credits_due(std::uint32_t pe, message_stream* stream) {
    _due_credits.emplace_back(pe, stream);
    if (_closing) return;
    _core->sched().defer(_credit_flush);
}

// The PE shuts down: what is due goes now (its tasks are done), and nothing after. Before
// the scheduler goes (pe_core::shutdown): the deferred call leaves its queue here.
void machine::close_credits() {
    if (_closing) return;
    _core->sched().cancel_deferred(_credit_flush);
    // Closing first: credits that come due while these go (a send's back-pressure runs
    // the loop) join the list this drains instead of queueing the call again.
    _closing = true;
    return_due_credits();
}

namespace {
// What a header's `reserved` carries: the stream's handler above, the count below.
constexpr std::uint32_t carried_count_bits = 16;
constexpr std::uint32_t carried_count_max = (1u << carried_count_bits) - 1;
constexpr std::uint32_t carried_handler_max = ~0u >> carried_count_bits;
}  // namespace

std::uint32_t machine::take_due_credits(std::uint32_t pe) noexcept {
    for (auto it = _due_credits.begin(); it != _due_credits.end();) {
        message_stream* s = it->second;
        if (it->first != pe) {
            ++it;
            continue;
        }
        const std::uint32_t owed = s->_owed[pe];
        const auto handler = static_cast<std::uint32_t>(s->_handler);
        if (owed == 0) {  // returned at capacity meanwhile
            it = _due_credits.erase(it);
            continue;
        }
        if (owed > carried_count_max || handler > carried_handler_max) {  // a credit message
            ++it;
            continue;
        }
        s->_owed[pe] = 0;
        _due_credits.erase(it);
        return handler << carried_count_bits | owed;
    }
    return 0;
}

void machine::restore_due_credits(std::uint32_t pe, std::uint32_t carried) {
    --_send_stats.credits_riding;  // counted by carry_due_credits
    message_stream* s = stream_for(static_cast<int>(carried >> carried_count_bits));
    s->_owed[pe] += carried & carried_count_max;
    credits_due(pe, s);
}

void machine::return_due_credits() {
    // Each entry off the list before its send, which may run tasks that add to it; the
    // list keeps its storage from window to window.
    while (!_due_credits.empty()) {
        const auto [pe, s] = _due_credits.back();
        _due_credits.pop_back();
        if (const std::uint32_t count = std::exchange(s->_owed[pe], 0))
            return_credits(pe, s->_handler, count);  // else carried, or returned at capacity
    }
}

void machine::credits_carried(std::uint32_t from, std::uint32_t carried) {
    credits_arrived(from, static_cast<int>(carried >> carried_count_bits),
                    carried & carried_count_max);
}

void machine::on_credit(void* msg) {
    credit_return c{};
    if (static_cast<std::size_t>(CmiSize(msg)) >= CmiMsgHeaderSizeBytes + sizeof c)
        std::memcpy(&c, static_cast<std::byte*>(msg) + CmiMsgHeaderSizeBytes, sizeof c);
    CmiFree(msg);
    credits_arrived(c.from, c.handler, c.count);
}

void machine::credits_arrived(std::uint32_t from, int handler, std::uint32_t count) {
    message_stream* s = stream_for(handler);
    if (!s || s->capacity() == 0 || from >= num_pes())
        _core->abort_job("coverse: PE " + std::to_string(pe()) + " got " + std::to_string(count) +
                         " credits for handler " + std::to_string(handler) + " from PE " +
                         std::to_string(from) +
                         ", which is no bounded stream here; register the same streams with " +
                         "the same capacities in the same order on every PE");
    credits(handler, from).release(count);
}

task<void> machine::send_bytes(std::uint32_t pe, std::span<const std::byte> bytes) {
    // Borrowed by the core: no copy; it completes once every frame went (get-done for a
    // rendezvous). A small send usually finishes at once, without a wait.
    for (;;) {
        check_not_lost(pe, "a send to it");
        if (const auto started = _core->start_send(pe, bytes)) {
            if (*started) co_await _core->finish_send(*started, pe);
            break;
        }
        co_await _core->slot_or_loss();  // every handle slot in use
    }
    // Its frames failed, or went into a dead PE's ring or socket: not delivered.
    check_not_lost(pe, "a send to it");
}

// A small one that fits the peer's ring or eager slot has gone once it is there: no
// frame, handle or completion. Inline in the sends below (a call less per 8 B hop).
[[gnu::always_inline]] inline bool machine::send_small(std::uint32_t pe, message& msg) {
    if (!_core->send_now_taking(pe, msg.get())) return false;
    (void)msg.release();  // freed by the core once it was copied
    if (_core->is_lost(pe)) [[unlikely]]
        throw peer_lost(pe, "a send to it");  // into a dead PE's ring: not delivered
    return true;
}

// ---- send_op -----------------------------------------------------------------------------

bool send_op::send_copy_or_prepare() {
    semaphore* wait = nullptr;
    _copying = false;
    return _m->send_copy_at_once(_pe, _handler, _payload, _msg, wait) || prepare(wait);
}

bool send_op::prepare(semaphore* wait) {
    _slow = _m->send_rest(_pe, std::move(_msg), wait);
    return false;
}

send_op::operator task<void>() && {
    return run(std::move(*this));
}

task<void> send_op::run(send_op op) {
    co_await op;
}

// The checks and the small-message path of a send, without a coroutine frame: the 8 B path
// through this API is measured beside the facade's (an extra frame per send cost ~200
// instructions of a ping-pong's round trip). False leaves the rest to send_rest, with the
// stream credit to wait for in `wait` when there was none to take.
bool machine::send_at_once(std::uint32_t pe, message& msg, semaphore*& wait) {
    if (pe >= _core->num_pes() || !msg || _core->is_lost(pe)) [[unlikely]] {
        check_pe(pe, "send");
        if (!msg) throw std::invalid_argument("coverse::machine::send: an empty message");
        check_not_lost(pe, "a send to it");
    }
    // A message the API did not compose (adopted from a Converse handler) may hold
    // anything in the API's header flags and the credit's PE bits; they are set from here.
    header_of(msg.get())->flags &= ~detail::api_header_bits;
    if (semaphore* c = bounded_credits(msg.handler(), pe)) {
        if (!c->try_acquire()) {
            wait = c;
            return false;
        }
        mark_credited(msg);
    }
    carry_due_credits(pe, msg);
    return send_small(pe, msg);
}

// A copying send's frameless attempt (send_op::await_ready, inline): a small payload goes
// into the peer's ring from a message composed on this stack, the copy the ring makes being
// the only one. (An allocated copy, written and freed per send, cost the coroutine API's 8 B
// rate ~10 % against the facade's sends of one buffer.) Anything else is left untouched to
// send_copy_at_once: this path is measured against CmiAsyncSend's (docs/perf.md, stop 32).
bool machine::send_copy_now(std::uint32_t pe, int handler, std::span<const std::byte> payload) {
    constexpr std::size_t on_stack = 512;
    const std::size_t size = CmiMsgHeaderSizeBytes + payload.size();
    if (pe >= _core->num_pes() || _core->is_lost(pe) || size > on_stack) [[unlikely]]
        return false;
    semaphore* credit = bounded_credits(handler, pe);  // taken, when not null
    if (credit && !credit->try_acquire()) [[unlikely]]
        return false;
    alignas(16) std::byte buf[on_stack];
    CmiMsgHeaderBasic h{};
    h.handler = static_cast<std::uint32_t>(handler);
    if (credit) h.flags = credited_flags();
    const std::uint32_t carried = carry_due_credits(pe, h, size);
    std::memcpy(buf, &h, sizeof h);
    copy_bytes(buf + CmiMsgHeaderSizeBytes, payload.data(), payload.size());
    if (!_core->send_now_borrowing(pe, buf, static_cast<std::uint32_t>(size))) [[unlikely]] {
        if (credit) credit->release(1);  // nobody waits for it: try_acquire found none
        if (carried) restore_due_credits(pe, carried);  // may throw (bad_alloc): last
        return false;
    }
    ++_send_stats.copied_frameless;
    return true;
}

// The rest of a copying send (send_copy_now did not send it): the checks, the stream credit
// (`wait`, when there is none to take), and a copy in `msg` that goes like a taken message
// (frameless when it fits now; else send_rest sends it).
bool machine::send_copy_at_once(std::uint32_t pe, int handler, std::span<const std::byte> payload,
                                message& msg, semaphore*& wait) {
    check_pe(pe, "send");
    check_not_lost(pe, "a send to it");
    semaphore* credit = bounded_credits(handler, pe);  // taken, when not null
    if (credit && !credit->try_acquire()) {
        wait = credit;  // send_rest waits for it, then credits the copy
        msg = make_message(handler, payload);
        ++_send_stats.copied_allocated;
        return false;
    }
    try {
        msg = make_message(handler, payload);
    } catch (...) {
        if (credit) credit->release(1);  // nothing was sent: the credit stays the sender's
        throw;
    }
    ++_send_stats.copied_allocated;
    if (credit) mark_credited(msg);
    carry_due_credits(pe, msg);
    return send_small(pe, msg);
}

task<void> machine::send_rest(std::uint32_t pe, message msg, semaphore* wait) {
    if (wait) {
        co_await waiting_for({wait_kind::credits, pe, static_cast<std::uint64_t>(msg.handler()),
                              "a credit of the receiver's stream"},
                             wait->acquire());
        check_not_lost(pe, "a send to it, waiting for a credit");
        mark_credited(msg);
        carry_due_credits(pe, msg);
        if (send_small(pe, msg)) co_return;
    }
    // The message is freed when this frame ends.
    co_await send_bytes(pe, msg.bytes());
}

std::uint32_t machine::credited_flags() const noexcept {
    return credit_flag | (pe() << source_shift);
}

// The header's API bits are clear here: the API made the message, or send_at_once cleared
// them.
void machine::mark_credited(message& msg) const noexcept {
    header_of(msg.get())->flags |= credited_flags();
}

void machine::carry_due_credits(std::uint32_t pe, message& msg) noexcept {
    if (!_due_credits.empty())  // the size only then: a send's common case looks no further
        (void)carry_due_credits(pe, *header_of(msg.get()), msg.bytes().size());
}

// Whatever path the message then takes (the ring, an eager slot, a socket: the API's sends
// keep its header flags), the credits arrive with it. Not in a rendezvous, which could hold
// them until the receiver fetched it; not to this PE, whose sends to itself are no arrival
// (pe_core::accept_message never sees them).
std::uint32_t machine::carry_due_credits(std::uint32_t pe, CmiMsgHeaderBasic& h,
                                         std::size_t size) noexcept {
    if (_due_credits.empty() || pe == this->pe() || size > _core->medium_boundary()) return 0;
    const std::uint32_t carried = take_due_credits(pe);
    if (carried) {
        h.flags |= detail::header_flag_carries_credits;
        h.reserved = carried;
        ++_send_stats.credits_riding;
    }
    return carried;
}

task<void> machine::send(std::uint32_t pe, std::span<const std::byte> msg) {
    check_pe(pe, "send");
    if (msg.size() < CmiMsgHeaderSizeBytes)
        throw std::invalid_argument("coverse::machine::send: " + std::to_string(msg.size()) +
                                    " bytes is shorter than the Converse header");
    CmiMsgHeaderBasic head;
    std::memcpy(&head, msg.data(), sizeof head);
    const int h = static_cast<int>(head.handler);
    // A bounded stream's credit is taken on a message of our own; so is a header holding the
    // API's flags (by chance: the caller's bytes are read-only), which send() then clears.
    if (message_stream* s = stream_for(h);
        (s && s->capacity() > 0) ||
        (head.flags & (detail::header_flag_stream_credit | detail::header_flag_carries_credits))) {
        message copy = message::allocate(h, msg.size() - CmiMsgHeaderSizeBytes);
        std::memcpy(copy.bytes().data(), msg.data(), msg.size());
        co_await send(pe, std::move(copy));
        co_return;
    }
    co_await send_bytes(pe, msg);
}

task<void> machine::broadcast(std::span<const std::byte> msg, bool include_self) {
    co_await _core->broadcast_async(msg, include_self);
}

namespace {
void merge_nothing(std::vector<std::byte>&, std::span<const std::byte>, const void*) {}
}  // namespace

task<void> machine::barrier() {
    // Up the tree and down again with no data: a collective like the others, so it is
    // numbered, cancellable and fails with peer_lost (the core's CmiBarrier is neither).
    const std::uint32_t seq = next_collective();
    co_await reduce_bytes({}, &merge_nothing, nullptr, 0, {seq, 0});
    co_await broadcast_bytes({}, 0, {seq, 1});
}

task<std::int64_t> machine::reduce_sum(std::int64_t value) {
    co_return co_await allreduce(value, std::plus<std::int64_t>{});
}

// ---- run ---------------------------------------------------------------------------------------

namespace {
task<void> run_entry(std::function<task<void>(machine&)>* entry, machine* m, int* status,
                     bool* done) {
    // Messages that came in while the PE started wait in the network queue until here; the
    // entry runs from its first statement to its first suspension before schedule() looks
    // at them, so the streams and handlers it registers there are in place.
    m->core().hold_deliveries(false);
    try {
        co_await (*entry)(*m);
    } catch (...) {
        const std::string what =
            "the entry task failed: " + exception_text(std::current_exception());
        // Other PEs may be waiting on this one: waiting for them in the exit vote would hang
        // the job. Alone, the PE returns 1 from run().
        if (m->num_pes() > 1) m->core().fail_pe(what);
        CmiError("coverse: PE %u: %s\n", m->pe(), what.c_str());
        *status = 1;
    }
    // The job does not end under tasks the program started: they may still send.
    co_await m->scope().join();
    *done = true;
    m->core().exit_scheduler();
}
}  // namespace

int run(int argc, char** argv, std::function<task<void>(machine&)> entry) {
    auto& slot = detail::core_slot();
    try {
        slot = std::make_unique<pe_core>(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
    int status = 0;
    bool done = false;
    machine& m = slot->api();
    slot->hold_deliveries(true);
    slot->sched().spawn(run_entry(&entry, &m, &status, &done), "coverse::run entry");
    while (!done)
        slot->schedule(-1, false);
    try {
        slot->shutdown();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "coverse: shutdown: %s\n", e.what());
        status = status ? status : 1;
    }
    slot.reset();
    return status;
}

}  // namespace coverse
