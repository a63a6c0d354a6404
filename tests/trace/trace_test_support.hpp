// Shared by the coverse-trace tests: a temporary trace directory per test, threads that
// record as PEs through the real session API, a hand-written file writer for traces the
// recorder cannot produce (chosen clocks, damage), and a small strict JSON parser.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <coverse/runtime/trace.hpp>

#include "trace_cli.hpp"
#include "trace_model.hpp"

namespace coverse::test {

namespace fs = std::filesystem;
using trace::kind;

class trace_dir_test : public ::testing::Test {
protected:
    void SetUp() override {
        dir = fs::temp_directory_path() /
              ("coverse-trace-tool-" + std::to_string(::getpid()) + "-" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir);
        fs::create_directories(dir);
    }
    void TearDown() override { fs::remove_all(dir); }

    struct cli_result {
        int status;
        std::string out, err;
    };
    cli_result cli(std::vector<std::string> args) {
        std::ostringstream out, err;
        const int rc = trace_tool::run_cli(args, out, err);
        return {rc, out.str(), err.str()};
    }

    fs::path dir;
};

inline trace::session_info pe_info(std::uint32_t pe, std::uint32_t num_pes) {
    return {pe, num_pes, "io_uring", "none", "COVERSE_TEST=1\nPE=" + std::to_string(pe) + "\n"};
}

inline trace::record_options opts_for(const fs::path& dir) {
    trace::record_options o;
    o.dir = dir.string();
    o.chunk_events = 16;  // small: the writer thread gets many chunks...
    o.max_chunks = 128;   // ...and a burst of 2048 events from a test thread still fits
    return o;
}

/// Runs one body per PE, each on its own thread with a session installed: the threads act
/// as the PEs of a job. Joins them all.
inline void run_pes(const fs::path& dir, std::vector<std::function<void()>> bodies,
                    trace::record_options opts = {}) {
    if (opts.dir.empty()) opts = opts_for(dir);
    std::vector<std::thread> threads;
    const auto n = static_cast<std::uint32_t>(bodies.size());
    for (std::uint32_t pe = 0; pe < n; ++pe)
        threads.emplace_back([&, pe] {
            trace::session s(pe_info(pe, n), opts);
            bodies[pe]();
        });
    for (auto& t : threads)
        t.join();
}

/// A blocking queue of message sequence numbers between two PE threads, so a receive is
/// emitted only after its send (as on a real wire).
class wire {
public:
    void push(std::uint32_t seq) {
        {
            std::lock_guard lock(_mu);
            _q.push_back(seq);
        }
        _cv.notify_one();
    }
    std::uint32_t pop() {
        std::unique_lock lock(_mu);
        _cv.wait(lock, [&] { return !_q.empty(); });
        const auto v = _q.front();
        _q.pop_front();
        return v;
    }

private:
    std::mutex _mu;
    std::condition_variable _cv;
    std::deque<std::uint32_t> _q;
};

inline void spin_for(std::chrono::nanoseconds d) {
    const auto until = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < until) {
    }
}

/// Emits a whole send handle's life on the calling PE: allocated, completed, released,
/// each state held for a microsecond (so no two transitions share a timestamp).
inline void send_life(std::uint64_t id, std::uint32_t to, std::uint32_t seq, std::uint32_t bytes,
                      trace::protocol p, bool release = true) {
    trace::emit_handle_allocated(id, {seq, bytes, to, trace::direction::send, p});
    spin_for(std::chrono::microseconds(1));
    trace::emit(kind::handle_completed, id);
    spin_for(std::chrono::microseconds(1));
    if (release) trace::emit(kind::handle_released, id);
}
inline void receive_life(std::uint64_t id, std::uint32_t from, std::uint32_t seq,
                         std::uint32_t bytes, trace::protocol p, bool release = true) {
    trace::emit_handle_allocated(id, {seq, bytes, from, trace::direction::receive, p});
    spin_for(std::chrono::microseconds(1));
    trace::emit(kind::handle_completed, id);
    spin_for(std::chrono::microseconds(1));
    if (release) trace::emit(kind::handle_released, id);
}

/// A 2-PE ping-pong of `rounds` round trips: PE 0 sends seq k to PE 1, PE 1 answers with
/// its own seq k. Phases 1-3 at start-up and 4 at the end. `leak_last` leaves PE 1's last
/// receive handle unreleased.
inline void pingpong(const fs::path& dir, std::uint32_t rounds, trace::protocol p,
                     bool leak_last = false, trace::record_options opts = {}) {
    wire to1, to0;
    const auto startup = [] {
        for (std::uint64_t ph : {1, 2, 3}) {
            trace::emit(kind::phase_begin, ph);
            trace::emit(kind::phase_end, ph);
        }
    };
    run_pes(dir,
            {[&] {
                 startup();
                 for (std::uint32_t k = 0; k < rounds; ++k) {
                     send_life(trace::handle_id(1, 2 * k), 1, k, 64, p);
                     to1.push(k);
                     const auto seq = to0.pop();
                     receive_life(trace::handle_id(1, 2 * k + 1), 1, seq, 64, p);
                 }
                 trace::emit(kind::phase_begin, 4);
                 trace::emit(kind::phase_end, 4);
             },
             [&] {
                 startup();
                 for (std::uint32_t k = 0; k < rounds; ++k) {
                     const auto seq = to1.pop();
                     receive_life(trace::handle_id(1, 2 * k), 0, seq, 64, p,
                                  !(leak_last && k + 1 == rounds));
                     send_life(trace::handle_id(1, 2 * k + 1), 0, k, 64, p);
                     to0.push(k);
                 }
                 trace::emit(kind::phase_begin, 4);
                 trace::emit(kind::phase_end, 4);
             }},
            opts);
}

/// Writes a version-2 trace file by hand, following docs/trace.md: header, info records,
/// events. Returns its path.
struct raw_file {
    std::uint32_t pe = 0;
    std::uint64_t steady_ref = 1'000'000;
    std::uint64_t realtime_ref = 1'700'000'000'000'000'000ull;
    std::string backend = "io_uring";
    trace::file_state state = trace::file_state::closed;
    std::vector<trace::event> events;

    /// Adds an event at `t` ns after the clock reference.
    raw_file& add(std::uint64_t t, kind k, std::uint64_t object, std::uint64_t a = 0,
                  std::uint64_t b = 0) {
        events.push_back({steady_ref + t, pe, static_cast<std::uint16_t>(k), 0, object, a, b});
        return *this;
    }

    std::string write(const fs::path& dir) const {
        std::vector<unsigned char> bytes(sizeof(trace::file_header));
        const auto record = [&](trace::info_tag tag, const void* p, std::size_t n) {
            trace::info_record_header h{static_cast<std::uint16_t>(tag), 0,
                                        static_cast<std::uint32_t>(n)};
            const auto at = bytes.size();
            bytes.resize(at + sizeof h + ((n + 7) & ~std::size_t{7}), 0);
            std::memcpy(bytes.data() + at, &h, sizeof h);
            std::memcpy(bytes.data() + at + sizeof h, p, n);
        };
        record(trace::info_tag::backend, backend.data(), backend.size());
        const std::uint32_t pes[2] = {2, 0};
        record(trace::info_tag::pes, pes, sizeof pes);
        const std::uint16_t future[3] = {7, 7, 7};  // a tag from a newer writer: skipped
        record(static_cast<trace::info_tag>(999), future, sizeof future);
        trace::progress_record prog{};
        prog.events_written = events.size();
        prog.end_ns = events.empty() ? steady_ref : events.back().ts_ns;
        prog.state = static_cast<std::uint32_t>(state);
        record(trace::info_tag::progress, &prog, sizeof prog);
        trace::file_header h{};
        std::memcpy(h.magic, "CVTRACE", 8);
        h.version = 2;
        h.pe = pe;
        h.event_size = sizeof(trace::event);
        h.header_size = static_cast<std::uint32_t>(bytes.size());
        h.steady_ref_ns = steady_ref;
        h.realtime_ref_ns = realtime_ref;
        std::memcpy(bytes.data(), &h, sizeof h);
        const auto path = (dir / trace::file_name(pe)).string();
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        f.write(reinterpret_cast<const char*>(bytes.data()),
                static_cast<std::streamsize>(bytes.size()));
        f.write(reinterpret_cast<const char*>(events.data()),
                static_cast<std::streamsize>(events.size() * sizeof(trace::event)));
        return path;
    }
};

// ---- a small strict JSON parser (RFC 8259 subset enough for checking exports) -----------

struct json;
using json_object = std::map<std::string, json>;
using json_array = std::vector<json>;
struct json {
    std::variant<std::nullptr_t, bool, double, std::string, json_array, json_object> v;

    bool is_object() const { return std::holds_alternative<json_object>(v); }
    bool is_array() const { return std::holds_alternative<json_array>(v); }
    bool is_string() const { return std::holds_alternative<std::string>(v); }
    bool is_number() const { return std::holds_alternative<double>(v); }
    const json_object& object() const { return std::get<json_object>(v); }
    const json_array& array() const { return std::get<json_array>(v); }
    const std::string& str() const { return std::get<std::string>(v); }
    double num() const { return std::get<double>(v); }
    bool has(const std::string& k) const { return is_object() && object().count(k) > 0; }
    const json& operator[](const std::string& k) const { return object().at(k); }
};

class json_parser {
public:
    explicit json_parser(const std::string& text) : _s(text) {}
    json parse() {
        json j = value();
        ws();
        if (_i != _s.size()) fail("trailing characters");
        return j;
    }

private:
    [[noreturn]] void fail(const std::string& why) {
        throw std::runtime_error("JSON error at byte " + std::to_string(_i) + ": " + why);
    }
    void ws() {
        while (_i < _s.size() &&
               (_s[_i] == ' ' || _s[_i] == '\n' || _s[_i] == '\t' || _s[_i] == '\r'))
            ++_i;
    }
    bool eat(char c) {
        ws();
        if (_i < _s.size() && _s[_i] == c) {
            ++_i;
            return true;
        }
        return false;
    }
    json value() {
        ws();
        if (_i >= _s.size()) fail("unexpected end");
        const char c = _s[_i];
        if (c == '{') return object();
        if (c == '[') return array();
        if (c == '"') return json{string()};
        if (_s.compare(_i, 4, "true") == 0) return _i += 4, json{true};
        if (_s.compare(_i, 5, "false") == 0) return _i += 5, json{false};
        if (_s.compare(_i, 4, "null") == 0) return _i += 4, json{nullptr};
        return number();
    }
    json object() {
        ++_i;
        json_object o;
        if (eat('}')) return json{o};
        do {
            ws();
            if (_i >= _s.size() || _s[_i] != '"') fail("expected a key");
            std::string k = string();
            if (!eat(':')) fail("expected ':'");
            if (o.count(k)) fail("duplicate key " + k);
            o.emplace(std::move(k), value());
        } while (eat(','));
        if (!eat('}')) fail("expected '}'");
        return json{o};
    }
    json array() {
        ++_i;
        json_array a;
        if (eat(']')) return json{a};
        do
            a.push_back(value());
        while (eat(','));
        if (!eat(']')) fail("expected ']'");
        return json{a};
    }
    std::string string() {
        ++_i;
        std::string out;
        while (_i < _s.size() && _s[_i] != '"') {
            const auto c = static_cast<unsigned char>(_s[_i]);
            if (c < 0x20) fail("control character in string");
            if (c == '\\') {
                ++_i;
                if (_i >= _s.size()) fail("unterminated escape");
                const char e = _s[_i];
                if (e == 'u') {
                    if (_i + 4 >= _s.size()) fail("short \\u escape");
                    for (int k = 1; k <= 4; ++k)
                        if (!std::isxdigit(static_cast<unsigned char>(_s[_i + k])))
                            fail("bad \\u escape");
                    out += '?';
                    _i += 4;
                } else if (std::strchr("\"\\/bfnrt", e)) {
                    out += e;
                } else {
                    fail("bad escape");
                }
                ++_i;
                continue;
            }
            out += static_cast<char>(c);
            ++_i;
        }
        if (_i >= _s.size()) fail("unterminated string");
        ++_i;
        return out;
    }
    json number() {
        const std::size_t start = _i;
        if (_i < _s.size() && _s[_i] == '-') ++_i;
        if (_i >= _s.size() || !std::isdigit(static_cast<unsigned char>(_s[_i])))
            fail("expected a value");
        if (_s[_i] == '0' && _i + 1 < _s.size() &&
            std::isdigit(static_cast<unsigned char>(_s[_i + 1])))
            fail("leading zero");
        while (_i < _s.size() && std::isdigit(static_cast<unsigned char>(_s[_i])))
            ++_i;
        if (_i < _s.size() && _s[_i] == '.') {
            ++_i;
            if (_i >= _s.size() || !std::isdigit(static_cast<unsigned char>(_s[_i])))
                fail("digit expected after '.'");
            while (_i < _s.size() && std::isdigit(static_cast<unsigned char>(_s[_i])))
                ++_i;
        }
        if (_i < _s.size() && (_s[_i] == 'e' || _s[_i] == 'E')) {
            ++_i;
            if (_i < _s.size() && (_s[_i] == '+' || _s[_i] == '-')) ++_i;
            while (_i < _s.size() && std::isdigit(static_cast<unsigned char>(_s[_i])))
                ++_i;
        }
        return json{std::stod(_s.substr(start, _i - start))};
    }

    const std::string& _s;
    std::size_t _i = 0;
};

inline std::string read_text(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

}  // namespace coverse::test
