// Settings registry: every coverse setting in one list (name, type, default, meaning, the
// layer that reads it), where a setting's value comes from — `++set NAME=VALUE` on the
// command line, then COVERSE_<NAME>, CMI_VMI_<NAME>, then the default — and typed
// readers that turn a malformed value into an error naming the variable. coverse-info shows it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace coverse::settings {

/// How a setting's value is written.
enum class value_type {
    switch_,       ///< 1/0, on/off, true/false, yes/no (any case)
    count,         ///< a whole number
    bytes,         ///< a whole number of bytes
    seconds,       ///< a number of seconds, decimals allowed ("0.5")
    microseconds,  ///< a whole number of microseconds
    string,        ///< any text
    choice,        ///< one of `setting_info::choices`
};

/// "switch", "count", "bytes", "seconds", "microseconds", "string", "choice".
std::string_view to_string(value_type type) noexcept;

/// One entry of the registry. All strings are static.
struct setting_info {
    std::string_view name;  ///< "MAXIMUM_HANDLES": the part after COVERSE_ / CMI_VMI_
    value_type type = value_type::string;
    std::string_view default_value;  ///< as it would be written: "10000", "on", "300", ""
    std::string_view meaning;        ///< one line
    std::string_view layer;          ///< the folder that reads it: alloc, runtime, net, rdma, ...
    std::span<const std::string_view> choices = {};  ///< choice: every accepted value
    /// count, bytes, microseconds: the accepted range. seconds: the range in microseconds.
    std::uint64_t minimum = 0;
    std::uint64_t maximum = std::numeric_limits<std::uint64_t>::max();
    /// count, bytes: "off" (lower case) is accepted and means 0.
    bool off_is_zero = false;
    /// Nothing reads it yet: the layer named will (DESIGN.md's protocols, the machine core).
    bool planned = false;
};

/// Every setting, grouped by layer, in the order coverse-info prints them.
std::span<const setting_info> all() noexcept;

/// The entry named `name` (exact spelling, without prefix), or null.
const setting_info* find(std::string_view name) noexcept;

/// The entry named `name`; throws std::invalid_argument naming it (with a suggestion when a
/// registered name is close) if there is none.
const setting_info& info(std::string_view name);

/// Where a value came from, highest precedence first.
enum class source { command_line, environment, default_value };

/// "command line", "environment", "default".
std::string_view to_string(source from) noexcept;

/// A setting's effective value and where it came from.
struct resolved {
    std::string name;
    std::string value;
    source from = source::default_value;
    /// What supplied it: "CMI_VMI_MAXIMUM_HANDLES", "++set MAXIMUM_HANDLES", or "" for the
    /// default. `variable + "=" + value` reads as what the user wrote.
    std::string variable;
    /// Lower-precedence spellings that are set too and therefore ignored, as "NAME=VALUE".
    std::vector<std::string> shadowed;
};

/// The effective value of `name`. Throws std::invalid_argument for an unknown name.
resolved resolve(std::string_view name);

/// What the form of `value` should be for `setting`: "1/0, on/off, true/false or yes/no",
/// "a whole number from 1 to 32768", ...
std::string expected_form(const setting_info& setting);

/// nullopt when `value` is a valid value of `setting`; otherwise "expected <form>", for a
/// message that names the variable and the value before it.
std::optional<std::string> check(const setting_info& setting, std::string_view value);

// Typed readers. Each resolves the setting and parses it; a value that does not parse is a
// std::runtime_error naming the variable, the value and the expected form. Asking for a type
// the setting does not have (count() of a switch) is a std::logic_error: a coverse bug.

/// count and bytes settings.
std::size_t count(std::string_view name);
/// switch settings.
bool enabled(std::string_view name);
/// seconds and microseconds settings.
std::chrono::microseconds duration(std::string_view name);
/// string and choice settings.
std::string text(std::string_view name);

/// Removes every `++set NAME=VALUE` (and `++set=NAME=VALUE`) from argv, keeping the order of
/// the rest and argv[argc] == nullptr, and records each as a command-line override that takes
/// precedence over the environment everywhere (alloc::env_setting included). Call it at
/// start-up, before the layers read their settings. An unknown NAME, a missing `=VALUE` or a
/// malformed value is a std::invalid_argument that says what was wrong and that
/// `coverse-info -c` lists the settings; argv is left untouched then.
void consume_command_line(int& argc, char** argv);

/// Forgets every command-line override (tests; tools that parse several command lines).
void clear_command_line();

/// One warning for each environment variable that looks like a setting (COVERSE_* or
/// CMI_VMI_*) but names none, with a did-you-mean suggestion when a registered name is
/// close. Sorted by variable. Variables of coverse's scripts (COVERSE_FUZZ_*) are not
/// settings and do not warn.
std::vector<std::string> unknown_environment_warnings();

/// The registered name closest to `name` (case-insensitive edit distance), or "" when none
/// is close enough to be a likely misspelling.
std::string_view suggest(std::string_view name);

}  // namespace coverse::settings
