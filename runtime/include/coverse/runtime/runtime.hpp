// The whole runtime layer in one include.
#pragma once

#include <coverse/runtime/channel.hpp>
#include <coverse/runtime/event.hpp>
#include <coverse/runtime/io.hpp>
#include <coverse/runtime/reactor.hpp>
#include <coverse/runtime/scheduler.hpp>
#include <coverse/runtime/scope.hpp>
#include <coverse/runtime/semaphore.hpp>
#include <coverse/runtime/settings.hpp>
#include <coverse/runtime/sync_wait.hpp>
#include <coverse/runtime/task.hpp>
#include <coverse/runtime/timer.hpp>
#include <coverse/runtime/trace.hpp>
#include <coverse/runtime/when.hpp>
