// The leak report: which messages are still live, how big, from which owner, allocated where.
// With LEAK_REPORT=1 it is written to stderr at exit.
#pragma once

#include <string>

namespace coverse::alloc {

/// The report of every message still live in a pool or from the system allocator, grouped by
/// allocation site (sites are recorded only while the report is enabled). Reads the pools
/// without stopping their threads: meant for exit or a point where the other PEs are idle.
std::string leak_report();

}  // namespace coverse::alloc
