// libFuzzer target for the eager footer decoders (rdma/eager.hpp): the word a peer writes
// into a shared-memory slot, and the head and word it puts at the end of a put slot. Built
// and run by scripts/fuzz.sh (clang++ -fsanitize=fuzzer,address,undefined).
//
// Input: bytes 0..3 the slot's capacity (little-endian, taken mod 2^30, + 1), 4..11 a put
// footer's head, 12..19 its word (also decoded as a shared-memory footer word); shorter
// inputs are padded with zeros.
#include <coverse/rdma/eager.hpp>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace {

using namespace coverse::rdma;

void check(bool condition) {
    if (!condition) std::abort();  // libFuzzer reports the input that got here
}

bool known(std::uint16_t s) {
    return s == eager_sentinel::ready || s == eager_sentinel::data ||
           s == eager_sentinel::received || s == eager_sentinel::free || s == eager_sentinel::skip;
}

// What every decoded footer that passed must satisfy, and what every refusal must say.
void check_footer(const eager_footer& f, const eager_footer_error& e, std::uint32_t capacity) {
    if (e) {
        check(!e.what.empty());
        return;
    }
    check(known(f.sentinel));
    if (f.sentinel == eager_sentinel::data) check(f.size >= 1 && f.size <= capacity);
    if (f.sentinel == eager_sentinel::skip) check(f.size == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::array<std::uint8_t, 20> in{};
    std::memcpy(in.data(), data, size < in.size() ? size : in.size());
    std::uint32_t capacity = 0;
    std::uint64_t head = 0, word = 0;
    std::memcpy(&capacity, in.data(), 4);
    std::memcpy(&head, in.data() + 4, 8);
    std::memcpy(&word, in.data() + 12, 8);
    capacity = capacity % eager_segment::largest_capacity + 1;

    eager_footer_error e;
    const eager_footer shm = decode_eager_footer(word, capacity, e);
    check_footer(shm, e, capacity);
    if (!e)  // a footer that passed is exactly what a sender writes for it
        check(shm.sentinel != eager_sentinel::data ||
              eager_footer::encode(shm.sentinel, shm.seq, shm.size) == word);

    eager_footer_error pe;
    const eager_put_footer put = decode_eager_put_footer(head, word, capacity, pe);
    check_footer(put.footer, pe, capacity);
    if (!pe) {
        check((head >> 32) == 0 && put.after == static_cast<std::uint32_t>(head));
        if (put.footer.sentinel == eager_sentinel::data) {
            check(eager_put_word(put.footer.sentinel, put.footer.seq, put.footer.size) == word);
            // Its message fits the slot in front of the footer, with room for the alloc header.
            const std::uint32_t stride = eager_slot_stride(capacity);
            const std::uint32_t at = eager_message_offset(stride, put.footer.size);
            check(at >= 32 && at % 16 == 0 && at + put.footer.size <= stride - 16);
        }
    }
    return 0;
}
