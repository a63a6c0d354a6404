// transport: backend selection (COVERSE_NET_BACKEND, automatic fallback to Asio).
#include <coverse/net/transport.hpp>

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace coverse::net {

backend_kind backend_kind_from_env() {
    const char* v = std::getenv("COVERSE_NET_BACKEND");
    if (!v || !*v) return backend_kind::automatic;
    const std::string s(v);
    if (s == "auto") return backend_kind::automatic;
    if (s == "uring" || s == "io_uring") return backend_kind::io_uring;
    if (s == "asio") return backend_kind::asio;
    throw std::invalid_argument("coverse: COVERSE_NET_BACKEND=" + s +
                                " is not a backend; use uring, asio or auto");
}

std::unique_ptr<backend> make_backend(scheduler& sched, backend_kind kind, std::string* why) {
    std::string reason;
    switch (kind) {
        case backend_kind::io_uring: {
            auto b = make_uring_backend(sched, &reason);
            if (why) *why = b ? "net backend: io_uring (COVERSE_NET_BACKEND=uring)" : reason;
            return b;
        }
        case backend_kind::asio: {
            auto b = make_asio_backend(sched, &reason);
            if (why) *why = b ? "net backend: asio (COVERSE_NET_BACKEND=asio)" : reason;
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
