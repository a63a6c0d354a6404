// reactor: io_uring ring setup (best flags the kernel accepts), submission with
// back-pressure, and completion dispatch.
#include <coverse/runtime/reactor.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace coverse {

namespace {
// Tag bit in user_data: background requests (see prepare_background). Completion objects
// are at least 8-byte aligned, so the low bit is free.
constexpr std::uint64_t background_tag = 1;

struct setup_attempt {
    unsigned flags;
    const char* name;
};
// From the most to the least capable. DEFER_TASKRUN runs completion work only when we
// enter the kernel, which our loop does anyway, and avoids interrupting the PE's thread.
// TASKRUN_FLAG makes the kernel say in the shared ring (IORING_SQ_TASKRUN) that such work
// waits, so a spinning loop enters the kernel only when it would find something.
constexpr setup_attempt setup_attempts[] = {
    {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_TASKRUN_FLAG |
         IORING_SETUP_SUBMIT_ALL,
     "single_issuer+defer_taskrun+taskrun_flag"},
    {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_SUBMIT_ALL,
     "single_issuer+defer_taskrun"},
    {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG |
         IORING_SETUP_SUBMIT_ALL,
     "single_issuer+coop_taskrun+taskrun_flag"},
    {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SUBMIT_ALL,
     "single_issuer+coop_taskrun"},
    {IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SUBMIT_ALL, "coop_taskrun"},
    {IORING_SETUP_SUBMIT_ALL, "submit_all"},
    {0, "plain"},
};
}  // namespace

std::unique_ptr<reactor> reactor::create(unsigned entries, std::string* why) {
    std::unique_ptr<reactor> r(new reactor());
    int last = 0;
    for (const auto& a : setup_attempts) {
        io_uring_params p{};
        p.flags = a.flags;
        last = io_uring_queue_init_params(entries, &r->_ring, &p);
        if (last == 0) {
            auto& f = r->_features;
            f.single_issuer = a.flags & IORING_SETUP_SINGLE_ISSUER;
            f.defer_taskrun = a.flags & IORING_SETUP_DEFER_TASKRUN;
            f.coop_taskrun = a.flags & IORING_SETUP_COOP_TASKRUN;
            f.submit_all = a.flags & IORING_SETUP_SUBMIT_ALL;
            f.taskrun_flag = a.flags & IORING_SETUP_TASKRUN_FLAG;
            f.ext_arg = p.features & IORING_FEAT_EXT_ARG;
            f.nodrop = p.features & IORING_FEAT_NODROP;
            f.fast_poll = p.features & IORING_FEAT_FAST_POLL;
            f.entries = p.sq_entries;
            if (io_uring_probe* probe = io_uring_get_probe_ring(&r->_ring)) {
                f.send_zc = io_uring_opcode_supported(probe, IORING_OP_SEND_ZC);
                io_uring_free_probe(probe);
            }
            // Provided-buffer rings: register a tiny one and drop it again.
            if (void* mem = std::aligned_alloc(4096, 4096)) {
                io_uring_buf_reg reg{};
                reg.ring_addr = reinterpret_cast<std::uint64_t>(mem);
                reg.ring_entries = 8;
                reg.bgid = 0xfff0;
                if (io_uring_register_buf_ring(&r->_ring, &reg, 0) == 0) {
                    f.buf_ring = true;
                    io_uring_unregister_buf_ring(&r->_ring, 0xfff0);
                }
                std::free(mem);
            }
            return r;
        }
        // EINVAL: this kernel does not know a flag; try the next set. Anything else
        // (ENOSYS, EPERM from seccomp or kernel.io_uring_disabled, ENOMEM) is final.
        if (last != -EINVAL) break;
    }
    if (why) {
        *why = std::string("io_uring_setup failed: ") + std::strerror(-last);
        if (last == -EPERM || last == -ENOSYS)
            *why += " (io_uring is disabled here: seccomp profile or kernel.io_uring_disabled)";
        else if (last == -ENOMEM)
            *why += " (raise the locked-memory limit: ulimit -l)";
    }
    return nullptr;
}

reactor::~reactor() {
    io_uring_queue_exit(&_ring);
}

io_uring_sqe* reactor::prepare_untracked() {
    for (;;) {
        if (io_uring_sqe* sqe = io_uring_get_sqe(&_ring)) {
            ++_unsubmitted;
            io_uring_sqe_set_data64(sqe, 0);
            return sqe;
        }
        // Submission queue full: back-pressure. Submit what is queued; if the kernel
        // refuses for lack of completion space, reap and try again.
        submit_pending();
        if (io_uring_sq_space_left(&_ring) == 0) reap();
    }
}

io_uring_sqe* reactor::prepare(completion* c) {
    io_uring_sqe* sqe = prepare_untracked();
    io_uring_sqe_set_data(sqe, c);
    ++_in_flight;
    return sqe;
}

io_uring_sqe* reactor::prepare_background(completion* c) {
    io_uring_sqe* sqe = prepare_untracked();
    io_uring_sqe_set_data64(sqe, reinterpret_cast<std::uint64_t>(c) | background_tag);
    ++_background;
    return sqe;
}

void reactor::cancel(completion* c) {
    // Match either tag: the caller does not need to know how the request was prepared.
    for (std::uint64_t tag : {std::uint64_t{0}, background_tag}) {
        io_uring_sqe* sqe = prepare_untracked();
        io_uring_prep_cancel64(sqe, reinterpret_cast<std::uint64_t>(c) | tag, 0);
        io_uring_sqe_set_data64(sqe, 0);
    }
}

void reactor::submit_pending() {
    if (_unsubmitted == 0) return;
    int r = io_uring_submit(&_ring);
    if (r >= 0) {
        _unsubmitted = 0;
        return;
    }
    if (r == -EBUSY || r == -EAGAIN || r == -EINTR) {
        reap();  // completion queue overflow or a signal: make room, the caller retries
        return;
    }
    std::fprintf(stderr, "coverse: io_uring_submit failed: %s\n", std::strerror(-r));
    std::abort();
}

unsigned reactor::reap() {
    // Copy a batch out before dispatching: a completion may prepare new requests, which
    // may submit and reap again.
    struct item {
        std::uint64_t data;
        int res;
        std::uint32_t flags;
    };
    unsigned total = 0;
    for (;;) {
        item batch[64];
        unsigned n = 0;
        io_uring_cqe* cqe = nullptr;
        unsigned head = 0;
        io_uring_for_each_cqe(&_ring, head, cqe) {
            batch[n++] = {cqe->user_data, cqe->res, cqe->flags};
            if (n == 64) break;
        }
        if (n == 0) return total;
        io_uring_cq_advance(&_ring, n);
        total += n;
        for (unsigned i = 0; i < n; ++i) {
            const item& it = batch[i];
            // 0: untracked; LIBURING_UDATA_TIMEOUT: liburing's own timeout entry on
            // kernels without EXT_ARG.
            if (it.data == 0 || it.data == LIBURING_UDATA_TIMEOUT) continue;
            const bool more = it.flags & IORING_CQE_F_MORE;
            if (!more) {
                if (it.data & background_tag)
                    --_background;
                else
                    --_in_flight;
            }
            reinterpret_cast<completion*>(it.data & ~background_tag)->complete(it.res, it.flags);
        }
    }
}

bool reactor::poll() {
    if (_in_flight == 0 && _unsubmitted == 0) {
        // Nothing the loop waits for: only look at completions already posted.
        return io_uring_cq_ready(&_ring) != 0 && reap() != 0;
    }
    if (_unsubmitted == 0 && !kernel_has_work()) {
        // The kernel says in the ring that no task_work waits and the completion queue did
        // not overflow: entering it (1-2 µs) would find nothing, so only read the ring.
        return io_uring_cq_ready(&_ring) != 0 && reap() != 0;
    }
    int r = io_uring_submit_and_get_events(&_ring);
    if (r >= 0) _unsubmitted = 0;
    return reap() != 0;
}

bool reactor::wait(std::chrono::nanoseconds timeout) {
    io_uring_cqe* cqe = nullptr;
    __kernel_timespec ts{};
    __kernel_timespec* tsp = nullptr;
    if (timeout.count() >= 0) {
        ts.tv_sec = timeout.count() / 1'000'000'000;
        ts.tv_nsec = timeout.count() % 1'000'000'000;
        tsp = &ts;
    }
    int r = io_uring_submit_and_wait_timeout(&_ring, &cqe, 1, tsp, nullptr);
    if (r >= 0 || r == -ETIME) _unsubmitted = 0;
    return reap() != 0;
}

bool reactor::drain(std::chrono::nanoseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    submit_pending();
    while (in_flight() > 0) {
        const auto left = end - std::chrono::steady_clock::now();
        if (left <= std::chrono::nanoseconds::zero()) return false;
        wait(std::chrono::duration_cast<std::chrono::nanoseconds>(left));
    }
    return true;
}

std::vector<std::string> reactor::feature_names(const reactor_features& f) {
    std::vector<std::string> names;
    auto add = [&](bool on, const char* name) {
        if (on) names.emplace_back(name);
    };
    add(f.single_issuer, "single_issuer");
    add(f.defer_taskrun, "defer_taskrun");
    add(f.coop_taskrun, "coop_taskrun");
    add(f.submit_all, "submit_all");
    add(f.taskrun_flag, "taskrun_flag");
    add(f.ext_arg, "ext_arg");
    add(f.nodrop, "nodrop");
    add(f.fast_poll, "fast_poll");
    add(f.send_zc, "send_zc");
    add(f.buf_ring, "buf_ring");
    return names;
}

std::string reactor::describe() const {
    std::string s = "io_uring: entries=" + std::to_string(_features.entries);
    for (const auto& name : feature_names(_features))
        (s += ' ') += name;
    return s;
}

}  // namespace coverse
