// channel<T>: a bounded FIFO between tasks of one scheduler. A full channel suspends the
// sender (back-pressure, never a drop); capacity 0 makes every send a rendezvous.
// close() wakes everyone: receivers drain what is buffered, then get nullopt.
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <utility>

#include <coverse/runtime/detail/waiter.hpp>

namespace coverse {

template <class T>
class channel {
public:
    explicit channel(std::size_t capacity) : _capacity(capacity) {}
    channel(const channel&) = delete;
    channel& operator=(const channel&) = delete;

    std::size_t size() const noexcept { return _buffer.size(); }
    std::size_t capacity() const noexcept { return _capacity; }
    bool closed() const noexcept { return _closed; }

    /// Wakes every waiting sender (their send returns false) and receiver.
    void close() noexcept {
        _closed = true;
        while (auto* w = _senders.pop_front())
            w->wake();
        while (auto* w = _receivers.pop_front())
            w->wake();
    }

    /// Non-blocking send; false when full or closed (the value is left in `v`).
    bool try_send(T& v) {
        if (_closed) return false;
        if (!_receivers.empty()) {
            auto* r = static_cast<recv_awaiter*>(_receivers.pop_front());
            r->_value.emplace(std::move(v));
            r->wake();
            return true;
        }
        if (_buffer.size() < _capacity) {
            _buffer.push_back(std::move(v));
            return true;
        }
        return false;
    }

    /// Non-blocking receive.
    std::optional<T> try_recv() {
        if (!_buffer.empty()) {
            std::optional<T> v(std::move(_buffer.front()));
            _buffer.pop_front();
            if (auto* s = static_cast<send_awaiter*>(_senders.pop_front())) {
                _buffer.push_back(std::move(s->_value));
                s->_accepted = true;
                s->wake();
            }
            return v;
        }
        if (auto* s = static_cast<send_awaiter*>(_senders.pop_front())) {  // capacity 0
            std::optional<T> v(std::move(s->_value));
            s->_accepted = true;
            s->wake();
            return v;
        }
        return std::nullopt;
    }

    class send_awaiter : public detail::cancellable_wait<send_awaiter> {
    public:
        send_awaiter(channel& c, T v) : _c(c), _value(std::move(v)) {}
        ~send_awaiter() { this->leave_if_waiting(); }
        bool try_now() {
            if (_c._closed) return true;  // resumes with false
            _accepted = _c.try_send(_value);
            return _accepted;
        }
        void enqueue() noexcept { _c._senders.push_back(this); }
        void dequeue() noexcept { _c._senders.remove(this); }
        /// true: the value is in the channel; false: the channel was closed.
        bool await_resume() const {
            this->check_cancelled();
            return _accepted;
        }

    private:
        friend class channel;
        channel& _c;
        T _value;
        bool _accepted = false;
    };

    class recv_awaiter : public detail::cancellable_wait<recv_awaiter> {
    public:
        explicit recv_awaiter(channel& c) noexcept : _c(c) {}
        ~recv_awaiter() { this->leave_if_waiting(); }
        bool try_now() {
            _value = _c.try_recv();
            return _value.has_value() || _c._closed;
        }
        void enqueue() noexcept { _c._receivers.push_back(this); }
        void dequeue() noexcept { _c._receivers.remove(this); }
        /// The next value, or nullopt once the channel is closed and drained.
        std::optional<T> await_resume() {
            this->check_cancelled();
            return std::move(_value);
        }

    private:
        friend class channel;
        channel& _c;
        std::optional<T> _value;
    };

    /// `co_await ch.send(v)`: suspends while the channel is full. Returns false if the
    /// channel is (or gets) closed. Throws cancelled_error on cancellation.
    send_awaiter send(T v) { return send_awaiter{*this, std::move(v)}; }
    /// `co_await ch.recv()`: suspends while the channel is empty.
    recv_awaiter recv() noexcept { return recv_awaiter{*this}; }

private:
    std::size_t _capacity;
    std::deque<T> _buffer;
    bool _closed = false;
    detail::waiter_list _senders;
    detail::waiter_list _receivers;
};

}  // namespace coverse
