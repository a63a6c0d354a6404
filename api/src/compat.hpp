// The Converse compatibility units beside the machine core (Cth threads, futures,
// quiescence): what the core calls into them, and what they share.
#pragma once

#include <converse.h>

namespace coverse::detail {

class pe_core;

/// Registers the internal handlers of threads, futures and quiescence (every PE, at start).
void compat_install(pe_core& core);

/// Quiescence: someone on this PE waits for CcdQUIESCENCE (asks PE 0 to detect it).
void quiescence_start(pe_core& core);
/// Quiescence: the PE went idle; answers a pending detection round.
void quiescence_idle(pe_core& core);

/// Under the launcher: the program's stdout becomes line-buffered and goes through the
/// launcher like CmiPrintf, so a PE's printf and CmiPrintf lines keep their order.
void relay_stdout();

void cth_install(pe_core& core);
void futures_install(pe_core& core);
void quiescence_install(pe_core& core);
void cpm_install(pe_core& core);
void cpthreads_install(pe_core& core);

}  // namespace coverse::detail
