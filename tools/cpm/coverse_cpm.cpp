// coverse-cpm: the Cpm scanner (what `charmc -gen-cpm` does). Reads a C file, finds its
// CpmDeclareSimple(T) / CpmDeclarePointer(T) declarations and CpmInvokable functions, and
// writes FILE.cpm.h: for each function f a launcher Cpm_f(CpmDestination, args...), the
// invoker that unpacks the arguments on the destination PE and calls f, the handler index
// CpmIndex_f, and CpmInitializeThisModule() registering the invokers (see conv-cpm.h).
//
// An argument is `T name` (one value) or `T *name` (an array whose length is the CpmDim
// argument just before it). Simple types are copied (CpmPack_T / CpmUnpack_T on the copy);
// pointer types pack what they point to (CpmPtrSize_T, CpmPtrPack_T, CpmPtrUnpack_T,
// CpmPtrFree_T). Built in: char short int long float double CpmDim Cfuture (simple),
// CpmStr (pointer).
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

enum class kind { simple, pointer };

struct argument {
    std::string type;
    std::string name;
    bool array = false;  // T *name, its length the CpmDim before it
    kind k = kind::simple;
};

struct function {
    std::string name;
    std::vector<argument> args;
    int line = 0;
};

struct token {
    std::string text;
    int line;
};

[[noreturn]] void fail(const std::string& file, int line, const std::string& what) {
    throw std::runtime_error(file + ":" + std::to_string(line) + ": " + what);
}

// Identifiers, numbers and single punctuation characters; comments, string and character
// literals and preprocessor lines are dropped (CpmDeclare* inside a macro is not seen).
std::vector<token> tokenize(const std::string& src) {
    std::vector<token> out;
    int line = 1;
    bool line_start = true;
    for (std::size_t i = 0; i < src.size();) {
        const char c = src[i];
        if (c == '\n') {
            ++line;
            line_start = true;
            ++i;
            continue;
        }
        if (std::isspace(static_cast<unsigned char>(c))) {
            ++i;
            continue;
        }
        if (line_start && c == '#') {  // a preprocessor line, with its continuations
            while (i < src.size() && src[i] != '\n') {
                if (src[i] == '\\' && i + 1 < src.size() && src[i + 1] == '\n') {
                    ++line;
                    ++i;
                }
                ++i;
            }
            continue;
        }
        line_start = false;
        if (c == '/' && i + 1 < src.size() && src[i + 1] == '/') {
            while (i < src.size() && src[i] != '\n')
                ++i;
            continue;
        }
        if (c == '/' && i + 1 < src.size() && src[i + 1] == '*') {
            i += 2;
            while (i + 1 < src.size() && !(src[i] == '*' && src[i + 1] == '/')) {
                if (src[i] == '\n') ++line;
                ++i;
            }
            i += 2;
            continue;
        }
        if (c == '"' || c == '\'') {
            const char quote = c;
            for (++i; i < src.size() && src[i] != quote; ++i) {
                if (src[i] == '\\') ++i;
                if (i < src.size() && src[i] == '\n') ++line;
            }
            ++i;
            out.push_back({"0", line});
            continue;
        }
        if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') {
            std::size_t j = i;
            while (j < src.size() &&
                   (std::isalnum(static_cast<unsigned char>(src[j])) || src[j] == '_'))
                ++j;
            out.push_back({src.substr(i, j - i), line});
            i = j;
            continue;
        }
        out.push_back({std::string(1, c), line});
        ++i;
    }
    return out;
}

bool is_identifier(const std::string& s) {
    return !s.empty() && (std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_');
}

struct scan_result {
    std::map<std::string, kind> types;
    std::vector<function> functions;
};

scan_result scan(const std::string& file, const std::vector<token>& t) {
    scan_result r;
    for (const char* s : {"char", "short", "int", "long", "float", "double", "CpmDim", "Cfuture"})
        r.types[s] = kind::simple;
    r.types["CpmStr"] = kind::pointer;
    auto at = [&](std::size_t i) -> const std::string& {
        static const std::string none;
        return i < t.size() ? t[i].text : none;
    };
    for (std::size_t i = 0; i < t.size(); ++i) {
        if ((at(i) == "CpmDeclareSimple" || at(i) == "CpmDeclarePointer") && at(i + 1) == "(" &&
            is_identifier(at(i + 2)) && at(i + 3) == ")") {
            r.types[at(i + 2)] = at(i) == "CpmDeclareSimple" ? kind::simple : kind::pointer;
            i += 3;
            continue;
        }
        if (at(i) != "CpmInvokable") continue;
        function f;
        f.line = t[i].line;
        if (!is_identifier(at(i + 1)) || at(i + 2) != "(")
            fail(file, f.line, "expected `CpmInvokable name(arguments)`");
        f.name = at(i + 1);
        std::size_t j = i + 3;
        if (at(j) == "void" && at(j + 1) == ")") ++j;
        while (at(j) != ")") {
            argument a;
            if (!is_identifier(at(j)))
                fail(file, t[std::min(j, t.size() - 1)].line,
                     f.name + ": expected an argument type");
            a.type = at(j++);
            if (at(j) == "*") {
                a.array = true;
                ++j;
            }
            if (!is_identifier(at(j)))
                fail(file, t[std::min(j, t.size() - 1)].line,
                     f.name + ": expected `type name` or `type *name` (one word for the type)");
            a.name = at(j++);
            f.args.push_back(a);
            if (at(j) == ",")
                ++j;
            else if (at(j) != ")")
                fail(file, t[std::min(j, t.size() - 1)].line,
                     f.name + ": expected , or ) after argument " + a.name);
        }
        i = j;
        bool seen = false;
        for (const auto& g : r.functions)
            seen = seen || g.name == f.name;  // a prototype and its definition: once
        if (!seen) r.functions.push_back(f);
    }
    for (auto& f : r.functions) {
        for (std::size_t k = 0; k < f.args.size(); ++k) {
            auto& a = f.args[k];
            auto it = r.types.find(a.type);
            if (it == r.types.end())
                fail(file, f.line,
                     f.name + ": argument " + a.name + " has type " + a.type +
                         ", which Cpm does not know; declare it with CpmDeclareSimple(" + a.type +
                         ") or CpmDeclarePointer(" + a.type + ") before the function");
            a.k = it->second;
            if (a.array && (k == 0 || f.args[k - 1].type != "CpmDim" || f.args[k - 1].array))
                fail(file, f.line,
                     f.name + ": array argument " + a.name +
                         " must follow a CpmDim argument (its length)");
        }
    }
    return r;
}

std::string parameter_list(const function& f) {
    std::string s;
    for (const auto& a : f.args)
        s += ", " + a.type + (a.array ? " *" : " ") + a.name;
    return s;
}

// Code that adds argument a's bytes to `n` (sizing) or writes them at cpm_p + cpm_o (packing).
void size_code(std::ostream& o, const argument& a, const std::string& dim) {
    if (!a.array && a.k == kind::simple) {
        o << "    cpm_n = CPM_COVERSE_ALIGN(cpm_n) + sizeof(" << a.type << ");\n";
    } else if (!a.array) {
        o << "    cpm_n = CPM_COVERSE_ALIGN(cpm_n) + sizeof(size_t);\n"
          << "    cpm_n = CPM_COVERSE_ALIGN(cpm_n) + (size_t)(CpmPtrSize_" << a.type << "("
          << a.name << "));\n";
    } else if (a.k == kind::simple) {
        o << "    cpm_n = CPM_COVERSE_ALIGN(cpm_n) + (size_t)(" << dim << " > 0 ? " << dim
          << " : 0) * sizeof(" << a.type << ");\n";
    } else {
        o << "    for (cpm_i = 0; cpm_i < " << dim << "; ++cpm_i) {\n"
          << "        cpm_n = CPM_COVERSE_ALIGN(cpm_n) + sizeof(size_t);\n"
          << "        cpm_n = CPM_COVERSE_ALIGN(cpm_n) + (size_t)(CpmPtrSize_" << a.type << "("
          << a.name << "[cpm_i]));\n"
          << "    }\n";
    }
}

void pack_code(std::ostream& o, const argument& a, const std::string& dim) {
    if (!a.array && a.k == kind::simple) {
        o << "    cpm_o = CPM_COVERSE_ALIGN(cpm_o);\n"
          << "    memcpy(cpm_p + cpm_o, &" << a.name << ", sizeof(" << a.type << "));\n"
          << "    CpmPack_" << a.type << "((" << a.type << " *)(void *)(cpm_p + cpm_o));\n"
          << "    cpm_o += sizeof(" << a.type << ");\n";
    } else if (!a.array) {
        o << "    cpm_o = CPM_COVERSE_ALIGN(cpm_o);\n"
          << "    cpm_s = (size_t)(CpmPtrSize_" << a.type << "(" << a.name << "));\n"
          << "    memcpy(cpm_p + cpm_o, &cpm_s, sizeof cpm_s);\n"
          << "    cpm_o = CPM_COVERSE_ALIGN(cpm_o + sizeof cpm_s);\n"
          << "    CpmPtrPack_" << a.type << "(cpm_p + cpm_o, " << a.name << ");\n"
          << "    cpm_o += cpm_s;\n";
    } else if (a.k == kind::simple) {
        o << "    cpm_o = CPM_COVERSE_ALIGN(cpm_o);\n"
          << "    for (cpm_i = 0; cpm_i < " << dim << "; ++cpm_i) {\n"
          << "        memcpy(cpm_p + cpm_o, &" << a.name << "[cpm_i], sizeof(" << a.type << "));\n"
          << "        CpmPack_" << a.type << "((" << a.type << " *)(void *)(cpm_p + cpm_o));\n"
          << "        cpm_o += sizeof(" << a.type << ");\n"
          << "    }\n";
    } else {
        o << "    for (cpm_i = 0; cpm_i < " << dim << "; ++cpm_i) {\n"
          << "        cpm_o = CPM_COVERSE_ALIGN(cpm_o);\n"
          << "        cpm_s = (size_t)(CpmPtrSize_" << a.type << "(" << a.name << "[cpm_i]));\n"
          << "        memcpy(cpm_p + cpm_o, &cpm_s, sizeof cpm_s);\n"
          << "        cpm_o = CPM_COVERSE_ALIGN(cpm_o + sizeof cpm_s);\n"
          << "        CpmPtrPack_" << a.type << "(cpm_p + cpm_o, " << a.name << "[cpm_i]);\n"
          << "        cpm_o += cpm_s;\n"
          << "    }\n";
    }
}

void unpack_code(std::ostream& o, const argument& a, const std::string& dim) {
    if (!a.array && a.k == kind::simple) {
        o << "    cpm_o = CPM_COVERSE_ALIGN(cpm_o);\n"
          << "    memcpy(&" << a.name << ", cpm_p + cpm_o, sizeof(" << a.type << "));\n"
          << "    CpmUnpack_" << a.type << "(&" << a.name << ");\n"
          << "    cpm_o += sizeof(" << a.type << ");\n";
    } else if (!a.array) {
        o << "    cpm_o = CPM_COVERSE_ALIGN(cpm_o);\n"
          << "    memcpy(&cpm_s, cpm_p + cpm_o, sizeof cpm_s);\n"
          << "    cpm_o = CPM_COVERSE_ALIGN(cpm_o + sizeof cpm_s);\n"
          << "    " << a.name << " = (" << a.type << ")(void *)(cpm_p + cpm_o);\n"
          << "    CpmPtrUnpack_" << a.type << "(" << a.name << ");\n"
          << "    cpm_o += cpm_s;\n";
    } else if (a.k == kind::simple) {
        o << "    cpm_o = CPM_COVERSE_ALIGN(cpm_o);\n"
          << "    " << a.name << " = (" << a.type << " *)(void *)(cpm_p + cpm_o);\n"
          << "    for (cpm_i = 0; cpm_i < " << dim << "; ++cpm_i)\n"
          << "        CpmUnpack_" << a.type << "(&" << a.name << "[cpm_i]);\n"
          << "    cpm_o += (size_t)(" << dim << " > 0 ? " << dim << " : 0) * sizeof(" << a.type
          << ");\n";
    } else {
        o << "    " << a.name << " = (" << a.type << " *)malloc(sizeof(" << a.type
          << ") * (size_t)(" << dim << " > 0 ? " << dim << " : 1));\n"
          << "    for (cpm_i = 0; cpm_i < " << dim << "; ++cpm_i) {\n"
          << "        cpm_o = CPM_COVERSE_ALIGN(cpm_o);\n"
          << "        memcpy(&cpm_s, cpm_p + cpm_o, sizeof cpm_s);\n"
          << "        cpm_o = CPM_COVERSE_ALIGN(cpm_o + sizeof cpm_s);\n"
          << "        " << a.name << "[cpm_i] = (" << a.type << ")(void *)(cpm_p + cpm_o);\n"
          << "        CpmPtrUnpack_" << a.type << "(" << a.name << "[cpm_i]);\n"
          << "        cpm_o += cpm_s;\n"
          << "    }\n";
    }
}

void free_code(std::ostream& o, const argument& a, const std::string& dim) {
    if (a.k != kind::pointer) return;
    if (!a.array) {
        o << "    CpmPtrFree_" << a.type << "(" << a.name << ");\n";
        return;
    }
    o << "    for (cpm_i = 0; cpm_i < " << dim << "; ++cpm_i)\n"
      << "        CpmPtrFree_" << a.type << "(" << a.name << "[cpm_i]);\n"
      << "    free(" << a.name << ");\n";
}

std::string generate(const std::string& source_name, const scan_result& r) {
    std::ostringstream o;
    o << "/* Generated by coverse-cpm from " << source_name
      << ": Cpm launchers and invokers. Do not edit;\n"
      << " * include it once, in that file, after the types it packs are declared. */\n"
      << "#include <conv-cpm.h>\n\n";
    for (const auto& f : r.functions) {
        const std::string params = parameter_list(f);
        const std::string plain = params.empty() ? "void" : params.substr(2);
        o << "CpmInvokable " << f.name << "(" << plain << ");\n"
          << "CpvStaticDeclare(int, CpmIndex_" << f.name << ");\n\n";
        // The invoker.
        o << "static void CpmInvoke_" << f.name << "(void *cpm_msg)\n{\n"
          << "    char *cpm_p = (char *)cpm_msg + CPM_COVERSE_ARGS;\n"
          << "    size_t cpm_o = 0, cpm_s = 0;\n"
          << "    int cpm_i = 0;\n";
        for (const auto& a : f.args)
            o << "    " << a.type << (a.array ? " *" : " ") << a.name << ";\n";
        o << "    (void)cpm_p; (void)cpm_o; (void)cpm_s; (void)cpm_i;\n";
        for (std::size_t k = 0; k < f.args.size(); ++k)
            unpack_code(o, f.args[k], k ? f.args[k - 1].name : "");
        o << "    " << f.name << "(";
        for (std::size_t k = 0; k < f.args.size(); ++k)
            o << (k ? ", " : "") << f.args[k].name;
        o << ");\n";
        for (std::size_t k = 0; k < f.args.size(); ++k)
            free_code(o, f.args[k], k ? f.args[k - 1].name : "");
        o << "    CmiFree(cpm_msg);\n}\n\n";
        // The launcher.
        o << "void Cpm_" << f.name << "(CpmDestination cpm_ctrl" << params << ")\n{\n"
          << "    size_t cpm_n = 0, cpm_o = 0, cpm_s = 0;\n"
          << "    int cpm_i = 0;\n"
          << "    char *cpm_msg, *cpm_p;\n"
          << "    (void)cpm_s; (void)cpm_i;\n";
        for (std::size_t k = 0; k < f.args.size(); ++k)
            size_code(o, f.args[k], k ? f.args[k - 1].name : "");
        o << "    cpm_msg = (char *)CpmCoverseAlloc(cpm_ctrl, cpm_n);\n"
          << "    cpm_p = cpm_msg + CPM_COVERSE_ARGS;\n"
          << "    (void)cpm_p;\n";
        for (std::size_t k = 0; k < f.args.size(); ++k)
            pack_code(o, f.args[k], k ? f.args[k - 1].name : "");
        o << "    (void)cpm_o;\n"
          << "    CpmCoverseSend(cpm_ctrl, cpm_msg, CpvAccess(CpmIndex_" << f.name << "));\n}\n\n";
    }
    o << "static void CpmInitializeThisModule(void) __attribute__((unused));\n"
      << "static void CpmInitializeThisModule(void)\n{\n";
    for (const auto& f : r.functions)
        o << "    CpvInitialize(int, CpmIndex_" << f.name << ");\n"
          << "    CpvAccess(CpmIndex_" << f.name << ") = CmiRegisterHandler(CpmInvoke_" << f.name
          << ");\n";
    o << "}\n";
    return o.str();
}

int usage(std::ostream& to, int status) {
    to << "usage: coverse-cpm FILE.c [-o OUTPUT]\n"
          "Reads FILE.c's CpmInvokable functions and CpmDeclareSimple/CpmDeclarePointer\n"
          "declarations and writes their launchers and invokers to FILE.cpm.h (beside\n"
          "FILE.c, or OUTPUT). FILE.c includes it once, after the types it packs. The\n"
          "equivalent of `charmc -gen-cpm FILE.c`.\n";
    return status;
}

}  // namespace

int main(int argc, char** argv) {
    std::string input, output;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") return usage(std::cout, 0);
        if (a == "-o" && i + 1 < argc) {
            output = argv[++i];
        } else if (!a.empty() && a[0] == '-') {
            std::cerr << "coverse-cpm: unknown option " << a << "\n";
            return usage(std::cerr, 2);
        } else if (input.empty()) {
            input = a;
        } else {
            return usage(std::cerr, 2);
        }
    }
    if (input.empty()) return usage(std::cerr, 2);
    if (output.empty()) {
        output = input;
        if (output.size() > 2 && output.compare(output.size() - 2, 2, ".c") == 0)
            output.resize(output.size() - 2);
        output += ".cpm.h";
    }
    std::ifstream in(input);
    if (!in) {
        std::cerr << "coverse-cpm: cannot read " << input << ": " << std::strerror(errno) << "\n";
        return 1;
    }
    std::stringstream text;
    text << in.rdbuf();
    try {
        const scan_result r = scan(input, tokenize(text.str()));
        const std::string base = input.substr(input.find_last_of('/') + 1);
        const std::string code = generate(base, r);
        std::ofstream out(output);
        if (!(out << code)) {
            std::cerr << "coverse-cpm: cannot write " << output << "\n";
            return 1;
        }
    } catch (const std::exception& e) {
        std::cerr << "coverse-cpm: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
