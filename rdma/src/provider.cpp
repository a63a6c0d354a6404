// What every provider shares: names, the registration cache hooks, and the awaiter that
// turns a posted operation into a co_await.
#include <coverse/rdma/provider.hpp>

#include <cinttypes>
#include <cstdio>
#include <string>

#include <coverse/runtime/scheduler.hpp>

namespace coverse::rdma {

std::string_view to_string(provider_kind kind) noexcept {
    switch (kind) {
        case provider_kind::cma:
            return "cma";
        case provider_kind::tcp:
            return "tcp";
        case provider_kind::verbs:
            return "verbs";
    }
    return "?";
}

std::optional<provider_kind> provider_from_string(std::string_view text) noexcept {
    if (text == "cma") return provider_kind::cma;
    if (text == "tcp") return provider_kind::tcp;
    if (text == "verbs") return provider_kind::verbs;
    return std::nullopt;
}

std::string_view to_string(op_status s) noexcept {
    switch (s) {
        case op_status::ok:
            return "ok";
        case op_status::peer_lost:
            return "peer lost";
        case op_status::refused:
            return "refused";
        case op_status::failed:
            return "failed";
    }
    return "?";
}

std::error_code provider_registrar::register_memory(std::byte* address, std::size_t length,
                                                    registration& out) {
    return owner->register_memory(address, length, out);
}

void provider_registrar::deregister_memory(registration& r) noexcept {
    owner->deregister_memory(r);
}

provider::provider(alloc::rcache_config cache) : _registrar{this}, _cache(_registrar, cache) {}

provider::~provider() = default;

registered provider::expose(std::span<const std::byte> memory) {
    registered h;
    if (const std::error_code ec = _cache.acquire(memory.data(), memory.size(), h)) {
        // The range, so a refusal can be matched to the buffer (and to /proc/PID/maps).
        char range[64];
        const auto begin = reinterpret_cast<std::uintptr_t>(memory.data());
        std::snprintf(range, sizeof range, "[0x%" PRIxPTR ", 0x%" PRIxPTR ")", begin,
                      begin + memory.size());
        throw std::system_error(ec, "coverse: registering " + std::string(range) + " (" +
                                        std::to_string(memory.size()) + " bytes) with the " +
                                        std::string(to_string(kind())) + " provider");
    }
    return h;
}

bool op_awaiter::await_ready() noexcept {
    return false;
}

bool op_awaiter::await_suspend(std::coroutine_handle<> h) noexcept {
    _waiter = h;
    _posting = true;
    if (_op == op::get)
        _p.post_get(_pe, _local, _remote, *this);
    else
        _p.post_put(_pe, _local, _remote, *this);
    _posting = false;
    // Completed while posting (cma copies synchronously): go on without suspending.
    return !_done;
}

void op_awaiter::complete(op_result result) noexcept {
    _result = std::move(result);
    _done = true;
    // Completed during await_suspend: the awaiting coroutine goes on by itself.
    if (!_posting) scheduler::this_thread().schedule(_waiter);
}

}  // namespace coverse::rdma
