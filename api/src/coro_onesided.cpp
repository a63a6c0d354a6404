// One-sided memory of the coroutine API (coverse.hpp): expose registers a span with every
// provider this PE has (through each provider's registration cache), get and put run one
// transfer over the provider that reaches the peer (rdma/onesided.hpp), and a region's
// registrations go exactly once, with its exposed_region. Memory of this PE itself is
// copied directly.
#include <coverse/coverse.hpp>

#include <cstring>
#include <stdexcept>
#include <string>

#include <coverse/rdma/onesided.hpp>

#include "pe_core.hpp"

namespace coverse {

namespace {
constexpr rdma::provider_kind kinds[remote_region::max_providers] = {
    rdma::provider_kind::cma, rdma::provider_kind::tcp, rdma::provider_kind::verbs};
unsigned index_of(rdma::provider_kind k) noexcept {
    return static_cast<unsigned>(k) - 1;
}
}  // namespace

struct exposed_region::holder {
    std::vector<rdma::registered> registrations;  // each released once, with the holder
};

exposed_region::exposed_region(exposed_region&&) noexcept = default;
exposed_region& exposed_region::operator=(exposed_region&&) noexcept = default;
exposed_region::~exposed_region() = default;

remote_region remote_region::slice(std::uint64_t offset, std::uint64_t len) const {
    if (offset > length || len > length - offset)
        throw std::out_of_range("coverse::remote_region::slice: [" + std::to_string(offset) + ", " +
                                std::to_string(offset + len) + ") is outside PE " +
                                std::to_string(pe) + "'s region of " + std::to_string(length) +
                                " bytes");
    remote_region r = *this;
    r.address += offset;
    r.length = len;
    return r;
}

task<exposed_region> machine::expose(std::span<std::byte> memory) {
    if (memory.empty()) throw std::invalid_argument("coverse::machine::expose: an empty span");
    // Registration does not wait on anyone: a stop asked before it is the only one to honour.
    if ((co_await this_task::stop_token()).stop_requested()) throw cancelled_error{};
    exposed_region r;
    r._memory = memory;
    r._desc.pe = pe();
    r._desc.address = reinterpret_cast<std::uintptr_t>(memory.data());
    r._desc.length = memory.size();
    r._holder = std::make_unique<exposed_region::holder>();
    if (rdma::layer* l = _core->rdma()) {
        for (rdma::provider_kind k : kinds) {
            rdma::provider* p = rdma::provider_of(*l, k);
            if (!p) continue;
            rdma::registered h = p->expose(memory);  // std::system_error naming the range
            r._desc.keys[index_of(k)] = h.get().key;
            r._desc.providers |= 1u << index_of(k);
            r._holder->registrations.push_back(std::move(h));
        }
    }
    co_return r;
}

namespace {
void check_transfer(const machine& m, const char* what, std::uint32_t pe,
                    const remote_region& remote, std::size_t size) {
    if (pe >= m.num_pes())
        throw std::out_of_range(std::string("coverse::machine::") + what + ": PE " +
                                std::to_string(pe) + " is not in this job of " +
                                std::to_string(m.num_pes()) + " PEs");
    if (remote.pe != pe)
        throw std::invalid_argument(std::string("coverse::machine::") + what +
                                    ": the region belongs to PE " + std::to_string(remote.pe) +
                                    ", not PE " + std::to_string(pe));
    if (size > remote.length)
        throw std::out_of_range(std::string("coverse::machine::") + what + ": " +
                                std::to_string(size) + " bytes do not fit PE " +
                                std::to_string(pe) + "'s region of " +
                                std::to_string(remote.length) + " bytes (use slice())");
}

// One get or put: this PE's own memory is copied; a peer's goes over its provider.
task<void> transfer(machine& m, bool is_get, std::uint32_t pe, std::span<std::byte> local,
                    remote_region remote) {
    const char* what = is_get ? "get" : "put";
    check_transfer(m, what, pe, remote, local.size());
    // A stop asked before the transfer is posted cancels it; once posted it runs to the
    // provider's final completion (it reads or writes `local` until then).
    if ((co_await this_task::stop_token()).stop_requested()) throw cancelled_error{};
    if (local.empty()) co_return;
    auto* remote_bytes = reinterpret_cast<std::byte*>(remote.address);
    if (pe == m.pe()) {
        if (is_get)
            std::memmove(local.data(), remote_bytes, local.size());
        else
            std::memmove(remote_bytes, local.data(), local.size());
        co_return;
    }
    if (m.core().is_lost(pe)) throw peer_lost(pe, std::string("a one-sided ") + what);
    rdma::layer* l = m.core().rdma();
    // CONNECT=lazy: the provider that reaches `pe` is known once the pair is set up.
    if (l && !l->ready(pe)) {
        co_await waiting_for({wait_kind::connect, pe, 0, "lazy connect: the one-sided set-up"},
                             l->until_ready(pe));
        if (m.core().is_lost(pe)) throw peer_lost(pe, std::string("a one-sided ") + what);
    }
    rdma::provider* p = l ? rdma::provider_to(*l, pe) : nullptr;
    const std::string op = std::string("coverse::machine::") + what + (is_get ? " from" : " to") +
                           " PE " + std::to_string(pe);
    if (!p) throw std::runtime_error(op + ": no provider reaches it");
    const unsigned k = index_of(p->kind());
    const std::string via = std::string(rdma::to_string(p->kind()));
    if (!(remote.providers & (1u << k)))
        throw std::runtime_error(op + ": the region was not exposed to the " + via + " provider");
    const rdma::remote_memory rm{remote.address, remote.keys[k], remote.length};
    // Two statements, not one ?: expression: written as `is_get ? co_await ... : co_await
    // ...`, the GCC 12 build freed an invalid pointer (the awaiter that waiting_for keeps
    // by reference is a temporary of the conditional expression).
    rdma::op_result r;
    const bool shared = l->shares_onesided(*p, pe, local.size());  // both PEs copy
    if (is_get && shared)
        r = co_await waiting_for({wait_kind::other, pe, remote.address, "a shared one-sided get"},
                                 l->shared_get(pe, local, rm));
    else if (is_get)
        r = co_await waiting_for({wait_kind::other, pe, remote.address, "a one-sided get"},
                                 rdma::get(*p, pe, local, rm));
    else if (shared)
        r = co_await waiting_for({wait_kind::other, pe, remote.address, "a shared one-sided put"},
                                 l->shared_put(pe, local, rm));
    else
        r = co_await waiting_for({wait_kind::other, pe, remote.address, "a one-sided put"},
                                 rdma::put(*p, pe, local, rm));
    // Under ON_PEER_LOST=report a dead owner is the caller's to handle (a cma get sees the
    // process gone before the connection's failure is noticed: that is the same loss).
    if (!r.ok() && m.core().report_lost_peers() &&
        (r.status == rdma::op_status::peer_lost || m.core().is_lost(pe))) {
        m.core().lose_peer(
            pe, "a one-sided " + std::string(what) + " found it gone (" + r.detail + ")");
        throw peer_lost(pe, std::string("a one-sided ") + what + " over " + via +
                                (r.detail.empty() ? "" : ": " + r.detail));
    }
    if (!r.ok())
        throw std::runtime_error(op + " (" + via + "): " + std::string(rdma::to_string(r.status)) +
                                 (r.detail.empty() ? "" : ": " + r.detail));
}
}  // namespace

task<void> machine::get(std::uint32_t pe, remote_region remote, std::span<std::byte> local) {
    co_await transfer(*this, true, pe, local, remote);
}

task<void> machine::put(std::uint32_t pe, std::span<const std::byte> local, remote_region remote) {
    // A put only reads `local`; the shared path takes a mutable span.
    co_await transfer(*this, false, pe,
                      std::span<std::byte>(const_cast<std::byte*>(local.data()), local.size()),
                      remote);
}

task<void> machine::put_notify(std::uint32_t pe, std::span<const std::byte> local,
                               remote_region remote, message note) {
    co_await put(pe, local, remote);
    co_await send(pe, std::move(note));
}

}  // namespace coverse
