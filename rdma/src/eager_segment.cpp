// The eager channel's shared segment (eager.hpp): layout, mapping, and the footer decoders
// (shared-memory slots, and the slots written by one-sided put).
#include <coverse/rdma/eager.hpp>

#include "shm_names.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <new>
#include <stdexcept>
#include <system_error>
#include <utility>

namespace coverse::rdma {

namespace {

constexpr std::uint32_t segment_version = 2;  // 2: footers in the slots, walked in turn

std::size_t freed_bytes(std::uint32_t slots) noexcept {
    return (std::size_t{slots} * sizeof(std::uint32_t) + 63) / 64 * 64;
}

std::uint32_t stride_for(std::uint32_t capacity) noexcept {
    return eager_slot_stride(capacity);
}

[[noreturn]] void fail(int err, const std::string& what) {
    throw std::system_error(err, std::generic_category(), what);
}

}  // namespace

eager_footer decode_eager_footer(std::uint64_t word, std::uint32_t capacity,
                                 eager_footer_error& error) noexcept {
    eager_footer f;
    f.sentinel = static_cast<std::uint16_t>(word & 0xFFFF);
    f.seq = static_cast<std::uint16_t>((word >> 16) & 0xFFFF);
    f.size = static_cast<std::uint32_t>(word >> 32);
    error = {};
    switch (f.sentinel) {
        case eager_sentinel::ready:
        case eager_sentinel::received:
        case eager_sentinel::free:
            break;
        case eager_sentinel::data:
            if (f.size == 0 || f.size > capacity)
                error = {f.size == 0 ? "an empty message" : "a size beyond the slot", f.size,
                         capacity};
            break;
        case eager_sentinel::skip:
            if (f.size != 0) error = {"a skip with a size", f.size, 0};
            break;
        default:
            error = {"an unknown sentinel", f.sentinel, 0};
    }
    return f;
}

eager_put_footer decode_eager_put_footer(std::uint64_t head, std::uint64_t word,
                                         std::uint32_t capacity,
                                         eager_footer_error& error) noexcept {
    eager_put_footer f;
    f.footer = decode_eager_footer(word << 16 | word >> 48, capacity, error);
    f.after = static_cast<std::uint32_t>(head);
    if (!error && f.footer.sentinel == eager_sentinel::skip)  // shared memory's only
        error = {"an unknown sentinel", f.footer.sentinel, 0};
    if (!error && (head >> 32) != 0) error = {"reserved bits set", head >> 32, 0};
    return f;
}

std::size_t eager_segment::size_for(std::uint32_t slots, std::uint32_t capacity) noexcept {
    return sizeof(eager_segment_header) + freed_bytes(slots) +
           std::size_t{slots} * stride_for(capacity);
}

eager_segment::eager_segment(std::string name, void* base, std::size_t bytes, bool linked) noexcept
    : _name(std::move(name)),
      _h(static_cast<eager_segment_header*>(base)),
      _bytes(bytes),
      _linked(linked) {
    _slots = _h->slots;
    _capacity = _h->capacity;
    _stride = _h->stride;
    auto* b = static_cast<std::byte*>(base) + sizeof(eager_segment_header);
    _freed = reinterpret_cast<std::atomic<std::uint32_t>*>(b);
    _slots_base = b + freed_bytes(_slots);
}

eager_segment::eager_segment(eager_segment&& o) noexcept
    : _name(std::move(o._name)),
      _h(std::exchange(o._h, nullptr)),
      _freed(o._freed),
      _slots_base(o._slots_base),
      _bytes(std::exchange(o._bytes, 0)),
      _slots(o._slots),
      _capacity(o._capacity),
      _stride(o._stride),
      _linked(std::exchange(o._linked, false)) {}

eager_segment& eager_segment::operator=(eager_segment&& o) noexcept {
    if (this != &o) {
        this->~eager_segment();
        new (this) eager_segment(std::move(o));
    }
    return *this;
}

eager_segment::~eager_segment() {
    unlink();
    if (_h) ::munmap(_h, _bytes);
}

void eager_segment::unlink() noexcept {
    if (_linked) {
        ::shm_unlink(_name.c_str());
        detail::forget_shm_name(_name);
    }
    _linked = false;
}

std::optional<std::uint32_t> eager_segment::slot_of(const void* p) const noexcept {
    const auto* b = static_cast<const std::byte*>(p);
    if (b < _slots_base) return std::nullopt;
    const auto off = static_cast<std::size_t>(b - _slots_base);
    if (off / _stride >= _slots) return std::nullopt;
    return static_cast<std::uint32_t>(off / _stride);
}

eager_segment eager_segment::create(const std::string& name, eager_kind kind, std::uint32_t slots,
                                    std::uint32_t capacity) {
    if (slots == 0 || slots > most_slots || capacity == 0 || capacity > largest_capacity)
        throw std::invalid_argument("eager channel " + name + ": " + std::to_string(slots) +
                                    " slots of " + std::to_string(capacity) +
                                    " bytes is outside 1..1024 slots of 1 B..1 GiB");
    const std::size_t bytes = size_for(slots, capacity);
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (const int e = errno; fd < 0)
        fail(e, "cannot create the eager channel " + name +
                    " (is /dev/shm mounted and writable? or ++set EAGER_PROTOCOL=off)");
    if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
        const int e = errno;
        ::close(fd);
        ::shm_unlink(name.c_str());
        fail(e, "cannot size the eager channel " + name + " to " + std::to_string(bytes) +
                    " bytes (is /dev/shm full? lower EAGER_SHORT_SLOTS or EAGER_LONG_BUFFERS)");
    }
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int e = errno;
    ::close(fd);
    if (p == MAP_FAILED) {
        ::shm_unlink(name.c_str());
        fail(e, "cannot map the eager channel " + name);
    }
    auto* h = new (p) eager_segment_header{};
    h->version = segment_version;
    h->slots = slots;
    h->capacity = capacity;
    h->kind = static_cast<std::uint32_t>(kind);
    h->stride = stride_for(capacity);
    h->sender.store(0, std::memory_order_relaxed);
    h->attached.store(0, std::memory_order_relaxed);
    h->receiver_stopped.store(0, std::memory_order_relaxed);
    h->delivered.store(0, std::memory_order_relaxed);
    eager_segment s(name, p, bytes, true);  // zeroed: no message freed, no mark names one
    for (std::uint32_t i = 0; i < slots; ++i)
        new (&s._freed[i]) std::atomic<std::uint32_t>(0);
    std::atomic_thread_fence(std::memory_order_release);
    h->magic = magic_value;
    detail::remember_shm_name(name, false);
    return s;
}

eager_segment eager_segment::open(const std::string& name, std::uint32_t slots,
                                  std::uint32_t capacity) {
    const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
    if (const int e = errno; fd < 0) fail(e, "cannot open the eager channel " + name);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int e = errno;
        ::close(fd);
        fail(e, "cannot inspect the eager channel " + name);
    }
    const auto bytes = static_cast<std::size_t>(st.st_size);
    if (slots == 0 || slots > most_slots || capacity == 0 || capacity > largest_capacity ||
        bytes != size_for(slots, capacity)) {
        ::close(fd);
        throw std::runtime_error("the eager channel " + name + " is " + std::to_string(bytes) +
                                 " bytes, not the " + std::to_string(slots) + " slots of " +
                                 std::to_string(capacity) + " bytes its receiver announced");
    }
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int e = errno;
    ::close(fd);
    if (p == MAP_FAILED) fail(e, "cannot map the eager channel " + name);
    auto* h = static_cast<eager_segment_header*>(p);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (h->magic != magic_value || h->version != segment_version || h->slots != slots ||
        h->capacity != capacity || h->stride != stride_for(capacity)) {
        ::munmap(p, bytes);
        throw std::runtime_error("the eager channel " + name +
                                 " does not hold the header its receiver announced");
    }
    return eager_segment(name, p, bytes, false);
}

}  // namespace coverse::rdma
