// The Converse compatibility units' start-up: every PE registers their internal handlers
// (and the Ctv variables of Cpthreads) before any message can arrive.
#include "compat.hpp"

namespace coverse::detail {

void compat_install(pe_core& core) {
    cth_install(core);
    futures_install(core);
    quiescence_install(core);
    cpm_install(core);
    cpthreads_install(core);
}

}  // namespace coverse::detail
