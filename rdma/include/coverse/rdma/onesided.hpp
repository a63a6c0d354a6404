// One-sided memory for the layer's users (the coroutine API's expose/get/put): the
// providers a region is registered with and the one that reaches a given peer. The
// providers' own get/put awaitables (provider.hpp) do the transfers.
#pragma once

#include <cstdint>

#include <coverse/rdma/layer.hpp>
#include <coverse/rdma/provider.hpp>

namespace coverse::rdma {

/// The provider of `kind` on this PE, or null when it has none (no verbs device, no cma).
provider* provider_of(layer& l, provider_kind kind) noexcept;
/// The provider that reads and writes `pe`'s memory (after layer::connect()); null for a
/// PE the layer has no path to.
provider* provider_to(layer& l, std::uint32_t pe) noexcept;

}  // namespace coverse::rdma
