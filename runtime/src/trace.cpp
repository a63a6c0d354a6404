// trace: the per-PE binary event file writer and its reader.
#include <coverse/runtime/trace.hpp>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <system_error>

namespace coverse::trace {

namespace {
constexpr char magic[8] = {'C', 'V', 'T', 'R', 'A', 'C', 'E', '\0'};

std::uint64_t steady_ns() noexcept {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count());
}
}  // namespace

sink::sink(const std::string& dir, std::uint32_t pe, std::size_t buffer_events)
    : _path(dir + "/coverse-trace." + std::to_string(pe) + ".bin"), _pe(pe) {
    _file = std::fopen(_path.c_str(), "wb");
    if (!_file)
        throw std::system_error(errno, std::generic_category(),
                                "coverse: cannot open trace file " + _path +
                                    " (does COVERSE_TRACE name a writable directory?)");
    _buffer.reserve(buffer_events ? buffer_events : 1);
    file_header h{};
    std::memcpy(h.magic, magic, sizeof magic);
    h.version = file_version;
    h.pe = pe;
    h.event_size = sizeof(event);
    h.steady_ref_ns = steady_ns();
    h.realtime_ref_ns =
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count());
    std::fwrite(&h, sizeof h, 1, _file);
}

sink::~sink() {
    flush();
    std::fclose(_file);
}

void sink::write(kind k, std::uint64_t object, std::uint64_t a, std::uint64_t b) noexcept {
    _buffer.push_back(event{steady_ns(), _pe, static_cast<std::uint16_t>(k), 0, object, a, b});
    ++_written;
    if (_buffer.size() == _buffer.capacity()) flush();
}

void sink::flush() noexcept {
    if (!_buffer.empty()) std::fwrite(_buffer.data(), sizeof(event), _buffer.size(), _file);
    _buffer.clear();
    std::fflush(_file);
}

file_contents read_file(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f)
        throw std::runtime_error("coverse-trace: cannot open " + path + ": " +
                                 std::strerror(errno));
    file_contents out{};
    auto fail = [&](const std::string& what, long offset) {
        std::fclose(f);
        throw std::runtime_error("coverse-trace: " + path + " at byte " + std::to_string(offset) +
                                 ": " + what);
    };
    if (std::fread(&out.header, sizeof out.header, 1, f) != 1)
        fail("file shorter than its 40-byte header", 0);
    if (std::memcmp(out.header.magic, magic, sizeof magic) != 0)
        fail("not a coverse trace file (bad magic)", 0);
    if (out.header.version != file_version)
        fail("unsupported trace version " + std::to_string(out.header.version), 8);
    if (out.header.event_size != sizeof(event))
        fail("event size " + std::to_string(out.header.event_size) + ", expected 40", 16);
    event e{};
    std::size_t n;
    while ((n = std::fread(&e, 1, sizeof e, f)) == sizeof e)
        out.events.push_back(e);
    out.truncated_bytes = n;
    std::fclose(f);
    return out;
}

}  // namespace coverse::trace
