// One-sided memory for the layer's users (onesided.hpp): which provider to register with
// and which one reaches a peer, from the choice layer::connect() made per peer.
#include <coverse/rdma/onesided.hpp>

#include "layer_impl.hpp"

namespace coverse::rdma {

provider* layer::provider_for_onesided(provider_kind kind) noexcept {
    return _impl->provider_of(kind);
}

provider* provider_of(layer& l, provider_kind kind) noexcept {
    return l.provider_for_onesided(kind);
}

provider* provider_to(layer& l, std::uint32_t pe) noexcept {
    return l.provider_for_onesided(l.provider_for(pe));
}

}  // namespace coverse::rdma
