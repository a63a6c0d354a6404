// doctor_report: the hang report's data — a PE's state and its state_reply encoding — and
// the job-wide analysis (wait-for graph, cycles, the PEs waited on) with its text, JSON
// and DOT renderings. docs/doctor.md shows a report and how to read it.
#include <coverse/net/doctor.hpp>

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <tuple>

namespace coverse::net::doctor {

namespace {

// 2: the connections (CONNECT and each link) after the note.
constexpr std::uint8_t state_version = 2;

// ---- encoding ----------------------------------------------------------------------------
// One list of fields (state_fields) drives both directions: the writer appends each field
// little-endian, the reader checks each against the bytes left.

class writer {
public:
    void field(std::uint8_t v) { _out.push_back(static_cast<std::byte>(v)); }
    void field(bool v) { field(std::uint8_t{v ? std::uint8_t{1} : std::uint8_t{0}}); }
    void field(wait_kind v) { field(static_cast<std::uint8_t>(v)); }
    void field(std::uint32_t v) { le(v, 4); }
    void field(std::int32_t v) { le(static_cast<std::uint32_t>(v), 4); }
    void field(std::uint64_t v) { le(v, 8); }
    void field(std::int64_t v) { le(static_cast<std::uint64_t>(v), 8); }
    void field(double v) { le(std::bit_cast<std::uint64_t>(v), 8); }
    void field(const std::string& v) {
        field(static_cast<std::uint32_t>(v.size()));
        const auto* p = reinterpret_cast<const std::byte*>(v.data());
        _out.insert(_out.end(), p, p + v.size());
    }
    template <class T, class Each>
    void list(const std::vector<T>& v, std::size_t, Each&& each) {
        field(static_cast<std::uint32_t>(v.size()));
        for (const T& e : v)
            each(e);
    }
    std::vector<std::byte> take() { return std::move(_out); }

private:
    void le(std::uint64_t v, int bytes) {
        for (int i = 0; i < bytes; ++i)
            _out.push_back(static_cast<std::byte>(v >> (8 * i)));
    }
    std::vector<std::byte> _out;
};

class reader {
public:
    explicit reader(std::span<const std::byte> b) : _b(b) {}
    bool ok() const noexcept { return _ok; }
    std::size_t left() const noexcept { return _b.size() - _at; }
    void field(std::uint8_t& v) { v = static_cast<std::uint8_t>(le(1)); }
    void field(bool& v) { v = le(1) != 0; }
    void field(wait_kind& v) {
        const auto k = le(1);
        v = k < wait_kind_count ? static_cast<wait_kind>(k) : wait_kind::other;
    }
    void field(std::uint32_t& v) { v = static_cast<std::uint32_t>(le(4)); }
    void field(std::int32_t& v) {
        v = static_cast<std::int32_t>(static_cast<std::uint32_t>(le(4)));
    }
    void field(std::uint64_t& v) { v = le(8); }
    void field(std::int64_t& v) { v = static_cast<std::int64_t>(le(8)); }
    void field(double& v) { v = std::bit_cast<double>(le(8)); }
    void field(std::string& v) {
        std::uint32_t n = 0;
        field(n);
        if (!need(n)) return;
        v.assign(reinterpret_cast<const char*>(_b.data() + _at), n);
        _at += n;
    }
    /// A count, then that many elements of at least `min_size` bytes: never more than fit.
    template <class T, class Each>
    void list(std::vector<T>& v, std::size_t min_size, Each&& each) {
        std::uint32_t n = 0;
        field(n);
        if (!_ok || n > left() / min_size) {
            _ok = false;
            return;
        }
        v.resize(n);
        for (T& e : v)
            if (_ok) each(e);
    }

private:
    bool need(std::size_t n) {
        if (!_ok || left() < n) _ok = false;
        return _ok;
    }
    std::uint64_t le(int bytes) {
        if (!need(static_cast<std::size_t>(bytes))) return 0;
        std::uint64_t v = 0;
        for (int i = 0; i < bytes; ++i)
            v |= std::uint64_t{static_cast<std::uint8_t>(_b[_at++])} << (8 * i);
        return v;
    }
    std::span<const std::byte> _b;
    std::size_t _at = 0;
    bool _ok = true;
};

// Every field of a state_reply after its version byte, in wire order. Append only.
template <class Archive, class State>
void state_fields(Archive& a, State& s) {
    a.field(s.pe);
    a.field(s.pid);
    a.field(s.full);
    a.field(s.uptime);
    a.field(s.progress);
    a.field(s.in_handler);
    a.field(s.handler);
    a.field(s.handler_name);
    a.field(s.handler_seconds);
    a.field(s.ready_tasks);
    a.field(s.network_queue);
    a.field(s.scheduler_queue);
    a.field(s.deliveries);
    a.field(s.timers);
    a.field(s.handles_in_use);
    a.field(s.handles_user_held);
    a.field(s.handles_total);
    a.list(s.handles, 8, [&](auto& h) {
        a.field(h.protocol);
        a.field(h.count);
    });
    a.field(s.barrier_epoch);
    a.list(s.waits, 21, [&](auto& e) {
        a.field(e.kind);
        a.field(e.peer);
        a.field(e.id);
        a.field(e.detail);
        a.field(e.count);
    });
    a.list(s.peers, 20, [&](auto& p) {
        a.field(p.pe);
        a.field(p.messages);
        a.field(p.heard_ago);
    });
    a.field(s.note);
    a.field(s.connect);
    a.list(s.links, 22, [&](auto& l) {
        a.field(l.pe);
        a.field(l.state);
        a.field(l.lazily);
        a.field(l.dialed);
        a.field(l.up_at);
    });
}

}  // namespace

std::vector<std::byte> encode(const pe_state& s) {
    writer w;
    w.field(state_version);
    state_fields(w, s);
    return w.take();
}

std::optional<pe_state> decode_state(std::span<const std::byte> bytes, std::string* why) {
    auto bad = [&](std::string text) -> std::optional<pe_state> {
        if (why) *why = std::move(text);
        return std::nullopt;
    };
    reader r(bytes);
    std::uint8_t version = 0;
    r.field(version);
    if (!r.ok()) return bad("empty state reply");
    if (version != state_version) {
        return bad("state reply version " + std::to_string(version) + " (this build reads " +
                   std::to_string(state_version) + "); run the same coverse release");
    }
    pe_state s;
    state_fields(r, s);
    if (!r.ok()) return bad("truncated state reply (" + std::to_string(bytes.size()) + " bytes)");
    if (r.left() != 0) return bad(std::to_string(r.left()) + " bytes after the state reply");
    return s;
}

// ---- analysis ----------------------------------------------------------------------------

namespace {

// Tarjan's strongly connected components. Components come out sinks first (reverse
// topological order of the condensation).
struct scc_finder {
    const std::vector<std::vector<std::uint32_t>>& adj;
    std::vector<int> index, low, comp;
    std::vector<bool> on_stack;
    std::vector<std::uint32_t> stack;
    std::vector<std::vector<std::uint32_t>> comps;
    int next = 0;

    explicit scc_finder(const std::vector<std::vector<std::uint32_t>>& a)
        : adj(a), index(a.size(), -1), low(a.size(), 0), comp(a.size(), -1), on_stack(a.size()) {
        for (std::uint32_t v = 0; v < a.size(); ++v)
            if (index[v] < 0) visit(v);
    }
    void visit(std::uint32_t v) {
        index[v] = low[v] = next++;
        stack.push_back(v);
        on_stack[v] = true;
        for (std::uint32_t w : adj[v]) {
            if (index[w] < 0) {
                visit(w);
                low[v] = std::min(low[v], low[w]);
            } else if (on_stack[w]) {
                low[v] = std::min(low[v], index[w]);
            }
        }
        if (low[v] != index[v]) return;
        std::vector<std::uint32_t> c;
        std::uint32_t w;
        do {
            w = stack.back();
            stack.pop_back();
            on_stack[w] = false;
            comp[w] = static_cast<int>(comps.size());
            c.push_back(w);
        } while (w != v);
        std::sort(c.begin(), c.end());
        comps.push_back(std::move(c));
    }
};

// A shortest cycle through `start` inside its component: start, ..., the PE that waits
// for start.
std::vector<std::uint32_t> cycle_through(std::uint32_t start,
                                         const std::vector<std::vector<std::uint32_t>>& adj,
                                         const std::vector<int>& comp) {
    std::map<std::uint32_t, std::uint32_t> parent;
    std::vector<std::uint32_t> frontier{start};
    parent[start] = start;
    while (!frontier.empty()) {
        std::vector<std::uint32_t> next;
        for (std::uint32_t v : frontier) {
            for (std::uint32_t w : adj[v]) {
                if (comp[w] != comp[start]) continue;
                if (w == start) {
                    std::vector<std::uint32_t> path;
                    for (std::uint32_t x = v; x != start; x = parent[x])
                        path.push_back(x);
                    path.push_back(start);
                    std::reverse(path.begin(), path.end());
                    return path;
                }
                if (parent.emplace(w, v).second) next.push_back(w);
            }
        }
        frontier = std::move(next);
    }
    return {start};
}

}  // namespace

report analyze(std::string reason, std::uint32_t num_pes, std::vector<pe_answer> answers) {
    report r;
    r.reason = std::move(reason);
    r.num_pes = num_pes;
    std::sort(answers.begin(), answers.end(),
              [](const pe_answer& a, const pe_answer& b) { return a.pe < b.pe; });
    r.pes = std::move(answers);

    std::vector<std::vector<std::uint32_t>> adj(num_pes);
    std::set<std::tuple<std::uint32_t, std::uint32_t, int, std::uint64_t>> seen;
    for (const pe_answer& a : r.pes) {
        if (!a.state || a.pe >= num_pes) continue;
        for (const wait_entry& w : a.state->waits) {
            if (w.peer == no_peer || w.peer >= num_pes || w.peer == a.pe) continue;
            if (!seen.emplace(a.pe, w.peer, static_cast<int>(w.kind), w.id).second) continue;
            r.edges.push_back(wait_edge{a.pe, w.peer, w.kind, w.id, w.detail});
            if (std::find(adj[a.pe].begin(), adj[a.pe].end(), w.peer) == adj[a.pe].end())
                adj[a.pe].push_back(w.peer);
        }
    }

    const scc_finder scc(adj);
    for (const auto& c : scc.comps)
        if (c.size() > 1) r.cycles.push_back(cycle_through(c.front(), adj, scc.comp));
    std::sort(r.cycles.begin(), r.cycles.end());

    // The sink components each component ends up in, computed sinks first.
    std::vector<std::vector<std::uint32_t>> sinks_of(scc.comps.size());
    for (std::size_t c = 0; c < scc.comps.size(); ++c) {
        std::set<std::uint32_t> s;
        for (std::uint32_t v : scc.comps[c])
            for (std::uint32_t w : adj[v])
                if (scc.comp[w] != static_cast<int>(c))
                    for (std::uint32_t k : sinks_of[static_cast<std::size_t>(scc.comp[w])])
                        s.insert(k);
        if (s.empty()) s.insert(static_cast<std::uint32_t>(c));
        sinks_of[c].assign(s.begin(), s.end());
    }
    std::vector<std::uint32_t> waiting(num_pes, 0);
    for (std::uint32_t x = 0; x < num_pes; ++x) {
        if (adj[x].empty()) continue;  // not waiting for anyone
        for (std::uint32_t k : sinks_of[static_cast<std::size_t>(scc.comp[x])])
            for (std::uint32_t m : scc.comps[k])
                if (m != x) ++waiting[m];
    }
    for (std::uint32_t m = 0; m < num_pes; ++m)
        if (waiting[m] > 0) r.blamed.push_back(blame{m, waiting[m]});
    std::stable_sort(r.blamed.begin(), r.blamed.end(),
                     [](const blame& a, const blame& b) { return a.waiting > b.waiting; });

    // A barrier some PE waits in: who has begun it.
    std::uint32_t epoch = 0;
    bool barrier_wait = false;
    for (const pe_answer& a : r.pes) {
        if (!a.state || !a.state->full) continue;
        epoch = std::max(epoch, a.state->barrier_epoch);
        for (const wait_entry& w : a.state->waits)
            if (w.kind == wait_kind::barrier) barrier_wait = true;
    }
    if (barrier_wait && epoch > 0) {
        std::vector<std::uint32_t> in, out, unknown;
        for (const pe_answer& a : r.pes) {
            if (!a.state || !a.state->full)
                unknown.push_back(a.pe);
            else
                (a.state->barrier_epoch >= epoch ? in : out).push_back(a.pe);
        }
        r.barrier = "barrier epoch " + std::to_string(epoch) + ": entered by " + pe_list(in);
        if (!out.empty()) r.barrier += "; not entered by " + pe_list(out);
        if (!unknown.empty()) r.barrier += "; unknown for " + pe_list(unknown);
    }
    return r;
}

// ---- rendering ---------------------------------------------------------------------------

std::string pe_list(const std::vector<std::uint32_t>& pes) {
    if (pes.empty()) return "no PE";
    std::string out = pes.size() == 1 ? "PE " : "PEs ";
    for (std::size_t i = 0; i < pes.size();) {
        std::size_t j = i;
        while (j + 1 < pes.size() && pes[j + 1] == pes[j] + 1)
            ++j;
        if (i > 0) out += ", ";
        out += std::to_string(pes[i]);
        if (j >= i + 2) {
            out += "-" + std::to_string(pes[j]);
            i = j + 1;
        } else {
            ++i;
        }
    }
    return out;
}

namespace {

std::string seconds(double s) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f s", s);
    return b;
}

std::string wait_phrase(wait_kind kind, std::uint32_t peer, std::uint64_t id) {
    const std::string from = peer == no_peer ? std::string() : " from PE " + std::to_string(peer);
    const std::string to = peer == no_peer ? std::string() : " to PE " + std::to_string(peer);
    switch (kind) {
        case wait_kind::credits:
            return "eager credits" + from;
        case wait_kind::get_done:
            return "get-done" + from + " (handle " + std::to_string(id) + ")";
        case wait_kind::barrier:
            return "barrier epoch " + std::to_string(id) +
                   (peer == no_peer ? std::string() : " on PE " + std::to_string(peer));
        case wait_kind::handle_slot:
            return "a free handle slot";
        case wait_kind::socket_drain:
            return "a send" + to + " to drain";
        case wait_kind::reply:
            return "a reply" + from;
        case wait_kind::message:
            return id == ~0ull ? std::string("any message")
                               : "a message for handler " + std::to_string(id);
        case wait_kind::cth_thread:
            return "a Cth thread suspended in handler " + std::to_string(id);
        case wait_kind::connect:
            return "connection set-up" +
                   (peer == no_peer ? std::string() : " with PE " + std::to_string(peer));
        case wait_kind::timer:
            return "a timer";
        case wait_kind::exit_vote:
            return "the exit vote" + from;
        case wait_kind::other:
            break;
    }
    return "something" + from;
}

// "  connections (CONNECT=lazy): PE 1 dialed on first use at 0.2 s, PE 3 connecting
// (dialed); 2 PEs not connected". Past 8 connections only the ones not up are listed.
std::string connections_text(const pe_state& s) {
    std::string o = "  connections (CONNECT=";
    o += s.connect;
    o += "):";
    const auto others = s.peers.size();
    std::size_t up = 0, dialed = 0, lazily = 0;
    auto is_up = [](const link_entry& l) {
        return l.state == "connected" || l.state == "disconnecting";
    };
    for (const link_entry& l : s.links) {
        if (!is_up(l)) continue;
        ++up;
        dialed += l.dialed ? 1 : 0;
        lazily += l.lazily ? 1 : 0;
    }
    const bool each = s.links.size() <= 8;
    if (!each) {
        o += ' ';
        o += std::to_string(up);
        o += " up (";
        o += std::to_string(dialed);
        o += " dialed, ";
        o += std::to_string(up - dialed);
        o += " accepted, ";
        o += std::to_string(lazily);
        o += " on first use)";
    }
    bool first = each;
    for (const link_entry& l : s.links) {
        if (!each && is_up(l)) continue;
        o += first ? " " : ", ";
        first = false;
        o += "PE ";
        o += std::to_string(l.pe);
        o += ' ';
        if (is_up(l)) {
            o += l.dialed ? "dialed" : "accepted";
            o += l.lazily ? " on first use" : " at start-up";
            if (l.up_at >= 0) {
                o += " at ";
                o += seconds(l.up_at);
            }
        } else {
            o += l.state;
            o += l.dialed ? " (dialed)" : " (accepted)";
        }
    }
    if (s.links.empty()) o += " none";
    if (others > s.links.size()) {
        const auto idle = others - s.links.size();
        o += "; ";
        o += std::to_string(idle);
        o += idle == 1 ? " PE not connected" : " PEs not connected";
    }
    o += '\n';
    return o;
}

std::string handler_text(const pe_state& s) {
    std::string h = "handler " + std::to_string(s.handler);
    if (!s.handler_name.empty()) h += " (" + s.handler_name + ")";
    return h;
}

bool idle_wait(const wait_entry& w) {
    return w.kind == wait_kind::message && w.id == ~0ull;
}

// Why a PE does not move, in one phrase: what the report says first about a blamed PE.
// Its most specific waits only: a message-stream or idle-loop wait says little beside a
// wait on a named peer.
std::string standing(const pe_answer& a) {
    if (!a.state) return "did not answer: " + a.missing;
    const pe_state& s = *a.state;
    if (s.in_handler) return "is in " + handler_text(s) + " for " + seconds(s.handler_seconds);
    if (!s.full) return s.note.empty() ? "answered only from its responder thread" : s.note;
    const bool named = std::any_of(s.waits.begin(), s.waits.end(), [](const wait_entry& w) {
        return w.kind != wait_kind::message;
    });
    std::string out;
    for (const wait_entry& w : s.waits) {
        if ((named && w.kind == wait_kind::message) || idle_wait(w)) continue;
        out += out.empty() ? "waits for " : "; and for ";
        out += wait_phrase(w.kind, w.peer, w.id);
        if (!w.detail.empty()) out += " (" + w.detail + ")";
    }
    const bool idle = std::any_of(s.waits.begin(), s.waits.end(), idle_wait);
    if (out.empty())
        return idle ? "is idle in its scheduler loop, waiting for any message"
                    : "runs no handler and waits for nothing the runtime knows of";
    return out + (idle ? "; its scheduler loop is idle" : "");
}

std::string json_escape(const std::string& s) {
    std::string o = "\"";
    for (char c : s) {
        switch (c) {
            case '"':
                o += "\\\"";
                break;
            case '\\':
                o += "\\\\";
                break;
            case '\n':
                o += "\\n";
                break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) {
                    char b[8];
                    std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(c));
                    o += b;
                } else {
                    o += c;
                }
        }
    }
    return o + "\"";
}

std::string json_number(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3f", v);
    return b;
}

const pe_answer* answer_of(const report& r, std::uint32_t pe) {
    for (const pe_answer& a : r.pes)
        if (a.pe == pe) return &a;
    return nullptr;
}

std::string edge_between(const report& r, std::uint32_t from, std::uint32_t to) {
    for (const wait_edge& e : r.edges)
        if (e.from == from && e.to == to) return describe(e);
    return "PE " + std::to_string(from) + " waits for PE " + std::to_string(to);
}

}  // namespace

std::string describe(const wait_edge& e) {
    std::string out = "PE " + std::to_string(e.from) + " waits for ";
    if (e.kind == wait_kind::barrier)
        out += "PE " + std::to_string(e.to) + " in barrier epoch " + std::to_string(e.id);
    else
        out += wait_phrase(e.kind, e.to, e.id);
    return out;
}

std::string render_text(const report& r) {
    std::string o = "coverse-run: wait-for report (" + r.reason + "), " +
                    std::to_string(r.num_pes) + " PE" + (r.num_pes == 1 ? "" : "s") + "\n";
    if (!r.blamed.empty()) {
        o += "waited on:\n";
        for (const blame& b : r.blamed) {
            const pe_answer* a = answer_of(r, b.pe);
            o += "  PE " + std::to_string(b.pe) + ": " + std::to_string(b.waiting) +
                 (b.waiting == 1 ? " PE ends" : " PEs end") + " up waiting on it; it " +
                 (a ? standing(*a) : std::string("did not answer")) + "\n";
        }
    }
    if (r.cycles.empty()) {
        o += "cycles: none\n";
    } else {
        for (const auto& c : r.cycles) {
            o += "cycle: ";
            for (std::size_t i = 0; i < c.size(); ++i) {
                if (i > 0) o += ", ";
                o += edge_between(r, c[i], c[(i + 1) % c.size()]);
            }
            o += "\n";
        }
    }
    if (!r.barrier.empty()) o += r.barrier + "\n";
    for (const pe_answer& a : r.pes) {
        o += "PE " + std::to_string(a.pe) + " (pid " + std::to_string(a.pid) + ")";
        if (!a.state) {
            o += ": no answer: " + a.missing + "\n";
            continue;
        }
        const pe_state& s = *a.state;
        o += ": up " + seconds(s.uptime) + ", progress " + std::to_string(s.progress) + "\n";
        if (s.in_handler)
            o += "  in " + handler_text(s) + " for " + seconds(s.handler_seconds) + "\n";
        else
            o += "  not in a handler\n";
        if (!s.note.empty()) o += "  note: " + s.note + "\n";
        if (s.full) {
            if (s.waits.empty()) o += "  waits: none\n";
            for (const wait_entry& w : s.waits) {
                if (idle_wait(w)) {
                    o += "  scheduler loop: idle, waiting for any message\n";
                    continue;
                }
                o += "  waits for " + wait_phrase(w.kind, w.peer, w.id);
                if (!w.detail.empty()) o += " (" + w.detail + ")";
                if (w.count > 1) o += " x" + std::to_string(w.count);
                o += "\n";
            }
            o += "  queues: ready tasks " + std::to_string(s.ready_tasks) + ", network " +
                 std::to_string(s.network_queue) + ", scheduler " +
                 std::to_string(s.scheduler_queue) + ", deliveries " +
                 std::to_string(s.deliveries) + ", timers " + std::to_string(s.timers) + "\n";
            o += "  handles: " + std::to_string(s.handles_in_use) + " in use of " +
                 std::to_string(s.handles_total);
            for (const handle_count& h : s.handles)
                o += ", " + h.protocol + " " + std::to_string(h.count);
            if (s.handles_user_held > 0)
                o += " (" + std::to_string(s.handles_user_held) + " held by the application)";
            o += "\n";
        }
        if (!s.peers.empty()) {
            o += "  last heard:";
            bool first = true;
            for (const peer_entry& p : s.peers) {
                o += first ? " " : ", ";
                first = false;
                o += "PE " + std::to_string(p.pe) + " " +
                     (p.heard_ago < 0 ? std::string("never") : seconds(p.heard_ago) + " ago");
            }
            o += "\n";
        }
        if (!s.connect.empty()) o += connections_text(s);
    }
    return o;
}

std::string render_json(const report& r) {
    std::string o = "{\"reason\":" + json_escape(r.reason) +
                    ",\"num_pes\":" + std::to_string(r.num_pes) + ",\"blamed\":[";
    for (std::size_t i = 0; i < r.blamed.size(); ++i) {
        if (i) o += ",";
        const pe_answer* a = answer_of(r, r.blamed[i].pe);
        o += "{\"pe\":" + std::to_string(r.blamed[i].pe) +
             ",\"waiting\":" + std::to_string(r.blamed[i].waiting) +
             ",\"standing\":" + json_escape(a ? standing(*a) : "did not answer") + "}";
    }
    o += "],\"cycles\":[";
    for (std::size_t i = 0; i < r.cycles.size(); ++i) {
        if (i) o += ",";
        o += "[";
        for (std::size_t j = 0; j < r.cycles[i].size(); ++j)
            o += (j ? "," : "") + std::to_string(r.cycles[i][j]);
        o += "]";
    }
    o += "],\"edges\":[";
    for (std::size_t i = 0; i < r.edges.size(); ++i) {
        const wait_edge& e = r.edges[i];
        if (i) o += ",";
        o += "{\"from\":" + std::to_string(e.from) + ",\"to\":" + std::to_string(e.to) +
             ",\"kind\":" + json_escape(wait_kind_name(e.kind)) +
             ",\"id\":" + std::to_string(e.id) + ",\"detail\":" + json_escape(e.detail) +
             ",\"text\":" + json_escape(describe(e)) + "}";
    }
    o += "],\"barrier\":" + json_escape(r.barrier) + ",\"pes\":[";
    for (std::size_t i = 0; i < r.pes.size(); ++i) {
        const pe_answer& a = r.pes[i];
        if (i) o += ",";
        o += "{\"pe\":" + std::to_string(a.pe) + ",\"pid\":" + std::to_string(a.pid);
        if (!a.state) {
            o += ",\"answered\":false,\"missing\":" + json_escape(a.missing) + "}";
            continue;
        }
        const pe_state& s = *a.state;
        o += ",\"answered\":true,\"full\":" + std::string(s.full ? "true" : "false") +
             ",\"uptime\":" + json_number(s.uptime) +
             ",\"progress\":" + std::to_string(s.progress) +
             ",\"in_handler\":" + std::string(s.in_handler ? "true" : "false");
        if (s.in_handler)
            o += ",\"handler\":" + std::to_string(s.handler) +
                 ",\"handler_name\":" + json_escape(s.handler_name) +
                 ",\"handler_seconds\":" + json_number(s.handler_seconds);
        o += ",\"note\":" + json_escape(s.note);
        o += ",\"queues\":{\"ready_tasks\":" + std::to_string(s.ready_tasks) +
             ",\"network\":" + std::to_string(s.network_queue) +
             ",\"scheduler\":" + std::to_string(s.scheduler_queue) +
             ",\"deliveries\":" + std::to_string(s.deliveries) +
             ",\"timers\":" + std::to_string(s.timers) + "}";
        o += ",\"handles\":{\"in_use\":" + std::to_string(s.handles_in_use) +
             ",\"user_held\":" + std::to_string(s.handles_user_held) +
             ",\"total\":" + std::to_string(s.handles_total) + ",\"by_protocol\":{";
        for (std::size_t j = 0; j < s.handles.size(); ++j)
            o += (j ? "," : "") + json_escape(s.handles[j].protocol) + ":" +
                 std::to_string(s.handles[j].count);
        o += "}},\"barrier_epoch\":" + std::to_string(s.barrier_epoch) + ",\"waits\":[";
        for (std::size_t j = 0; j < s.waits.size(); ++j) {
            const wait_entry& w = s.waits[j];
            o += std::string(j ? "," : "") + "{\"kind\":" + json_escape(wait_kind_name(w.kind)) +
                 ",\"peer\":" + (w.peer == no_peer ? std::string("null") : std::to_string(w.peer)) +
                 ",\"id\":" + std::to_string(w.id) + ",\"detail\":" + json_escape(w.detail) +
                 ",\"count\":" + std::to_string(w.count) + "}";
        }
        o += "],\"peers\":[";
        for (std::size_t j = 0; j < s.peers.size(); ++j) {
            const peer_entry& p = s.peers[j];
            o += std::string(j ? "," : "") + "{\"pe\":" + std::to_string(p.pe) +
                 ",\"messages\":" + std::to_string(p.messages) + ",\"heard_ago\":" +
                 (p.heard_ago < 0 ? std::string("null") : json_number(p.heard_ago)) + "}";
        }
        o += "],\"connect\":" + json_escape(s.connect) + ",\"links\":[";
        for (std::size_t j = 0; j < s.links.size(); ++j) {
            const link_entry& l = s.links[j];
            o += std::string(j ? "," : "") + "{\"pe\":" + std::to_string(l.pe) +
                 ",\"state\":" + json_escape(l.state) +
                 ",\"lazily\":" + (l.lazily ? "true" : "false") +
                 ",\"dialed\":" + (l.dialed ? "true" : "false") +
                 ",\"up_at\":" + (l.up_at < 0 ? std::string("null") : json_number(l.up_at)) + "}";
        }
        o += "]}";
    }
    return o + "]}\n";
}

std::string render_dot(const report& r) {
    std::set<std::pair<std::uint32_t, std::uint32_t>> in_cycle;
    for (const auto& c : r.cycles)
        for (std::size_t i = 0; i < c.size(); ++i)
            in_cycle.emplace(c[i], c[(i + 1) % c.size()]);
    std::string o =
        "digraph wait_for {\n  rankdir=LR;\n  label=" + json_escape("wait-for graph: " + r.reason) +
        ";\n  node [shape=box, style=rounded, fontname=\"Helvetica\"];\n"
        "  edge [fontname=\"Helvetica\", fontsize=10];\n";
    for (const pe_answer& a : r.pes) {
        const bool blamed = std::any_of(r.blamed.begin(), r.blamed.end(),
                                        [&](const blame& b) { return b.pe == a.pe; });
        std::string label = "PE " + std::to_string(a.pe);
        if (!a.state)
            label += "\\nno answer";
        else if (a.state->in_handler)
            label +=
                "\\nin " + handler_text(*a.state) + "\\nfor " + seconds(a.state->handler_seconds);
        else if (a.state->full && a.state->waits.empty())
            label += "\\nwaits for nothing";
        else if (blamed) {
            std::string why = standing(a);  // its first wait, short
            why = why.substr(0, why.find(';'));
            std::replace(why.begin(), why.end(), '"', '\'');
            label += "\\n" + why;
        }
        o += "  pe" + std::to_string(a.pe) + " [label=\"" + label + "\"" +
             (blamed ? ", style=\"rounded,filled\", fillcolor=\"#f4cccc\"" : "") + "];\n";
    }
    for (const wait_edge& e : r.edges) {
        std::string label = wait_kind_name(e.kind);
        if (e.kind == wait_kind::barrier) label += " epoch " + std::to_string(e.id);
        if (e.kind == wait_kind::get_done) label += " h" + std::to_string(e.id);
        o += "  pe" + std::to_string(e.from) + " -> pe" + std::to_string(e.to) + " [label=\"" +
             label + "\"" + (in_cycle.count({e.from, e.to}) ? ", color=red, fontcolor=red" : "") +
             "];\n";
    }
    return o + "}\n";
}

}  // namespace coverse::net::doctor
