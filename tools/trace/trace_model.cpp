// trace_model: loading and merging PEs' trace files, rebuilding lifecycles, and the text
// analyses (summary, info, leaks, stalls). The JSON export is in trace_export.cpp.
#include "trace_model.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <map>
#include <tuple>
#include <unordered_map>

namespace coverse::trace_tool {

namespace fs = std::filesystem;
using trace::kind;

namespace {

std::string fmt(const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
}

// Trace time as milliseconds with microsecond precision.
std::string format_time(std::uint64_t ns) {
    return fmt("%.3f ms", static_cast<double>(ns) / 1e6);
}

std::string hex_id(std::uint64_t id) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%016" PRIx64, id);
    return buf;
}

std::string format_bytes(std::uint64_t b) {
    if (b < 1024) return std::to_string(b) + " B";
    if (b < (1u << 20)) return fmt("%.1f KiB", static_cast<double>(b) / 1024);
    if (b < (1u << 30)) return fmt("%.1f MiB", static_cast<double>(b) / (1 << 20));
    return fmt("%.2f GiB", static_cast<double>(b) / (1 << 30));
}

std::string pad(std::string s, std::size_t width) {
    if (s.size() < width) s.append(width - s.size(), ' ');
    return s;
}
std::string rpad(std::string s, std::size_t width) {
    if (s.size() < width) s.insert(0, width - s.size(), ' ');
    return s;
}

// "coverse-trace.<digits>.bin" -> PE number
std::optional<std::uint32_t> pe_from_name(const std::string& name) {
    const std::string prefix = "coverse-trace.", suffix = ".bin";
    if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
        return std::nullopt;
    const std::string digits =
        name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    if (digits.empty() || digits.size() > 9 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return std::nullopt;
    return static_cast<std::uint32_t>(std::stoul(digits));
}

std::optional<handle_state> state_of(std::uint16_t k) {
    switch (static_cast<kind>(k)) {
        case kind::handle_allocated:
            return handle_state::allocated;
        case kind::handle_published:
            return handle_state::published;
        case kind::handle_get_posted:
            return handle_state::get_posted;
        case kind::handle_put_done:
            return handle_state::put_done;
        case kind::handle_completed:
            return handle_state::completed;
        case kind::handle_released:
            return handle_state::released;
        default:
            return std::nullopt;
    }
}

const char* state_label(trace::file_state s) {
    switch (s) {
        case trace::file_state::recording:
            return "not closed (the PE died or still runs)";
        case trace::file_state::flushed:
            return "flushed (abort path)";
        case trace::file_state::closed:
            return "closed";
    }
    return "unknown";
}

}  // namespace

// ---- loading ---------------------------------------------------------------------------

std::uint64_t pe_trace::to_trace(std::uint64_t steady_ns) const noexcept {
    const std::int64_t t = static_cast<std::int64_t>(steady_ns) + steady_to_trace_ns;
    return t < 0 ? 0 : static_cast<std::uint64_t>(t);
}

const pe_trace* trace_set::find(std::uint32_t pe) const noexcept {
    for (const auto& p : pes)
        if (p.pe == pe) return &p;
    return nullptr;
}

trace_set load_dir(const std::string& dir) {
    std::error_code ec;
    if (!fs::exists(dir, ec))
        throw input_error("coverse-trace: " + dir +
                          " does not exist; give the directory that COVERSE_TRACE named");
    if (!fs::is_directory(dir, ec))
        throw input_error("coverse-trace: " + dir +
                          " is not a directory; give the directory that COVERSE_TRACE named");
    std::vector<std::pair<std::uint32_t, std::string>> found;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        if (!entry.is_regular_file(ec)) continue;
        if (auto pe = pe_from_name(entry.path().filename().string()))
            found.emplace_back(*pe, entry.path().string());
    }
    if (ec) throw input_error("coverse-trace: cannot list " + dir + ": " + ec.message());
    if (found.empty())
        throw input_error("coverse-trace: no trace files (coverse-trace.<pe>.bin) in " + dir +
                          "; run the job with COVERSE_TRACE=" + dir + " to record some");
    std::sort(found.begin(), found.end());

    std::vector<std::pair<std::string, trace::file_contents>> files;
    std::vector<problem> problems;
    for (const auto& [pe, path] : found) {
        try {
            auto contents = trace::read_file(path);
            if (contents.header.pe != pe)
                problems.push_back(
                    {path, "coverse-trace: " + path + " at byte 12: header says PE " +
                               std::to_string(contents.header.pe) + ", the file name PE " +
                               std::to_string(pe) + "; using the header"});
            files.emplace_back(path, std::move(contents));
        } catch (const std::exception& e) {
            problems.push_back({path, e.what(), true});
        }
    }
    if (files.empty()) {
        std::string all = "coverse-trace: no usable trace file in " + dir + ":";
        for (const auto& p : problems)
            all += "\n  " + p.message;
        throw input_error(all);
    }
    return merge(dir, std::move(files), std::move(problems));
}

trace_set merge(std::string dir, std::vector<std::pair<std::string, trace::file_contents>> files,
                std::vector<problem> problems) {
    trace_set set;
    set.dir = std::move(dir);
    set.problems = std::move(problems);
    if (files.empty()) return set;
    std::uint64_t origin = ~std::uint64_t{0};
    for (const auto& [path, f] : files)
        origin = std::min(origin, f.header.realtime_ref_ns);
    set.origin_realtime_ns = origin;

    for (auto& [path, f] : files) {
        if (set.find(f.header.pe)) {
            set.problems.push_back({path,
                                    "coverse-trace: " + path +
                                        " at byte 12: a second file for PE " +
                                        std::to_string(f.header.pe) + "; not used",
                                    true});
            continue;
        }
        if (!f.error.empty()) set.problems.push_back({path, f.error});
        if (f.truncated_bytes)
            set.problems.push_back(
                {path, "coverse-trace: " + path + " at byte " + std::to_string(f.truncated_offset) +
                           ": file ends inside an event (" + std::to_string(f.truncated_bytes) +
                           " of 40 bytes); the " + std::to_string(f.events.size()) +
                           " events before it are used"});
        pe_trace p;
        p.pe = f.header.pe;
        p.path = path;
        p.header = f.header;
        p.info = std::move(f.info);
        p.steady_to_trace_ns = static_cast<std::int64_t>(f.header.realtime_ref_ns - origin) -
                               static_cast<std::int64_t>(f.header.steady_ref_ns);
        const bool stop_mode =
            !p.info.has_limit ||
            p.info.limit.mode == static_cast<std::uint32_t>(trace::limit_mode::stop);
        p.incomplete =
            f.truncated_bytes > 0 || !f.error.empty() ||
            (stop_mode && p.info.has_progress && f.events.size() < p.info.progress.events_written);
        p.events = std::move(f.events);
        for (auto& e : p.events)
            e.ts_ns = p.to_trace(e.ts_ns);
        p.end_ns = p.events.empty() ? p.to_trace(p.header.steady_ref_ns) : p.events.back().ts_ns;
        if (p.info.has_progress && p.info.progress.end_ns >= p.header.steady_ref_ns)
            p.end_ns = std::max(p.end_ns, p.to_trace(p.info.progress.end_ns));
        set.pes.push_back(std::move(p));
    }
    std::sort(set.pes.begin(), set.pes.end(),
              [](const pe_trace& a, const pe_trace& b) { return a.pe < b.pe; });
    return set;
}

// ---- lifecycles --------------------------------------------------------------------------

std::string state_name(handle_state s) {
    switch (s) {
        case handle_state::allocated:
            return "allocated";
        case handle_state::published:
            return "published";
        case handle_state::get_posted:
            return "get posted";
        case handle_state::put_done:
            return "put done";
        case handle_state::completed:
            return "completed";
        case handle_state::released:
            return "released";
    }
    return "?";
}

std::optional<std::uint64_t> handle_life::completed_at() const noexcept {
    for (const auto& s : states)
        if (s.state == handle_state::completed) return s.t;
    return std::nullopt;
}

std::string handle_life::describe() const {
    return std::string(is_send() ? "send " : "receive ") +
           trace::protocol_name(static_cast<unsigned>(alloc.proto)) +
           (is_send() ? " to PE " : " from PE ") + std::to_string(alloc.peer) + " #" +
           std::to_string(alloc.sequence) + " (" + hex_id(id) + ", " + std::to_string(alloc.bytes) +
           " B)";
}

model analyse(const trace_set& set) {
    model m;
    for (const auto& p : set.pes) {
        std::unordered_map<std::uint64_t, std::size_t> open_handles;
        std::unordered_map<std::uint64_t, std::size_t> open_regs;
        std::map<std::uint64_t, std::vector<std::size_t>> open_phases;  // by phase id, LIFO
        for (const auto& e : p.events) {
            const auto k = static_cast<kind>(e.kind);
            if (auto st = state_of(e.kind)) {
                if (*st == handle_state::allocated) {
                    if (open_handles.count(e.object)) ++m.reused_ids;
                    handle_life h;
                    h.pe = p.pe;
                    h.id = e.object;
                    h.alloc = trace::handle_allocation::unpack(e.a, e.b);
                    h.states.push_back({*st, e.ts_ns});
                    open_handles[e.object] = m.handles.size();
                    m.handles.push_back(std::move(h));
                    continue;
                }
                auto it = open_handles.find(e.object);
                if (it == open_handles.end()) {
                    ++m.orphan_events;
                    continue;
                }
                auto& h = m.handles[it->second];
                h.states.push_back({*st, e.ts_ns});
                // put_done with a protocol: the send went into an eager channel instead.
                if (*st == handle_state::put_done && e.a >= 1 && e.a <= trace::protocol_count)
                    h.alloc.proto = static_cast<trace::protocol>(e.a - 1);
                if (*st == handle_state::released) {
                    h.end = e.ts_ns;
                    open_handles.erase(it);
                }
                continue;
            }
            switch (k) {
                case kind::phase_begin:
                    open_phases[e.object].push_back(m.phases.size());
                    m.phases.push_back({p.pe, e.object, e.a, e.ts_ns, e.ts_ns, false});
                    break;
                case kind::phase_end: {
                    auto it = open_phases.find(e.object);
                    if (it == open_phases.end() || it->second.empty()) break;
                    auto& ph = m.phases[it->second.back()];
                    it->second.pop_back();
                    ph.end = e.ts_ns;
                    ph.ended = true;
                    break;
                }
                case kind::credit_spent:
                case kind::credit_returned:
                    m.credits.push_back({p.pe, static_cast<std::uint32_t>(e.object),
                                         k == kind::credit_spent, e.a, e.b, e.ts_ns});
                    break;
                case kind::registration_added:
                    open_regs[e.object] = m.registrations.size();
                    m.registrations.push_back({p.pe, e.object, e.a, e.ts_ns, std::nullopt});
                    break;
                case kind::registration_dropped: {
                    auto it = open_regs.find(e.object);
                    if (it == open_regs.end()) break;
                    m.registrations[it->second].dropped = e.ts_ns;
                    open_regs.erase(it);
                    break;
                }
                case kind::counter:
                    m.counters.push_back({p.pe, e.object, static_cast<std::int64_t>(e.a), e.ts_ns});
                    break;
                default:
                    break;  // task events, user kinds
            }
        }
        for (const auto& [id, idx] : open_handles)
            m.handles[idx].end = std::max(p.end_ns, m.handles[idx].states.back().t);
        for (const auto& [id, stack] : open_phases)
            for (auto idx : stack)
                m.phases[idx].end = std::max(p.end_ns, m.phases[idx].begin);
    }
    // Reused ids leave an earlier life open without an end: close it at its PE's end.
    for (auto& h : m.handles)
        if (h.end == 0 && !h.released())
            if (const auto* p = set.find(h.pe)) h.end = std::max(p->end_ns, h.states.back().t);
    return m;
}

std::vector<flow> match_flows(const model& m, std::size_t* unmatched) {
    using key = std::tuple<std::uint32_t, std::uint32_t, std::uint32_t>;  // sender, receiver, seq
    std::map<key, std::vector<std::size_t>> sends;
    for (std::size_t i = 0; i < m.handles.size(); ++i) {
        const auto& h = m.handles[i];
        if (h.is_send()) sends[{h.pe, h.alloc.peer, h.alloc.sequence}].push_back(i);
    }
    std::map<key, std::size_t> used;
    std::vector<flow> flows;
    std::size_t lonely = 0;
    for (std::size_t i = 0; i < m.handles.size(); ++i) {
        const auto& h = m.handles[i];
        if (h.is_send()) continue;
        const key k{h.alloc.peer, h.pe, h.alloc.sequence};
        auto it = sends.find(k);
        auto& n = used[k];
        if (it == sends.end() || n >= it->second.size()) {
            ++lonely;
            continue;
        }
        flows.push_back({it->second[n++], i});
    }
    for (const auto& [k, list] : sends) {
        auto it = used.find(k);
        lonely += list.size() - (it == used.end() ? 0 : it->second);
    }
    if (unmatched) *unmatched = lonely;
    return flows;
}

// ---- summary ---------------------------------------------------------------------------

latency_stats percentiles(std::vector<std::uint64_t> samples) {
    latency_stats s;
    s.n = samples.size();
    if (samples.empty()) return s;
    std::sort(samples.begin(), samples.end());
    const auto rank = [&](std::size_t pct) {
        const std::size_t r = (pct * s.n + 99) / 100;  // ceil(pct% of n), at least 1
        return samples[std::max<std::size_t>(r, 1) - 1];
    };
    s.p50 = rank(50);
    s.p99 = rank(99);
    s.max = samples.back();
    return s;
}

summary summarize(const model& m) {
    summary s;
    std::map<std::pair<unsigned, unsigned>, std::pair<protocol_row, std::vector<std::uint64_t>>>
        rows;
    for (const auto& h : m.handles) {
        const unsigned proto = static_cast<unsigned>(h.alloc.proto);
        const unsigned dir = static_cast<unsigned>(h.alloc.dir);
        auto& [row, lat] = rows[{proto, dir}];
        row.proto = proto;
        row.dir = h.alloc.dir;
        ++row.handles;
        row.bytes += h.alloc.bytes;
        if (h.released()) ++row.released;
        if (auto c = h.completed_at()) {
            ++row.completed;
            lat.push_back(*c - h.start());
        }
    }
    for (auto& [k, v] : rows) {
        v.first.latency = percentiles(std::move(v.second));
        s.rows.push_back(v.first);
    }
    std::map<std::uint64_t, credit_row> credits;
    std::map<std::pair<std::uint32_t, std::uint32_t>, credit_pair> pairs;
    for (const auto& c : m.credits) {
        auto& row = credits[c.attribution];
        row.attribution = c.attribution;
        auto& pair = pairs[{c.pe, c.peer}];
        pair.pe = c.pe;
        pair.peer = c.peer;
        pair.last_t = std::max(pair.last_t, c.t);
        (c.spent ? row.spent : row.returned) += c.count;
        (c.spent ? pair.spent : pair.returned) += c.count;
    }
    for (const auto& [k, v] : credits)
        s.credits.push_back(v);
    for (const auto& [k, v] : pairs)
        s.credit_pairs.push_back(v);
    for (const auto& r : m.registrations) {
        ++s.registrations;
        s.registered_bytes += r.bytes;
        if (r.dropped) ++s.registrations_dropped;
    }
    s.flows = match_flows(m, &s.unmatched).size();
    return s;
}

namespace {

void print_problems_and_drops(const trace_set& set, std::ostream& out) {
    for (const auto& p : set.pes) {
        const auto& pr = p.info.progress;
        if (pr.dropped_limit)
            out << "note: PE " << p.pe << " reached its trace limit and dropped "
                << pr.dropped_limit << " later events (stop mode)\n";
        if (pr.dropped_overwritten)
            out << "note: PE " << p.pe << " overwrote its " << pr.dropped_overwritten
                << " oldest events (ring mode)\n";
        if (pr.dropped_behind)
            out << "note: PE " << p.pe << " dropped " << pr.dropped_behind
                << " events its writer could not take\n";
        if (p.incomplete)
            out << "note: PE " << p.pe
                << "'s file holds less than was recorded (truncated or damaged)\n";
        if (p.info.state() == trace::file_state::recording && p.info.has_progress)
            out << "note: PE " << p.pe << "'s trace was not closed: the PE died or still runs\n";
    }
}

std::string credit_label(std::uint64_t attribution) {
    return attribution == 0 ? std::string("not attributed")
                            : trace::protocol_name(static_cast<unsigned>(attribution - 1));
}

}  // namespace

void print_summary(const trace_set& set, const model& m, const summary& s, std::ostream& out) {
    std::size_t events = 0;
    std::uint64_t span = 0;
    for (const auto& p : set.pes) {
        events += p.events.size();
        span = std::max(span, p.end_ns);
    }
    out << "coverse-trace summary of " << set.dir << ": " << set.pes.size() << " PE"
        << (set.pes.size() == 1 ? "" : "s") << ", " << events << " events, "
        << format_duration(span) << " from the first PE's start to the last PE's end\n";
    print_problems_and_drops(set, out);

    out << "\n";
    if (s.rows.empty()) {
        out << "handles: none in this trace\n";
    } else {
        out << pad("protocol", 13) << pad("dir", 9) << rpad("handles", 8) << rpad("completed", 10)
            << rpad("released", 9) << rpad("p50", 11) << rpad("p99", 11) << rpad("max", 11)
            << rpad("bytes", 13) << "\n";
        for (const auto& r : s.rows) {
            const bool any = r.latency.n > 0;
            out << pad(trace::protocol_name(r.proto), 13)
                << pad(r.dir == trace::direction::send ? "send" : "receive", 9)
                << rpad(std::to_string(r.handles), 8) << rpad(std::to_string(r.completed), 10)
                << rpad(std::to_string(r.released), 9)
                << rpad(any ? format_duration(r.latency.p50) : "-", 11)
                << rpad(any ? format_duration(r.latency.p99) : "-", 11)
                << rpad(any ? format_duration(r.latency.max) : "-", 11)
                << rpad(std::to_string(r.bytes), 13) << "\n";
        }
        out << "latency: allocation to completion (send: the message left or was fetched; "
               "receive: handed to its handler)\n";
        out << "flows: " << s.flows << " send/receive pairs matched, " << s.unmatched
            << " handles without their other end in the trace\n";
    }
    if (m.orphan_events)
        out << "note: " << m.orphan_events
            << " handle events have no allocation in the trace (overwritten or not emitted)\n";

    out << "\n";
    if (s.credits.empty()) {
        out << "credits: none recorded\n";
    } else {
        out << pad("credits", 16) << rpad("spent", 10) << rpad("returned", 10)
            << rpad("outstanding", 13) << "\n";
        for (const auto& c : s.credits)
            out << pad(credit_label(c.attribution), 16) << rpad(std::to_string(c.spent), 10)
                << rpad(std::to_string(c.returned), 10)
                << rpad(std::to_string(static_cast<std::int64_t>(c.spent - c.returned)), 13)
                << "\n";
        for (const auto& p : s.credit_pairs)
            out << "  PE " << p.pe << " -> PE " << p.peer << ": spent " << p.spent << ", returned "
                << p.returned << "\n";
    }
    out << "registrations: " << s.registrations << " added (" << format_bytes(s.registered_bytes)
        << "), " << s.registrations_dropped << " dropped\n";

    if (!m.phases.empty()) {
        out << "\n" << pad("phase", 24) << rpad("count", 6) << rpad("max", 11) << "  on PE\n";
        std::map<std::uint64_t, std::tuple<std::size_t, std::uint64_t, std::uint32_t>> by_id;
        for (const auto& ph : m.phases) {
            auto& [n, mx, pe] = by_id[ph.id];
            ++n;
            if (ph.end - ph.begin >= mx) {
                mx = ph.end - ph.begin;
                pe = ph.pe;
            }
        }
        for (const auto& [id, v] : by_id)
            out << pad(trace::phase_name(id), 24) << rpad(std::to_string(std::get<0>(v)), 6)
                << rpad(format_duration(std::get<1>(v)), 11) << "  " << std::get<2>(v) << "\n";
    }
}

void print_info(const trace_set& set, std::ostream& out) {
    out << "coverse-trace info for " << set.dir << ": " << set.pes.size() << " PE file"
        << (set.pes.size() == 1 ? "" : "s") << "\n";
    for (const auto& p : set.pes) {
        const auto& i = p.info;
        out << "PE " << p.pe << ": " << p.path << " (format v" << p.header.version << ")\n";
        out << "  " << p.events.size() << " events, trace " << state_label(i.state())
            << ", ends at " << format_time(p.end_ns) << "\n";
        out << "  backend " << (i.backend.empty() ? "?" : i.backend) << ", provider "
            << (i.provider.empty() ? "?" : i.provider) << ", " << i.num_pes << " PEs, host "
            << (i.host.empty() ? "?" : i.host) << ", pid " << i.pid << "\n";
        if (i.has_limit)
            out << "  limit " << format_bytes(i.limit.limit_bytes) << " ("
                << i.limit.capacity_events << " events), mode "
                << (i.limit.mode == static_cast<std::uint32_t>(trace::limit_mode::ring) ? "ring"
                                                                                        : "stop")
                << ", dropped " << i.dropped() << " (limit " << i.progress.dropped_limit
                << ", overwritten " << i.progress.dropped_overwritten << ", writer behind "
                << i.progress.dropped_behind << ")\n";
        out << "  clock: starts " << format_time(p.to_trace(p.header.steady_ref_ns))
            << " after trace time 0\n";
        if (!i.config.empty()) {
            out << "  config:\n";
            std::size_t start = 0;
            while (start < i.config.size()) {
                auto nl = i.config.find('\n', start);
                if (nl == std::string::npos) nl = i.config.size();
                if (nl > start) out << "    " << i.config.substr(start, nl - start) << "\n";
                start = nl + 1;
            }
        }
    }
}

// ---- leaks -------------------------------------------------------------------------------

std::vector<leak> find_leaks(const trace_set& set, const model& m) {
    std::vector<leak> out;
    const auto certain = [&](std::uint32_t pe) {
        const auto* p = set.find(pe);
        return !p || !p->lost_tail();
    };
    for (const auto& h : m.handles) {
        if (h.released()) continue;
        out.push_back({leak::what_t::handle, h.pe, h.describe(), state_name(h.states.back().state),
                       h.states.back().t, certain(h.pe)});
    }
    for (const auto& r : m.registrations) {
        if (r.dropped) continue;
        out.push_back({leak::what_t::registration, r.pe,
                       "registration " + std::to_string(r.id) + " (" + format_bytes(r.bytes) + ")",
                       "added", r.added, certain(r.pe)});
    }
    for (const auto& p : summarize(m).credit_pairs) {
        if (p.spent <= p.returned) continue;
        out.push_back({leak::what_t::credits, p.pe,
                       "credits to PE " + std::to_string(p.peer) + ": " + std::to_string(p.spent) +
                           " spent, " + std::to_string(p.returned) + " returned, " +
                           std::to_string(p.spent - p.returned) + " outstanding",
                       "last change", p.last_t, certain(p.pe)});
    }
    return out;
}

std::size_t print_leaks(const trace_set& set, const std::vector<leak>& leaks, std::ostream& out) {
    std::size_t certain = 0;
    for (const auto& l : leaks)
        certain += l.certain;
    out << "coverse-trace leaks in " << set.dir << ": ";
    if (leaks.empty())
        out << "none\n";
    else
        out << certain << " found" << (certain == leaks.size() ? "" : " (and more uncertain)")
            << "\n";
    print_problems_and_drops(set, out);
    for (const auto& l : leaks) {
        const char* what = l.what == leak::what_t::handle         ? "handle      "
                           : l.what == leak::what_t::registration ? "registration"
                                                                  : "credits     ";
        out << "  PE " << l.pe << "  " << what << "  " << l.description << ": last state "
            << l.last_state << " at " << format_time(l.since);
        if (!l.certain)
            out << " (uncertain: PE " << l.pe
                << "'s trace lost its tail, the release may be among the missing events)";
        out << "\n";
    }
    return certain;
}

// ---- stalls ------------------------------------------------------------------------------

std::vector<stall> find_stalls(const trace_set& set, const model& m, std::uint64_t bound_ns) {
    (void)set;
    std::vector<stall> out;
    for (std::size_t i = 0; i < m.handles.size(); ++i) {
        const auto& h = m.handles[i];
        for (std::size_t s = 0; s < h.states.size(); ++s) {
            const auto& st = h.states[s];
            if (st.state == handle_state::released) break;
            const bool last = s + 1 == h.states.size();
            const std::uint64_t until = last ? h.end : h.states[s + 1].t;
            const std::uint64_t d = until > st.t ? until - st.t : 0;
            if (d > bound_ns) out.push_back({i, st.state, st.t, d, last});
        }
    }
    std::stable_sort(out.begin(), out.end(),
                     [](const stall& a, const stall& b) { return a.duration > b.duration; });
    return out;
}

void print_stalls(const model& m, const std::vector<stall>& stalls, std::uint64_t bound_ns,
                  std::ostream& out) {
    out << "coverse-trace stalls over " << format_duration(bound_ns) << ": ";
    if (stalls.empty())
        out << "none (" << m.handles.size() << " handles checked)\n";
    else
        out << stalls.size() << " found\n";
    for (const auto& s : stalls) {
        const auto& h = m.handles[s.handle];
        out << "  PE " << h.pe << "  " << h.describe() << ": " << state_name(s.state) << " for "
            << format_duration(s.duration) << " from " << format_time(s.entered)
            << (s.open ? " (still in it when the PE's trace ended)" : "") << "\n";
    }
}

// ---- formatting ----------------------------------------------------------------------------

std::string format_duration(std::uint64_t ns) {
    const double v = static_cast<double>(ns);
    if (ns < 1000) return std::to_string(ns) + " ns";
    if (ns < 10'000) return fmt("%.2f us", v / 1e3);
    if (ns < 1'000'000) return fmt("%.1f us", v / 1e3);
    if (ns < 10'000'000) return fmt("%.3f ms", v / 1e6);
    if (ns < 1'000'000'000) return fmt("%.2f ms", v / 1e6);
    return fmt("%.3f s", v / 1e9);
}

std::optional<std::uint64_t> parse_duration(const std::string& text) {
    std::size_t i = 0;
    std::uint64_t whole = 0, frac = 0, frac_scale = 1;
    bool digits = false;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
        if (whole > 1'000'000'000'000ull) return std::nullopt;
        whole = whole * 10 + static_cast<std::uint64_t>(text[i] - '0');
        digits = true;
    }
    if (i < text.size() && text[i] == '.') {
        ++i;
        for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
            if (frac_scale < 1'000'000'000ull) {
                frac = frac * 10 + static_cast<std::uint64_t>(text[i] - '0');
                frac_scale *= 10;
            }
            digits = true;
        }
    }
    if (!digits) return std::nullopt;
    const std::string unit = text.substr(i);
    std::uint64_t scale = 0;
    if (unit == "ns")
        scale = 1;
    else if (unit == "us" || unit == "\xc2\xb5s")  // "µs"
        scale = 1'000;
    else if (unit == "ms")
        scale = 1'000'000;
    else if (unit == "s")
        scale = 1'000'000'000;
    else
        return std::nullopt;
    if (whole > ~std::uint64_t{0} / scale) return std::nullopt;
    return whole * scale + frac * scale / frac_scale;
}

}  // namespace coverse::trace_tool
