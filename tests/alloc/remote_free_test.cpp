// Blocks freed on threads other than the one that allocated them go back to their own pool
// through its remote-free list: none is lost, none is handed out twice, and a pool whose thread
// has exited lives until its last block comes back. Run under ASan to check for overlap and
// use after free; the list itself is lock-free, so its races would show as lost or doubled
// blocks here.
#include <coverse/alloc/bucket_pool.hpp>
#include <coverse/alloc/message.hpp>

#include "alloc_test_support.hpp"

#include <gtest/gtest.h>

#include <barrier>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace coverse::alloc {
namespace {

using test::pool_config;
using test::scoped_config;

// A message stamped with who made it, so a block handed out twice shows as a torn stamp.
struct stamp {
    std::uint64_t owner;
    std::uint64_t serial;
};

void* stamped(std::size_t size, std::uint64_t owner, std::uint64_t serial) {
    void* m = msg_alloc(size);
    const stamp s{owner, serial};
    std::memcpy(m, &s, sizeof s);
    return m;
}

bool stamp_is(const void* m, std::uint64_t owner, std::uint64_t serial) {
    stamp s;
    std::memcpy(&s, m, sizeof s);
    return s.owner == owner && s.serial == serial;
}

TEST(remote_free, consumers_free_what_one_producer_allocated_and_nothing_is_lost) {
    constexpr int consumers = 4;
    constexpr int per_consumer = 2000;
    std::mutex mutex;
    std::vector<std::deque<void*>> inbox(consumers);
    std::atomic<int> done_producing{0};
    std::atomic<bool> ok{true};

    std::thread producer([&] {
        scoped_config config(pool_config(true, 16, 16));
        const std::size_t sizes[] = {64, 1500, 3000, 6000, 12000};
        for (int round = 0; round < 4; ++round) {  // four waves: entries are reused across them
            std::vector<std::thread> workers;
            for (int c = 0; c < consumers; ++c) {
                workers.emplace_back([&, c] {
                    for (int n = 0; n < per_consumer;) {
                        void* m = nullptr;
                        {
                            std::lock_guard lock(mutex);
                            if (!inbox[c].empty()) {
                                m = inbox[c].front();
                                inbox[c].pop_front();
                            }
                        }
                        if (m == nullptr) {
                            std::this_thread::yield();
                            continue;
                        }
                        stamp s;
                        std::memcpy(&s, m, sizeof s);
                        if (s.owner != 7) ok = false;
                        msg_free(m);
                        ++n;
                    }
                });
            }
            for (int n = 0; n < per_consumer; ++n) {
                for (int c = 0; c < consumers; ++c) {
                    void* m = stamped(sizes[(n + c) % 5], 7, n);
                    std::lock_guard lock(mutex);
                    inbox[c].push_back(m);
                }
                // Keep allocating while the consumers free: the owner's slow path collects
                // remote frees concurrently with the pushes.
            }
            for (auto& w : workers)
                w.join();
        }
        const pool_stats s = thread_pool_stats();
        EXPECT_EQ(s.live_blocks(), 0u);
        EXPECT_EQ(s.live_bytes(), 0u);
        EXPECT_EQ(s.remote_frees, 4u * consumers * per_consumer);
        // Everything came back, so a bucket's entries can all be taken again without growing.
        const std::size_t entries = s.buckets[0].entries;
        std::vector<void*> all;
        for (std::size_t i = 0; i < entries; ++i)
            all.push_back(msg_alloc(64));
        EXPECT_EQ(thread_pool_stats().buckets[0].entries, entries);
        EXPECT_EQ(std::set<void*>(all.begin(), all.end()).size(), entries) << "an entry twice";
        for (void* m : all)
            msg_free(m);
        done_producing = 1;
    });
    producer.join();
    EXPECT_TRUE(ok.load());
    EXPECT_EQ(done_producing.load(), 1);
}

TEST(remote_free, every_thread_frees_the_others_blocks_while_allocating_its_own) {
    constexpr int threads = 4;
    constexpr int rounds = 3000;
    std::mutex mutex;
    std::vector<std::vector<void*>> mailbox(threads);
    std::barrier sync(threads);
    std::atomic<int> torn{0};
    std::vector<pool_stats> final_stats(threads);

    auto body = [&](int me) {
        for (int r = 0; r < rounds; ++r) {
            void* m = stamped(64 + static_cast<std::size_t>(r % 9000), me, r);
            {
                std::lock_guard lock(mutex);
                mailbox[(me + 1) % threads].push_back(m);
            }
            std::vector<void*> mine;
            {
                std::lock_guard lock(mutex);
                mine.swap(mailbox[me]);
            }
            for (void* other : mine) {
                stamp s;
                std::memcpy(&s, other, sizeof s);
                if (s.owner != static_cast<std::uint64_t>((me + threads - 1) % threads)) ++torn;
                msg_free(other);
            }
        }
        sync.arrive_and_wait();  // every block has been sent
        std::vector<void*> rest;
        {
            std::lock_guard lock(mutex);
            rest.swap(mailbox[me]);
        }
        for (void* other : rest)
            msg_free(other);
        sync.arrive_and_wait();  // every block has been freed
        final_stats[me] = thread_pool_stats();
        sync.arrive_and_wait();  // nobody retires a pool before all have counted
    };
    const alloc_config saved = current_config();
    set_config(pool_config(true, 8, 8));
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
        pool.emplace_back(body, t);
    for (auto& t : pool)
        t.join();
    set_config(saved);
    EXPECT_EQ(torn.load(), 0);
    for (int t = 0; t < threads; ++t) {
        EXPECT_TRUE(final_stats[t].exists);
        EXPECT_EQ(final_stats[t].live_blocks(), 0u) << "thread " << t;
        EXPECT_EQ(final_stats[t].remote_frees, static_cast<std::size_t>(rounds)) << "thread " << t;
    }
}

TEST(remote_free, a_pool_outlives_its_thread_until_its_last_block_is_freed) {
    scoped_config config(pool_config(true, 4, 4));
    EXPECT_EQ(reclaim_retired_pools(), 0u);
    std::vector<void*> orphans;
    std::thread worker([&] {
        for (int i = 0; i < 10; ++i)
            orphans.push_back(stamped(200 * (i + 1), 3, i));
    });
    worker.join();
    EXPECT_EQ(reclaim_retired_pools(), 1u) << "the exited thread's pool waits for its blocks";
    for (std::size_t i = 0; i < orphans.size(); ++i) {
        EXPECT_TRUE(stamp_is(orphans[i], 3, i)) << "a retired pool handed a block out again";
        msg_free(orphans[i]);
    }
    EXPECT_EQ(reclaim_retired_pools(), 0u);
}

TEST(remote_free, a_thread_that_exits_with_no_live_block_leaves_nothing_behind) {
    scoped_config config(pool_config(true, 4, 4));
    std::thread worker([] { msg_free(msg_alloc(100)); });
    worker.join();
    EXPECT_EQ(reclaim_retired_pools(), 0u);
}

}  // namespace
}  // namespace coverse::alloc
