// The coroutine-native API (coverse.hpp) over the machine core.
#include <coverse/coverse.hpp>

#include <cstdio>
#include <cstring>
#include <map>

#include <coverse/alloc/message.hpp>

#include "pe_core.hpp"

namespace coverse {

namespace detail {
std::unique_ptr<pe_core>& core_slot();
}

using detail::pe_core;

// ---- message ---------------------------------------------------------------------------------

message& message::operator=(message&& o) noexcept {
    if (this != &o) {
        if (_msg) alloc::msg_free(_msg);
        _msg = o.release();
    }
    return *this;
}

message::~message() {
    if (_msg) alloc::msg_free(_msg);
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

message make_message(int handler, std::span<const std::byte> payload) {
    void* m = CmiAlloc(static_cast<int>(CmiMsgHeaderSizeBytes + payload.size()));
    CmiInitMsgHeader(m, static_cast<int>(CmiMsgHeaderSizeBytes + payload.size()));
    CmiSetHandler(m, handler);
    if (!payload.empty())
        std::memcpy(static_cast<std::byte*>(m) + CmiMsgHeaderSizeBytes, payload.data(),
                    payload.size());
    return message(m);
}

// ---- message_stream ----------------------------------------------------------------------------

void message_stream::push(void* msg) {
    _queue.push_back(msg);
    if (auto w = std::exchange(_waiter, nullptr)) scheduler::this_thread().schedule(w);
}

task<message> message_stream::next() {
    while (_head == _queue.size()) {
        struct awaiter {
            message_stream& s;
            bool await_ready() const noexcept { return false; }
            void await_suspend(std::coroutine_handle<> h) noexcept { s._waiter = h; }
            void await_resume() const noexcept {}
        };
        co_await waiting_for({wait_kind::message, no_peer, static_cast<std::uint64_t>(_handler),
                              "message_stream::next"},
                             awaiter{*this});
    }
    void* m = _queue[_head++];
    if (_head == _queue.size()) {
        _queue.clear();
        _head = 0;
    }
    co_return message(m);
}

// ---- machine -----------------------------------------------------------------------------------

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

int machine::register_handler(std::function<void(message)> fn) {
    _functions.push_back(std::make_unique<std::function<void(message)>>(std::move(fn)));
    return _core->register_handler(
        nullptr,
        [](void* msg, void* user) {
            (*static_cast<std::function<void(message)>*>(user))(message(msg));
        },
        _functions.back().get());
}

message_stream& machine::register_stream() {
    _streams.push_back(std::make_unique<message_stream>());
    message_stream* s = _streams.back().get();
    s->_handler = _core->register_handler(
        nullptr, [](void* msg, void* user) { static_cast<message_stream*>(user)->push(msg); }, s);
    return *s;
}

task<void> machine::send(std::uint32_t pe, std::span<const std::byte> msg) {
    co_await _core->send_async(pe, msg);
}

task<void> machine::send(std::uint32_t pe, int handler, std::span<const std::byte> payload) {
    message m = make_message(handler, payload);
    co_await _core->send_async(pe, m.bytes());
}

task<void> machine::broadcast(std::span<const std::byte> msg, bool include_self) {
    co_await _core->broadcast_async(msg, include_self);
}

task<void> machine::barrier() {
    co_await _core->barrier(false);
}

namespace {
// reduce_sum: each PE contributes {sequence, value} through CmiReduce to PE 0, which
// broadcasts the total; every PE's waiting task picks up the total for its sequence.
struct sum_payload {
    std::uint32_t seq;
    std::uint32_t pad;
    std::int64_t value;
};
struct sum_state {
    std::map<std::uint32_t, std::int64_t> totals;
    detail::wait_list waiters;
    bool installed = false;
};
sum_state& sums() {
    static sum_state s;
    return s;
}
sum_payload read_sum(void* msg) {
    sum_payload p;
    std::memcpy(&p, static_cast<std::byte*>(msg) + CmiMsgHeaderSizeBytes, sizeof p);
    return p;
}
void* merge_sums(int* size, void* local, void** remote, int count) {
    sum_payload total = read_sum(local);
    for (int i = 0; i < count; ++i)
        total.value += read_sum(remote[i]).value;
    std::memcpy(static_cast<std::byte*>(local) + CmiMsgHeaderSizeBytes, &total, sizeof total);
    (void)size;
    return local;
}
}  // namespace

task<std::int64_t> machine::reduce_sum(std::int64_t value) {
    auto& st = sums();
    if (!st.installed) {
        st.installed = true;
        _core->set_internal_handler(
            detail::internal_handler::sum_result,
            [](void* msg, void*) {
                CmiSetHandler(msg, static_cast<int>(detail::internal_handler::sum_final));
                CmiSyncBroadcastAllAndFree(CmiSize(msg), msg);
            },
            nullptr);
        _core->set_internal_handler(
            detail::internal_handler::sum_final,
            [](void* msg, void*) {
                const sum_payload p = read_sum(msg);
                CmiFree(msg);
                sums().totals[p.seq] = p.value;
                sums().waiters.notify_all();
            },
            nullptr);
    }
    const std::uint32_t seq = _reduce_seq++;
    const int size = static_cast<int>(CmiMsgHeaderSizeBytes + sizeof(sum_payload));
    void* msg = CmiAlloc(size);
    CmiInitMsgHeader(msg, size);
    CmiSetHandler(msg, static_cast<int>(detail::internal_handler::sum_result));
    const sum_payload p{seq, 0, value};
    std::memcpy(static_cast<std::byte*>(msg) + CmiMsgHeaderSizeBytes, &p, sizeof p);
    _core->reduce(msg, size, merge_sums);
    while (!st.totals.contains(seq))
        co_await st.waiters.wait();
    const std::int64_t total = st.totals[seq];
    st.totals.erase(seq);
    co_return total;
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
    } catch (const std::exception& e) {
        CmiError("coverse: PE %u: the entry task failed: %s\n", m->pe(), e.what());
        *status = 1;
    }
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
