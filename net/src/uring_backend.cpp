// uring_backend: placeholder until the io_uring stream backend lands.
#include <coverse/net/transport.hpp>

namespace coverse::net {
std::unique_ptr<backend> make_uring_backend(scheduler&, std::string* why) {
    if (why) *why = "the io_uring stream backend is not built yet";
    return nullptr;
}
}  // namespace coverse::net
