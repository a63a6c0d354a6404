// trace_export: the merged trace as Trace Event Format JSON for the Perfetto UI. Handles are
// complete ("X") slices with one child slice per state, laid out on lanes (threads) so that
// slices on one thread never overlap without nesting; messages are "s"/"f" flow pairs;
// live handles, credits, registered memory and counters are "C" events.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "trace_model.hpp"

namespace coverse::trace_tool {

namespace {

// JSON string body: escapes what JSON requires, and replaces bytes that are not valid UTF-8
// (a config text can hold anything) with '?', so the file always parses.
std::string escape(const std::string& s) {
    std::string out;
    out.reserve(s.size() + 2);
    for (std::size_t i = 0; i < s.size(); ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else if (c < 0x80) {
            out += static_cast<char>(c);
        } else {
            const std::size_t len = c >= 0xf0 && c < 0xf5   ? 4
                                    : c >= 0xe0             ? 3
                                    : c >= 0xc2 && c < 0xe0 ? 2
                                                            : 0;
            bool ok = len > 0 && i + len <= s.size();
            for (std::size_t k = 1; ok && k < len; ++k)
                ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
            if (!ok) {
                out += '?';
                continue;
            }
            out.append(s, i, len);
            i += len - 1;
        }
    }
    return out;
}

std::string q(const std::string& s) {
    return "\"" + escape(s) + "\"";
}

// Microseconds with nanosecond digits: Perfetto rounds value * 1000 back to the same ns.
std::string us(std::uint64_t ns) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%" PRIu64 ".%03" PRIu64, ns / 1000, ns % 1000);
    return buf;
}

std::string hex_id(std::uint64_t id) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%016" PRIx64, id);
    return buf;
}

constexpr std::uint32_t pid_of(std::uint32_t pe) {
    return pe + 1;  // Perfetto reads pid 0 as the kernel's idle process
}
constexpr std::uint64_t tid_of(std::uint32_t pe, std::uint32_t lane) {
    return (static_cast<std::uint64_t>(pe) + 1) << 16 | lane;  // unique across PEs
}

struct out_event {
    std::uint32_t pid;
    std::uint64_t tid;
    std::uint64_t ts;
    int rank;           // at equal ts: slices (longest first) before points
    std::uint64_t dur;  // slices only
    std::size_t seq;    // insertion order breaks the remaining ties
    std::string json;
};

class writer {
public:
    void slice(std::uint32_t pe, std::uint64_t tid, std::uint64_t ts, std::uint64_t dur,
               const std::string& name, const std::string& cat, const std::string& args) {
        add(pe, tid, ts, 0, dur,
            "{\"name\":" + q(name) + ",\"cat\":" + q(cat) + ",\"ph\":\"X\",\"ts\":" + us(ts) +
                ",\"dur\":" + us(dur) + ",\"pid\":" + std::to_string(pid_of(pe)) + ",\"tid\":" +
                std::to_string(tid) + (args.empty() ? "" : ",\"args\":{" + args + "}") + "}");
    }
    void flow_point(bool start, std::uint32_t pe, std::uint64_t tid, std::uint64_t ts,
                    std::uint64_t id) {
        add(pe, tid, ts, 1, 0,
            std::string("{\"name\":\"message\",\"cat\":\"flow\",\"ph\":\"") + (start ? "s" : "f") +
                "\",\"id\":" + std::to_string(id) + ",\"ts\":" + us(ts) +
                ",\"pid\":" + std::to_string(pid_of(pe)) + ",\"tid\":" + std::to_string(tid) +
                (start ? "" : ",\"bp\":\"e\"") + "}");
    }
    void counter(std::uint32_t pe, std::uint64_t ts, const std::string& name,
                 const std::string& args) {
        add(pe, tid_of(pe, 0), ts, 2, 0,
            "{\"name\":" + q(name) + ",\"ph\":\"C\",\"ts\":" + us(ts) +
                ",\"pid\":" + std::to_string(pid_of(pe)) +
                ",\"tid\":" + std::to_string(tid_of(pe, 0)) + ",\"args\":{" + args + "}}");
    }
    void metadata(std::uint32_t pe, std::uint64_t tid, const std::string& name,
                  const std::string& args) {
        _meta.push_back("{\"name\":" + q(name) +
                        ",\"ph\":\"M\",\"ts\":0,\"pid\":" + std::to_string(pid_of(pe)) +
                        ",\"tid\":" + std::to_string(tid) + ",\"args\":{" + args + "}}");
    }

    void write(std::ostream& out) {
        std::sort(_events.begin(), _events.end(), [](const out_event& a, const out_event& b) {
            return std::tie(a.pid, a.tid, a.ts, a.rank, b.dur, a.seq) <
                   std::tie(b.pid, b.tid, b.ts, b.rank, a.dur, b.seq);
        });
        out << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
        bool first = true;
        const auto line = [&](const std::string& s) {
            out << (first ? "" : ",\n") << s;
            first = false;
        };
        for (const auto& m : _meta)
            line(m);
        for (const auto& e : _events)
            line(e.json);
        out << "\n]}\n";
    }

private:
    void add(std::uint32_t pe, std::uint64_t tid, std::uint64_t ts, int rank, std::uint64_t dur,
             std::string json) {
        _events.push_back({pid_of(pe), tid, ts, rank, dur, _events.size(), std::move(json)});
    }
    std::vector<std::string> _meta;
    std::vector<out_event> _events;
};

// Lanes for slices that may nest (phases): a slice joins the first lane where, after closing
// everything that ended by its start, it fits inside the innermost open slice (or nothing
// is open). Input sorted by start, longest first.
template <class Span>
std::vector<std::uint32_t> nesting_lanes(const std::vector<const Span*>& spans,
                                         std::uint32_t& lanes) {
    std::vector<std::vector<std::uint64_t>> open;  // per lane: stack of ends
    std::vector<std::uint32_t> lane_of;
    for (const Span* s : spans) {
        std::uint32_t chosen = 0;
        for (;; ++chosen) {
            if (chosen == open.size()) open.emplace_back();
            auto& stack = open[chosen];
            while (!stack.empty() && stack.back() <= s->begin)
                stack.pop_back();
            if (stack.empty() || s->end <= stack.back()) break;
        }
        open[chosen].push_back(s->end);
        lane_of.push_back(chosen);
    }
    lanes = static_cast<std::uint32_t>(open.size());
    return lane_of;
}

// Lanes for slices that must not share a thread when they overlap (handles): the lowest
// lane whose last slice ended by this one's start.
std::vector<std::uint32_t> disjoint_lanes(const std::vector<const handle_life*>& hs,
                                          std::uint32_t& lanes) {
    std::vector<std::uint64_t> busy_until;
    std::vector<std::uint32_t> lane_of;
    for (const auto* h : hs) {
        std::uint32_t chosen = 0;
        while (chosen < busy_until.size() && busy_until[chosen] > h->start())
            ++chosen;
        if (chosen == busy_until.size()) busy_until.push_back(0);
        busy_until[chosen] = h->end;
        lane_of.push_back(chosen);
    }
    lanes = static_cast<std::uint32_t>(busy_until.size());
    return lane_of;
}

std::string handle_args(const handle_life& h) {
    return "\"handle\":" + q(hex_id(h.id)) +
           ",\"direction\":" + q(h.is_send() ? "send" : "receive") +
           ",\"protocol\":" + q(trace::protocol_name(static_cast<unsigned>(h.alloc.proto))) +
           ",\"peer\":" + std::to_string(h.alloc.peer) +
           ",\"sequence\":" + std::to_string(h.alloc.sequence) +
           ",\"bytes\":" + std::to_string(h.alloc.bytes) +
           ",\"last_state\":" + q(state_name(h.states.back().state)) +
           ",\"released\":" + (h.released() ? "true" : "false");
}

// Where a flow end sits: the middle of the handle's first state (the slice is bound there,
// strictly inside it when it lasts 2 ns or more).
std::uint64_t flow_point_ts(const handle_life& h) {
    const std::uint64_t first_end = h.states.size() > 1 ? h.states[1].t : h.end;
    return h.start() + (first_end - h.start()) / 2;
}

}  // namespace

export_stats export_json(const trace_set& set, const model& m, std::ostream& out) {
    writer w;
    export_stats st;
    std::map<std::size_t, std::uint64_t> handle_tid;  // index into m.handles -> tid

    for (const auto& p : set.pes) {
        const std::uint32_t pe = p.pe;
        std::string labels = p.info.backend.empty() ? "" : "backend " + p.info.backend;
        if (!p.info.provider.empty())
            labels += (labels.empty() ? "" : ", ") + std::string("provider ") + p.info.provider;
        if (!p.info.host.empty())
            labels += (labels.empty() ? "" : ", ") + std::string("host ") + p.info.host;
        w.metadata(pe, tid_of(pe, 0), "process_name", "\"name\":" + q("PE " + std::to_string(pe)));
        w.metadata(pe, tid_of(pe, 0), "process_sort_index", "\"sort_index\":" + std::to_string(pe));
        if (!labels.empty())
            w.metadata(pe, tid_of(pe, 0), "process_labels", "\"labels\":" + q(labels));

        // Phases: nesting lanes from 0.
        std::vector<const phase_span*> phases;
        for (const auto& ph : m.phases)
            if (ph.pe == pe) phases.push_back(&ph);
        std::stable_sort(phases.begin(), phases.end(), [](const auto* a, const auto* b) {
            return std::tie(a->begin, b->end) < std::tie(b->begin, a->end);
        });
        std::uint32_t phase_lanes = 0;
        const auto phase_lane = nesting_lanes(phases, phase_lanes);
        phase_lanes = std::max<std::uint32_t>(phase_lanes, 1);  // lane 0 also holds counters
        for (std::size_t i = 0; i < phases.size(); ++i) {
            const auto& ph = *phases[i];
            std::string args = "\"phase\":" + std::to_string(ph.id);
            if (ph.id == static_cast<std::uint64_t>(trace::phase::barrier))
                args += ",\"epoch\":" + std::to_string(ph.arg);
            if (!ph.ended) args += ",\"ended\":false";
            w.slice(pe, tid_of(pe, phase_lane[i]), ph.begin, ph.end - ph.begin,
                    trace::phase_name(ph.id), "phase", args);
            ++st.slices;
        }
        for (std::uint32_t l = 0; l < phase_lanes; ++l) {
            w.metadata(pe, tid_of(pe, l), "thread_name",
                       "\"name\":" + q(l == 0 ? "phases" : "phases " + std::to_string(l + 1)));
            w.metadata(pe, tid_of(pe, l), "thread_sort_index",
                       "\"sort_index\":" + std::to_string(l));
        }

        // Handles: disjoint lanes after the phase lanes.
        std::vector<const handle_life*> hs;
        std::vector<std::size_t> index;
        for (std::size_t i = 0; i < m.handles.size(); ++i)
            if (m.handles[i].pe == pe) {
                hs.push_back(&m.handles[i]);
                index.push_back(i);
            }
        std::uint32_t handle_lanes = 0;
        const auto lane = disjoint_lanes(hs, handle_lanes);
        for (std::uint32_t l = 0; l < handle_lanes; ++l) {
            const auto tid = tid_of(pe, phase_lanes + l);
            w.metadata(pe, tid, "thread_name",
                       "\"name\":" + q(handle_lanes == 1 ? std::string("handles")
                                                         : "handles " + std::to_string(l + 1)));
            w.metadata(pe, tid, "thread_sort_index",
                       "\"sort_index\":" + std::to_string(phase_lanes + l));
        }
        st.lanes += phase_lanes + handle_lanes;
        for (std::size_t i = 0; i < hs.size(); ++i) {
            const auto& h = *hs[i];
            const auto tid = tid_of(pe, phase_lanes + lane[i]);
            handle_tid[index[i]] = tid;
            const std::string proto = trace::protocol_name(static_cast<unsigned>(h.alloc.proto));
            w.slice(pe, tid, h.start(), h.end - h.start(),
                    (h.is_send() ? "send " : "receive ") + proto, "handle", handle_args(h));
            ++st.slices;
            for (std::size_t s = 0; s < h.states.size(); ++s) {
                if (h.states[s].state == handle_state::released) break;
                const std::uint64_t from = h.states[s].t;
                const std::uint64_t to = s + 1 < h.states.size() ? h.states[s + 1].t : h.end;
                if (to <= from) continue;
                w.slice(pe, tid, from, to - from, state_name(h.states[s].state), "state", "");
                ++st.slices;
            }
        }

        // Counters. Live handles change at allocation and release.
        std::vector<std::tuple<std::uint64_t, int, bool>> changes;  // t, +1/-1, is send
        for (const auto* h : hs) {
            changes.emplace_back(h->start(), 1, h->is_send());
            if (h->released()) changes.emplace_back(h->end, -1, h->is_send());
        }
        std::stable_sort(changes.begin(), changes.end(), [](const auto& a, const auto& b) {
            return std::get<0>(a) < std::get<0>(b);
        });
        std::int64_t sends = 0, receives = 0;
        for (const auto& [t, d, is_send] : changes) {
            (is_send ? sends : receives) += d;
            w.counter(
                pe, t, "live handles",
                "\"send\":" + std::to_string(sends) + ",\"receive\":" + std::to_string(receives));
            ++st.counters;
        }
        std::map<std::uint32_t, std::int64_t> outstanding;
        for (const auto& c : m.credits) {
            if (c.pe != pe) continue;
            auto& v = outstanding[c.peer];
            v += c.spent ? static_cast<std::int64_t>(c.count) : -static_cast<std::int64_t>(c.count);
            w.counter(pe, c.t, "credits to PE " + std::to_string(c.peer),
                      "\"outstanding\":" + std::to_string(v));
            ++st.counters;
        }
        std::vector<std::tuple<std::uint64_t, std::int64_t>> reg;  // t, +/- bytes
        for (const auto& r : m.registrations) {
            if (r.pe != pe) continue;
            reg.emplace_back(r.added, static_cast<std::int64_t>(r.bytes));
            if (r.dropped) reg.emplace_back(*r.dropped, -static_cast<std::int64_t>(r.bytes));
        }
        std::stable_sort(reg.begin(), reg.end(), [](const auto& a, const auto& b) {
            return std::get<0>(a) < std::get<0>(b);
        });
        std::int64_t reg_bytes = 0, reg_count = 0;
        for (const auto& [t, b] : reg) {
            reg_bytes += b;
            reg_count += b >= 0 ? 1 : -1;
            w.counter(pe, t, "registered memory",
                      "\"bytes\":" + std::to_string(reg_bytes) +
                          ",\"count\":" + std::to_string(reg_count));
            ++st.counters;
        }
        for (const auto& c : m.counters) {
            if (c.pe != pe) continue;
            w.counter(pe, c.t, "counter " + std::to_string(c.id),
                      "\"value\":" + std::to_string(c.value));
            ++st.counters;
        }
    }

    // Flows: only pairs with both ends in the trace, so every id has an "s" and an "f".
    std::uint64_t next_id = 1;
    for (const auto& f : match_flows(m, &st.unmatched)) {
        const auto& s = m.handles[f.send];
        const auto& r = m.handles[f.receive];
        const std::uint64_t id = next_id++;
        w.flow_point(true, s.pe, handle_tid[f.send], flow_point_ts(s), id);
        w.flow_point(false, r.pe, handle_tid[f.receive], flow_point_ts(r), id);
        ++st.flows;
    }
    w.write(out);
    return st;
}

}  // namespace coverse::trace_tool
