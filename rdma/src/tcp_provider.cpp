// tcp_provider (see tcp.hpp). Everything runs on the PE's scheduler thread: requests are
// served from the connection's reader, data frames are posted on the connection's writer
// straight from registered memory, and placement happens in the reader before each
// payload is received.
#include <coverse/rdma/tcp.hpp>

#include <cerrno>
#include <cstring>
#include <string>

namespace coverse::rdma {

tcp_provider::tcp_provider(net::mesh& mesh, std::size_t chunk, alloc::rcache_config cache)
    : provider(cache),
      _mesh(mesh),
      _chunk(std::max<std::size_t>(1, std::min<std::size_t>(chunk, mesh.config().max_payload))) {}

tcp_provider::~tcp_provider() {
    // Our registrations go before the cache that holds them (the base class) goes.
    cache().release_unused();
}

capabilities tcp_provider::caps() const noexcept {
    capabilities c;
    c.max_transfer = _chunk;
    c.put_in_order = true;  // the data frames are received in order, on this PE's own thread
    return c;
}

std::error_code tcp_provider::register_memory(std::byte* address, std::size_t length,
                                              registration& out) {
    out.key = _next_key++;
    _regions.emplace(out.key, region{reinterpret_cast<std::uintptr_t>(address), length});
    return {};
}

void tcp_provider::deregister_memory(registration& r) noexcept {
    _regions.erase(r.key);
}

// [address, address + size) inside the registration `key`, or null.
std::byte* tcp_provider::checked_range(std::uint64_t key, std::uint64_t address,
                                       std::uint64_t size) const noexcept {
    const auto it = _regions.find(key);
    if (it == _regions.end()) return nullptr;
    const region& r = it->second;
    if (address < r.begin || size > r.length || address - r.begin > r.length - size) return nullptr;
    return reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(address));
}

void tcp_provider::post_get(std::uint32_t pe, std::span<std::byte> local, remote_memory remote,
                            op_completion& done) {
    const std::uint32_t id = _next_id++;
    if (_next_id == 0) _next_id = 1;
    _gets.emplace(id, get_op{&done, pe, local.data(), local.size()});
    const int rc = post_control(
        pe, net::frame_type::rma_get_request,
        net::encode(net::rma_request_payload{remote.address, remote.key, local.size(), id}));
    if (rc < 0)
        fail_get(id, {op_status::peer_lost, "the connection to PE " + std::to_string(pe) +
                                                " is down: " + std::strerror(-rc)});
}

// A small control frame whose bytes the connection's writer owns until it is sent.
int tcp_provider::post_control(std::uint32_t pe, net::frame_type type,
                               std::span<const std::byte> payload) {
    auto* copy = new std::vector<std::byte>(payload.begin(), payload.end());
    net::frame_header h;
    h.type = type;
    const int rc = _mesh.post(
        pe, h, *copy, [](void* ctx, int) { delete static_cast<std::vector<std::byte>*>(ctx); },
        copy);
    if (rc < 0) delete copy;
    return rc;
}

void tcp_provider::fail_get(std::uint32_t id, op_result r) {
    const auto it = _gets.find(id);
    if (it == _gets.end()) return;
    op_completion* done = it->second.done;
    _gets.erase(it);
    done->complete(std::move(r));
}

void tcp_provider::post_put(std::uint32_t pe, std::span<const std::byte> local,
                            remote_memory remote, op_completion& done) {
    const std::uint32_t id = _next_id++;
    if (_next_id == 0) _next_id = 1;
    _puts.emplace(id, put_op{&done, pe});
    const int rc = post_control(
        pe, net::frame_type::rma_put_request,
        net::encode(net::rma_request_payload{remote.address, remote.key, local.size(), id}));
    if (rc < 0) {
        _puts.erase(id);
        done.complete({op_status::peer_lost, "the connection to PE " + std::to_string(pe) +
                                                 " is down: " + std::strerror(-rc)});
        return;
    }
    // The data follows on the same ordered connection; the target places it.
    post_data(pe, net::frame_type::rma_put_data, id, local.data(), local.size());
}

// Frames of at most _chunk bytes straight from `data`, which must stay valid until the
// peer has them (the get's owner or the put's requester holds it until then).
void tcp_provider::post_data(std::uint32_t pe, net::frame_type type, std::uint32_t id,
                             const std::byte* data, std::uint64_t size) {
    net::frame_header h;
    h.type = type;
    h.tag = id;
    for (std::uint64_t off = 0; off < size; off += _chunk) {
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(_chunk, size - off));
        const int rc = _mesh.post(
            pe, h, std::span<const std::byte>(data + off, n), [](void*, int) {}, nullptr);
        if (rc < 0) return;  // the connection failed: the peer loss reaches everyone waiting
    }
}

void tcp_provider::reply(std::uint32_t pe, std::uint32_t id, net::rma_op op,
                         net::rma_status status) {
    (void)post_control(pe, net::frame_type::rma_complete,
                       net::encode(net::rma_complete_payload{id, op, status}));
}

void tcp_provider::serve_get(std::uint32_t pe, const net::rma_request_payload& r) {
    const std::byte* src = checked_range(r.key, r.address, r.size);
    if (!src) {
        reply(pe, r.id, net::rma_op::get, net::rma_status::refused);
        return;
    }
    post_data(pe, net::frame_type::rma_get_reply, r.id, src, r.size);
}

void tcp_provider::start_put(std::uint32_t pe, const net::rma_request_payload& r) {
    incoming_put in;
    in.size = r.size;
    in.dest = checked_range(r.key, r.address, r.size);
    if (!in.dest) reply(pe, r.id, net::rma_op::put, net::rma_status::refused);
    _incoming[{pe, r.id}] = in;
}

std::byte* tcp_provider::place(std::uint32_t pe, const net::frame_header& h) noexcept {
    const std::uint64_t n = h.payload_length;
    if (h.type == net::frame_type::rma_get_reply) {
        const auto it = _gets.find(h.tag);
        if (it == _gets.end() || it->second.pe != pe) return nullptr;
        get_op& g = it->second;
        if (g.placed + n > g.size) return nullptr;  // more than asked for: take() reports it
        std::byte* at = g.dest + g.placed;
        g.placed += n;
        return at;
    }
    if (h.type == net::frame_type::rma_put_data) {
        const auto it = _incoming.find({pe, h.tag});
        if (it == _incoming.end() || !it->second.dest) return nullptr;
        incoming_put& in = it->second;
        if (in.placed + n > in.size) return nullptr;
        std::byte* at = in.dest + in.placed;
        in.placed += n;
        return at;
    }
    return nullptr;
}

void tcp_provider::take(std::uint32_t pe, net::frame& f) {
    const auto& h = f.header;
    const std::uint64_t n = h.payload_length;
    const bool placed = f.payload.get_deleter().release == &net::keep_placed_payload;
    switch (h.type) {
        case net::frame_type::rma_get_request:
        case net::frame_type::rma_put_request: {
            const auto d = net::decode_rma_request(f.payload_bytes(), h.type);
            if (!d.ok()) return;  // the reader validated it already
            if (h.type == net::frame_type::rma_get_request)
                serve_get(pe, d.value);
            else
                start_put(pe, d.value);
            return;
        }
        case net::frame_type::rma_get_reply: {
            const auto it = _gets.find(h.tag);
            if (it == _gets.end() || it->second.pe != pe || !placed) {
                // Bytes for a get we did not ask this peer for: our state and its disagree.
                if (it != _gets.end() && it->second.pe == pe)
                    fail_get(h.tag, {op_status::failed, "PE " + std::to_string(pe) +
                                                            " sent more bytes than get " +
                                                            std::to_string(h.tag) + " asked for"});
                return;
            }
            get_op& g = it->second;
            g.received += n;
            if (g.received == g.size) fail_get(h.tag, op_result{});
            return;
        }
        case net::frame_type::rma_put_data: {
            const auto it = _incoming.find({pe, h.tag});
            if (it == _incoming.end()) return;
            incoming_put& in = it->second;
            if (in.dest && !placed) {  // more bytes than the request said
                reply(pe, h.tag, net::rma_op::put, net::rma_status::refused);
                _incoming.erase(it);
                return;
            }
            in.received += n;  // a refused put's bytes are counted and dropped
            if (in.received < in.size) return;
            if (in.dest) reply(pe, h.tag, net::rma_op::put, net::rma_status::ok);
            _incoming.erase(it);
            return;
        }
        case net::frame_type::rma_complete: {
            const auto d = net::decode_rma_complete(f.payload_bytes());
            if (!d.ok()) return;
            const auto& c = d.value;
            const bool ok = c.status == net::rma_status::ok;
            op_result r;
            if (!ok)
                r = {op_status::refused, "PE " + std::to_string(pe) +
                                             " refused the request: it names memory that PE has "
                                             "not registered (a stale or forged key)"};
            if (c.op == net::rma_op::get) {
                if (!ok) fail_get(c.id, std::move(r));
                return;
            }
            const auto it = _puts.find(c.id);
            if (it == _puts.end() || it->second.pe != pe) return;
            op_completion* done = it->second.done;
            _puts.erase(it);
            done->complete(std::move(r));
            return;
        }
        default:
            return;
    }
}

void tcp_provider::peer_lost(std::uint32_t pe) {
    std::vector<op_completion*> lost;
    for (auto it = _gets.begin(); it != _gets.end();) {
        if (it->second.pe == pe) {
            lost.push_back(it->second.done);
            it = _gets.erase(it);
        } else {
            ++it;
        }
    }
    for (auto it = _puts.begin(); it != _puts.end();) {
        if (it->second.pe == pe) {
            lost.push_back(it->second.done);
            it = _puts.erase(it);
        } else {
            ++it;
        }
    }
    for (auto it = _incoming.begin(); it != _incoming.end();)
        it = it->first.first == pe ? _incoming.erase(it) : std::next(it);
    for (op_completion* c : lost)
        c->complete({op_status::peer_lost, "PE " + std::to_string(pe) + " is gone"});
}

}  // namespace coverse::rdma
