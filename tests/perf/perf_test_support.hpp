// Helpers of coverse-perf's tests: run a program with its stdout and stderr captured, and
// read the flat JSON objects coverse-perf prints, one per line.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace coverse::perf_test {

struct run_result {
    int status = -1;  // exit code, or 128 + signal
    std::string out;
    std::string err;
};

inline std::string read_file(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

/// Runs argv[0] (a path) with its output in files, so a chatty program cannot block on a
/// full pipe. No shell: arguments reach the program as given.
inline run_result run(const std::vector<std::string>& argv) {
    char dir_template[] = "/tmp/coverse-perf-test-XXXXXX";
    const std::string dir = mkdtemp(dir_template);
    const std::string out_path = dir + "/out", err_path = dir + "/err";
    const pid_t pid = fork();
    if (pid == 0) {
        const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (out < 0 || err < 0) _exit(125);
        dup2(out, 1);
        dup2(err, 2);
        std::vector<char*> args;
        for (const auto& a : argv)
            args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        execv(args[0], args.data());
        _exit(127);
    }
    run_result r;
    int ws = 0;
    if (pid > 0 && waitpid(pid, &ws, 0) == pid)
        r.status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    r.out = read_file(out_path);
    r.err = read_file(err_path);
    unlink(out_path.c_str());
    unlink(err_path.c_str());
    rmdir(dir.c_str());
    return r;
}

using json_value = std::variant<double, std::string, bool>;
using json_object = std::map<std::string, json_value>;

/// Parses one flat JSON object ({"key": number | "string" | true | false}, no nesting, which
/// is all coverse-perf prints). nullopt when the line is not exactly that.
inline std::optional<json_object> parse_flat_object(const std::string& line) {
    std::size_t i = 0;
    auto ws = [&] {
        while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
            ++i;
    };
    auto string = [&]() -> std::optional<std::string> {
        if (i >= line.size() || line[i] != '"') return std::nullopt;
        std::string s;
        for (++i; i < line.size() && line[i] != '"'; ++i) {
            if (static_cast<unsigned char>(line[i]) < 0x20) return std::nullopt;
            if (line[i] == '\\') {
                if (++i >= line.size()) return std::nullopt;
                const char e = line[i];
                if (e != '"' && e != '\\' && e != '/') return std::nullopt;  // enough here
                s += e;
            } else {
                s += line[i];
            }
        }
        if (i >= line.size()) return std::nullopt;
        ++i;
        return s;
    };
    json_object obj;
    ws();
    if (i >= line.size() || line[i++] != '{') return std::nullopt;
    ws();
    if (i < line.size() && line[i] == '}') {
        ++i;
    } else {
        for (;;) {
            ws();
            auto key = string();
            if (!key) return std::nullopt;
            ws();
            if (i >= line.size() || line[i++] != ':') return std::nullopt;
            ws();
            if (i >= line.size()) return std::nullopt;
            if (line[i] == '"') {
                auto v = string();
                if (!v) return std::nullopt;
                obj[*key] = *v;
            } else if (line.compare(i, 4, "true") == 0) {
                obj[*key] = true;
                i += 4;
            } else if (line.compare(i, 5, "false") == 0) {
                obj[*key] = false;
                i += 5;
            } else {
                // JSON numbers: -?digits[.digits][e[+-]digits]; strtod alone would accept
                // "nan", "inf" and hex, which are not JSON.
                const std::size_t start = i;
                if (line[i] == '-') ++i;
                if (i >= line.size() || line[i] < '0' || line[i] > '9') return std::nullopt;
                while (i < line.size() &&
                       std::string_view("0123456789.eE+-").find(line[i]) != std::string_view::npos)
                    ++i;
                const std::string num = line.substr(start, i - start);
                char* end = nullptr;
                const double v = std::strtod(num.c_str(), &end);
                if (*end) return std::nullopt;
                obj[*key] = v;
            }
            ws();
            if (i < line.size() && line[i] == ',') {
                ++i;
                continue;
            }
            if (i < line.size() && line[i] == '}') {
                ++i;
                break;
            }
            return std::nullopt;
        }
    }
    ws();
    if (i != line.size()) return std::nullopt;
    return obj;
}

inline std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::stringstream s(text);
    for (std::string line; std::getline(s, line);)
        if (!line.empty()) out.push_back(line);
    return out;
}

inline double number(const json_object& o, const std::string& key) {
    auto it = o.find(key);
    if (it == o.end() || !std::holds_alternative<double>(it->second)) return std::nan("");
    return std::get<double>(it->second);
}

inline std::string text(const json_object& o, const std::string& key) {
    auto it = o.find(key);
    if (it == o.end() || !std::holds_alternative<std::string>(it->second)) return {};
    return std::get<std::string>(it->second);
}

}  // namespace coverse::perf_test
