// transport: backend selection (the NET_BACKEND setting, automatic fallback to Asio).
#include <coverse/net/transport.hpp>

#include <stdexcept>
#include <string>

#include <coverse/alloc/config.hpp>

namespace coverse::net {

backend_kind backend_kind_from_env() {
    const auto v = alloc::env_setting("NET_BACKEND");
    if (!v) return backend_kind::automatic;
    const std::string& s = v->value;
    if (s == "auto") return backend_kind::automatic;
    if (s == "uring" || s == "io_uring") return backend_kind::io_uring;
    if (s == "asio") return backend_kind::asio;
    throw std::invalid_argument("coverse: " + v->variable + "=" + s +
                                " is not a backend; use uring, asio or auto");
}

backend_report describe_backend_choice(scheduler& sched) {
    backend_report report;
    try {
        if (const auto v = alloc::env_setting("NET_BACKEND"))
            report.asked_by = v->variable + "=" + v->value;
        auto b = make_backend(sched, backend_kind_from_env(), &report.why);
        if (b) {
            report.name = std::string(b->name());
            report.details = b->describe();
        }
    } catch (const std::exception& e) {
        // A malformed setting (NET_BACKEND, ZC_THRESHOLD, ...) is what there is to report.
        report.why = e.what();
    }
    return report;
}

std::unique_ptr<backend> make_backend(scheduler& sched, backend_kind kind, std::string* why) {
    std::string reason;
    switch (kind) {
        case backend_kind::io_uring: {
            auto b = make_uring_backend(sched, &reason);
            if (why) *why = b ? "net backend: io_uring (NET_BACKEND=uring)" : reason;
            return b;
        }
        case backend_kind::asio: {
            auto b = make_asio_backend(sched, &reason);
            if (why) *why = b ? "net backend: asio (NET_BACKEND=asio)" : reason;
            return b;
        }
        case backend_kind::automatic:
            break;
    }
    if (auto b = make_uring_backend(sched, &reason)) {
        if (why) *why = "net backend: io_uring";
        return b;
    }
    std::string asio_reason;
    auto b = make_asio_backend(sched, &asio_reason);
    if (why)
        *why = b ? "net backend: asio, because io_uring is unavailable (" + reason + ")"
                 : "no net backend: io_uring: " + reason + "; asio: " + asio_reason;
    return b;
}

}  // namespace coverse::net
