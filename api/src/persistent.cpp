// Charm++'s persistent-communication API over the rdma layer's long eager channels
// (rdma/eager.hpp). A PersistentHandle is the layer's handle id; PersistentReq carries the
// receiver's channel id in myHand. Handles are per PE, like every Converse object.
#include <converse.h>

#include <cstdint>
#include <vector>

#include "pe_core.hpp"

namespace {

using coverse::detail::pe_core;

pe_core& persistent_core(const char* caller) {
    return pe_core::get(caller);
}

std::uint32_t id_of(PersistentHandle h) noexcept {
    return static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(h));
}

PersistentHandle handle_of(std::uint32_t id) noexcept {
    return reinterpret_cast<PersistentHandle>(static_cast<std::uintptr_t>(id));
}

// Handles this PE made, for CmiDestroyAllPersistent.
std::vector<std::uint32_t>& live_handles() {
    static std::vector<std::uint32_t> v;
    return v;
}

// Handles made on a single PE or before the layer exists: valid, never used for a channel.
std::uint32_t next_local_handle = 0x8000'0000u;

}  // namespace

extern "C" {

void CmiPersistentInit(void) {}

PersistentHandle CmiCreatePersistent(int destPE, int maxBytes) {
    pe_core& c = persistent_core("CmiCreatePersistent");
    if (destPE < 0 || static_cast<std::uint32_t>(destPE) >= c.num_pes())
        c.abort_job("CmiCreatePersistent: PE " + std::to_string(destPE) + " is not in this job (" +
                    std::to_string(c.num_pes()) + " PEs)");
    if (maxBytes <= 0)
        c.abort_job("CmiCreatePersistent: maxBytes is " + std::to_string(maxBytes) +
                    "; it must be at least 1");
    auto* l = c.rdma_layer();
    const std::uint32_t id = l ? l->persistent_create(static_cast<std::uint32_t>(destPE),
                                                      static_cast<std::uint32_t>(maxBytes))
                               : next_local_handle++;
    live_handles().push_back(id);
    return handle_of(id);
}

PersistentReq CmiCreateReceiverPersistent(int maxBytes) {
    pe_core& c = persistent_core("CmiCreateReceiverPersistent");
    PersistentReq r{};
    r.pe = static_cast<int>(c.pe());
    r.maxBytes = maxBytes > 0 ? maxBytes : 0;
    r.bufPtr = nullptr;
    r.myHand = nullptr;  // no channel: the sender's handle sends the usual way
    if (auto* l = c.rdma_layer(); l && maxBytes > 0) {
        const auto offer = l->persistent_create_receiver(static_cast<std::uint32_t>(maxBytes));
        if (offer.channel) {
            r.myHand = handle_of(offer.channel);
            r.maxBytes = static_cast<int>(offer.capacity);
        }
    }
    return r;
}

PersistentHandle CmiRegisterReceivePersistent(PersistentReq req) {
    pe_core& c = persistent_core("CmiRegisterReceivePersistent");
    if (req.pe < 0 || static_cast<std::uint32_t>(req.pe) >= c.num_pes())
        c.abort_job(
            "CmiRegisterReceivePersistent: the request names PE " + std::to_string(req.pe) +
            ", which is not in this job (was it copied whole from CmiCreateReceiverPersistent?)");
    auto* l = c.rdma_layer();
    const std::uint32_t id =
        l ? l->persistent_register_receive(static_cast<std::uint32_t>(req.pe), id_of(req.myHand),
                                           static_cast<std::uint32_t>(std::max(req.maxBytes, 0)))
          : next_local_handle++;
    live_handles().push_back(id);
    return handle_of(id);
}

void CmiUsePersistentHandle(PersistentHandle* handles, int n) {
    pe_core& c = persistent_core("CmiUsePersistentHandle");
    std::vector<std::uint32_t> ids;
    if (handles)
        for (int i = 0; i < n; ++i)
            if (handles[i]) ids.push_back(id_of(handles[i]));
    if (auto* l = c.rdma_layer()) l->persistent_use(ids);
}

void CmiDestroyPersistent(PersistentHandle handle) {
    pe_core& c = persistent_core("CmiDestroyPersistent");
    const std::uint32_t id = id_of(handle);
    std::erase(live_handles(), id);
    if (auto* l = c.rdma_layer()) l->persistent_destroy(id);
}

void CmiDestroyAllPersistent(void) {
    pe_core& c = persistent_core("CmiDestroyAllPersistent");
    auto* l = c.rdma_layer();
    for (std::uint32_t id : live_handles())
        if (l) l->persistent_destroy(id);
    live_handles().clear();
}

}  // extern "C"
