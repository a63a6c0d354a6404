// Cfuture: a value set once, from any PE, and waited for by Cth threads on the PE that made
// the future. A set travels as one message to that PE (internal handler future_set), whose
// arrival stores the value and awakens every waiter.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "compat.hpp"
#include "pe_core.hpp"

struct Cfuture_data_s {
    void* value_msg = nullptr;  // the future_set message; the value follows value_offset
    bool ready = false;
    std::vector<CthThread> waiters;
};

namespace coverse::detail {
namespace {

// The message of a set: header, the target's data pointer, then the value.
constexpr std::size_t value_offset = CmiMsgHeaderSizeBytes + sizeof(std::uint64_t);

void* value_of(void* msg) {
    return static_cast<char*>(msg) + value_offset;
}
void* message_of(void* value) {
    return static_cast<char*>(value) - value_offset;
}

void on_future_set(void* msg) {
    std::uint64_t raw = 0;
    std::memcpy(&raw, static_cast<char*>(msg) + CmiMsgHeaderSizeBytes, sizeof raw);
    auto* d = reinterpret_cast<Cfuture_data_s*>(static_cast<std::uintptr_t>(raw));
    if (d->ready) CmiAbort("CfutureSet: the future was already set (a future is set once)");
    d->value_msg = msg;
    d->ready = true;
    auto waiters = std::move(d->waiters);
    d->waiters.clear();
    for (CthThread t : waiters)
        CthAwaken(t);
}

}  // namespace

void futures_install(pe_core& core) {
    core.set_internal_handler(
        internal_handler::future_set, [](void* msg, void*) { on_future_set(msg); }, nullptr);
}

}  // namespace coverse::detail

using coverse::detail::message_of;
using coverse::detail::value_of;

extern "C" {

Cfuture CfutureCreate(void) {
    Cfuture f;
    f.pe = CmiMyPe();
    f.data = new Cfuture_data_s;
    return f;
}

void* CfutureCreateBuffer(int bytes) {
    if (bytes < 0) CmiAbort("CfutureCreateBuffer(%d): negative size", bytes);
    void* msg = CmiAlloc(static_cast<int>(coverse::detail::value_offset) + bytes);
    return value_of(msg);
}

void CfutureDestroyBuffer(void* val) {
    if (val) CmiFree(message_of(val));
}

void CfutureStoreBuffer(Cfuture f, void* value) {
    if (f.pe < 0 || f.pe >= CmiNumPes() || !f.data)
        CmiAbort("CfutureSet: not a future (pe %d)", f.pe);
    void* msg = message_of(value);
    CmiInitMsgHeader(msg, CmiMsgHeaderSizeBytes);
    CmiSetHandler(msg, static_cast<int>(coverse::detail::internal_handler::future_set));
    const auto raw = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(f.data));
    std::memcpy(static_cast<char*>(msg) + CmiMsgHeaderSizeBytes, &raw, sizeof raw);
    CmiSyncSendAndFree(f.pe, CmiSize(msg), msg);
}

void CfutureSet(Cfuture f, void* val, int len) {
    if (len < 0) CmiAbort("CfutureSet: negative length %d", len);
    void* value = CfutureCreateBuffer(len);
    if (len) std::memcpy(value, val, static_cast<std::size_t>(len));
    CfutureStoreBuffer(f, value);
}

void* CfutureWait(Cfuture f) {
    if (f.pe != CmiMyPe())
        CmiAbort("CfutureWait: the future belongs to PE %d; only its own PE (%d here) may wait",
                 f.pe, CmiMyPe());
    while (!f.data->ready) {
        f.data->waiters.push_back(CthSelf());
        CthSuspend();
    }
    return value_of(f.data->value_msg);
}

void CfutureDestroy(Cfuture f) {
    if (f.pe != CmiMyPe() || !f.data) return;
    if (f.data->value_msg) CmiFree(f.data->value_msg);
    delete f.data;
}

void CfutureInit(void) {}  // the handler is installed at start-up on every PE

}  // extern "C"
