// The two-process harness's own limits (rdma_pair.hpp): a PE that never ends and a shutdown
// whose rendezvous never completes each fail by a code that names them, within their limits,
// instead of holding the test until ctest's timeout.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <coverse/alloc/message.hpp>

#include "rdma_pair.hpp"

namespace coverse::rdma::test {
namespace {

// A PE body that never returns (nor runs its loop).
int never_ends(node&, const std::function<void()>&) {
    for (;;)
        std::this_thread::sleep_for(1s);
}

// PE 0 never ends (it does not even run its loop): run_job stops it at the job's limit and
// gives it job_timed_out; PE 1, which failed a check meanwhile, keeps its own code.
TEST(rdma_pair_harness, a_pe_that_never_ends_is_stopped_at_the_job_limit) {
    pair_options opt;
    opt.cfg.forced = provider_kind::cma;
    opt.job_limit = 3s;
    const auto began = std::chrono::steady_clock::now();
    const auto r = run_pair(opt, never_ends, [](node&, const std::function<void()>&) { return 7; });
    const auto took = std::chrono::steady_clock::now() - began;
    EXPECT_EQ(r.pe0, job_timed_out);
    EXPECT_EQ(r.pe1, 7);
    EXPECT_GE(took, 3s);
    EXPECT_LT(took, 60s);
}

// The same with PE 1 gated on PE 0's end: both are stopped at the limit, and the gate, written
// after PE 0 is reaped into a pipe no PE reads any more, does not take the test down (SIGPIPE).
TEST(rdma_pair_harness, a_gated_job_whose_first_pe_never_ends_is_stopped_whole) {
    pair_options opt;
    opt.cfg.forced = provider_kind::cma;
    opt.gate_pe1_on_pe0_exit = true;
    opt.job_limit = 3s;
    const auto r = run_pair(opt, never_ends, [](node&, const std::function<void()>& gate) {
        gate();
        return 0;
    });
    EXPECT_EQ(r.pe0, job_timed_out);
    EXPECT_EQ(r.pe1, job_timed_out);
}

// PE 0 publishes 4 MiB that PE 1 never gets (PE 1 waits for PE 0's end before it runs its
// loop): PE 0's shutdown cannot finish the rendezvous and ends the PE with shutdown_stalled.
TEST(rdma_pair_harness, a_shutdown_with_a_rendezvous_that_never_completes_ends_by_its_code) {
    pair_options opt;
    opt.cfg.forced = provider_kind::cma;
    opt.gate_pe1_on_pe0_exit = true;
    opt.job_limit = 30s;  // far above the shutdown's 1 s: the code must be the shutdown's
    const auto r = run_pair(
        opt,
        [](node& n, const std::function<void()>&) {
            void* m = alloc::msg_alloc(4 << 20);
            fill(m, 4 << 20, 0);
            recorded_send done;
            n.rdma->send(1, static_cast<const std::byte*>(m), 4 << 20, false, 0, &done);
            n.shut_down(1s);  // ends the process: the get-done never comes
            return 80;
        },
        [](node&, const std::function<void()>& gate) {
            gate();  // PE 0 has ended
            return 0;
        });
    EXPECT_EQ(r.pe0, node::shutdown_stalled);
    EXPECT_NE(r.pe1, job_timed_out);
}

}  // namespace
}  // namespace coverse::rdma::test
