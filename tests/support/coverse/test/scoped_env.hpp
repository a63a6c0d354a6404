// scoped_env: sets or unsets one environment variable for a scope and restores it after,
// for tests of settings that are read from the environment. Shared by every test folder.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace coverse::test {

class scoped_env {
public:
    /// `value` null: the variable is unset for the scope.
    scoped_env(std::string name, const char* value) : _name(std::move(name)) {
        if (const char* old = std::getenv(_name.c_str())) _old = old;
        if (value != nullptr)
            ::setenv(_name.c_str(), value, 1);
        else
            ::unsetenv(_name.c_str());
    }
    ~scoped_env() {
        if (_old)
            ::setenv(_name.c_str(), _old->c_str(), 1);
        else
            ::unsetenv(_name.c_str());
    }
    scoped_env(const scoped_env&) = delete;
    scoped_env& operator=(const scoped_env&) = delete;

private:
    std::string _name;
    std::optional<std::string> _old;
};

}  // namespace coverse::test
