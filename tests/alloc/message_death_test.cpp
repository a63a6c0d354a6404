// Misuse of message memory aborts with a message naming the pointer: a double free, a pointer
// that msg_alloc never returned, misaligned owner storage. The death tests keep gtest's default
// "fast" style: a forked child has the parent's heap layout, so the pointer the child prints is
// the one the parent put in the expected message (a re-executed child would differ by ASLR).
#include <coverse/alloc/message.hpp>

#include "alloc_test_support.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace coverse::alloc {
namespace {

using test::pool_config;
using test::scoped_config;

// The pointer as the abort message prints it (%p).
std::string shown(const void* p) {
    char text[32];
    std::snprintf(text, sizeof text, "%p", p);
    return text;
}

class message_death : public testing::TestWithParam<bool> {
protected:
    scoped_config _config{pool_config(GetParam(), 2, 2)};
};

INSTANTIATE_TEST_SUITE_P(pool, message_death, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& p) {
                             return p.param ? "on" : "off";
                         });

TEST_P(message_death, double_free_names_the_pointer) {
    // Pooled: the header says "freed". System: under ASan the header is unaddressable; without
    // ASan malloc may have reused the freed header's bytes, so which message is best effort.
    for (std::size_t size : {100, 50000}) {
        EXPECT_DEATH(
            {
                void* m = msg_alloc(size);
                const std::string name = shown(m);
                std::fprintf(stderr, "pointer %s\n", name.c_str());
                msg_free(m);
                msg_free(m);
            },
            "msg_free\\(0x[0-9a-f]+\\): (double free|not a live coverse message|not a coverse "
            "message)")
            << "size " << size;
    }
}

TEST_P(message_death, double_free_of_a_pooled_message_says_double_free) {
    if (!GetParam()) GTEST_SKIP() << "a freed system block's header is not ours to read";
    void* probe = msg_alloc(100);
    const std::string name = shown(probe);
    msg_free(probe);
    // The next allocation of the same size reuses the same entry, so the address is known.
    EXPECT_DEATH(
        {
            void* m = msg_alloc(100);
            msg_free(m);
            msg_free(m);
        },
        "msg_free\\(" + name + "\\): double free");
}

TEST_P(message_death, freeing_foreign_heap_memory_names_the_pointer) {
    auto* block = static_cast<char*>(std::calloc(1, 256));
    void* inside = block + 64;  // header readable, but never written by msg_alloc
    EXPECT_DEATH(msg_free(inside), "msg_free\\(" + shown(inside) + "\\): not a coverse message");
    std::free(block);
}

TEST_P(message_death, freeing_a_plain_malloc_pointer_names_the_pointer) {
    void* plain = std::malloc(64);
    EXPECT_DEATH(msg_free(plain),
                 "msg_free\\(" + shown(plain) + "\\): not a (live )?coverse message");
    std::free(plain);
}

TEST_P(message_death, freeing_stack_memory_names_the_pointer) {
    alignas(16) unsigned char frame[128] = {};
    void* fake = frame + 64;
    EXPECT_DEATH(msg_free(fake), "msg_free\\(" + shown(fake) + "\\): not a coverse message");
}

TEST_P(message_death, misaligned_pointer_names_the_pointer) {
    void* m = msg_alloc(100);
    void* off = static_cast<char*>(m) + 1;
    EXPECT_DEATH(msg_free(off), "msg_free\\(" + shown(off) + "\\): not a coverse message");
    msg_free(m);
}

TEST_P(message_death, reference_and_size_check_too) {
    void* m = msg_alloc(100);
    msg_free(m);
    if (GetParam()) {
        EXPECT_DEATH(msg_reference(m), "msg_reference\\(" + shown(m) + "\\): double free");
        EXPECT_DEATH((void)msg_size(m), "msg_size\\(" + shown(m) + "\\): double free");
    }
    alignas(16) unsigned char frame[128] = {};
    EXPECT_DEATH((void)msg_size(frame + 64), "msg_size\\(0x[0-9a-f]+\\): not a coverse message");
}

TEST_P(message_death, misaligned_owner_storage_is_refused) {
    test::arena_owner owner(false);
    EXPECT_DEATH((void)place_message(static_cast<char*>(owner.storage()) + 8, 10, owner),
                 "place_message\\(0x[0-9a-f]+\\): storage for a message must be 16-byte aligned "
                 "\\(the owner 'test arena'");
}

}  // namespace
}  // namespace coverse::alloc
