// A task started with machine::spawn that throws: the failure is reported with the task's
// name and stops the job (ctest matches the report; the exit status is not 0). The awaited
// case, an exception reaching its awaiter, is checked here too before the spawn.
#include <converse.h>

#include <coverse/coverse.hpp>

#include <stdexcept>

namespace {

coverse::task<int> failing(int x) {
    if (x > 0) throw std::runtime_error("boom " + std::to_string(x));
    co_return x;
}

coverse::task<void> worker() {
    co_await failing(2);
}

coverse::task<void> entry(coverse::machine& m) {
    bool reached = false;
    try {
        (void)co_await failing(1);
    } catch (const std::runtime_error& e) {
        reached = std::string(e.what()) == "boom 1";
    }
    if (!reached) CmiAbort("spawn_failure: the awaited task's exception did not reach its awaiter");
    co_await m.barrier();
    if (m.pe() == m.num_pes() - 1) m.spawn(worker(), "halo worker");
}

}  // namespace

int main(int argc, char** argv) {
    return coverse::run(argc, argv, entry);
}
