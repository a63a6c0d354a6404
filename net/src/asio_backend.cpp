// asio_backend: placeholder until the Asio stream backend lands.
#include <coverse/net/transport.hpp>

namespace coverse::net {
std::unique_ptr<backend> make_asio_backend(scheduler&, std::string* why) {
    if (why) *why = "the Asio stream backend is not built yet";
    return nullptr;
}
}  // namespace coverse::net
