// TCP key-value store for bootstrapping (see tcp_store.h).
#include "dist/tcp_store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common/error.h"

namespace fp8train::dist {
namespace {

using Clock = std::chrono::steady_clock;

// Sends all bytes; false on a closed or failed socket.
bool send_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Receives exactly n bytes, waiting at most until `deadline` (none when null); false on close, error or timeout.
bool recv_all(int fd, void* data, size_t n, const Clock::time_point* deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    if (deadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd pfd{fd, POLLIN, 0};
      const int rc = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left, 1000)));
      if (rc < 0 && errno != EINTR) return false;
      if (rc <= 0) continue;
    }
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool send_blob(int fd, const std::string& s) {
  const uint32_t n = static_cast<uint32_t>(s.size());
  const unsigned char len[4] = {static_cast<unsigned char>(n), static_cast<unsigned char>(n >> 8),
                                static_cast<unsigned char>(n >> 16), static_cast<unsigned char>(n >> 24)};
  return send_all(fd, len, 4) && send_all(fd, s.data(), s.size());
}

bool recv_blob(int fd, std::string& s, const Clock::time_point* deadline) {
  unsigned char len[4];
  if (!recv_all(fd, len, 4, deadline)) return false;
  const uint32_t n = len[0] | (len[1] << 8) | (len[2] << 16) | (static_cast<uint32_t>(len[3]) << 24);
  if (n > (64u << 20)) return false;  // a store value is a small blob; anything larger is a stray connection
  s.resize(n);
  return recv_all(fd, s.data(), n, deadline);
}

}  // namespace

struct TcpStore::Server {
  int listen_fd = -1;
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::map<std::string, std::string> values;
  std::vector<std::thread> clients;
  std::thread acceptor;

  ~Server() {
    stop = true;
    if (listen_fd >= 0) ::shutdown(listen_fd, SHUT_RDWR);
    if (acceptor.joinable()) acceptor.join();
    for (std::thread& t : clients)
      if (t.joinable()) t.join();
    if (listen_fd >= 0) ::close(listen_fd);
  }

  void serve_client(int fd) {
    for (;;) {
      char op = 0;
      const Clock::time_point never = Clock::now() + std::chrono::hours(24 * 365);
      // Wake up regularly to notice stop.
      bool got = false;
      while (!stop) {
        pollfd pfd{fd, POLLIN, 0};
        if (::poll(&pfd, 1, 200) > 0) {
          got = recv_all(fd, &op, 1, &never);
          break;
        }
      }
      if (!got) break;
      std::string key, value;
      if (!recv_blob(fd, key, &never)) break;
      if (op == 'S') {
        if (!recv_blob(fd, value, &never)) break;
        std::lock_guard<std::mutex> lock(mutex);
        values[key] = value;
        continue;
      }
      if (op != 'G') break;
      bool found = false;
      while (!stop && !found) {
        {
          std::lock_guard<std::mutex> lock(mutex);
          const auto it = values.find(key);
          if (it != values.end()) {
            value = it->second;
            found = true;
          }
        }
        if (!found) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      if (!found || !send_blob(fd, value)) break;
    }
    ::close(fd);
  }
};

TcpStore::TcpStore(const std::string& host, int port, bool is_server, double timeout_seconds)
    : host_(host), port_(port), timeout_seconds_(timeout_seconds) {
  FP8T_CHECK(timeout_seconds > 0, "TCP store: the timeout must be positive, got {} s", timeout_seconds);
  FP8T_CHECK(port >= 0 && port <= 65535, "TCP store: port {} is not a TCP port (MASTER_PORT)", port);
  if (is_server) {
    server_ = std::make_unique<Server>();
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    FP8T_CHECK(fd >= 0, "TCP store: cannot create a socket: {}", std::strerror(errno));
    server_->listen_fd = fd;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    FP8T_CHECK(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0,
               "TCP store: cannot listen on port {} (MASTER_PORT): {}", port, std::strerror(errno));
    FP8T_CHECK(::listen(fd, 1024) == 0, "TCP store: listen on port {} failed: {}", port, std::strerror(errno));
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    Server* s = server_.get();
    s->acceptor = std::thread([s] {
      while (!s->stop) {
        pollfd pfd{s->listen_fd, POLLIN, 0};
        if (::poll(&pfd, 1, 200) <= 0) continue;
        const int c = ::accept(s->listen_fd, nullptr, nullptr);
        if (c < 0) continue;
        s->clients.emplace_back([s, c] { s->serve_client(c); });
      }
    });
  }
  // Connect (the server may start later than this client): retry until the deadline.
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port_);
  FP8T_CHECK(::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found) == 0 && found,
             "TCP store: cannot resolve host '{}' (MASTER_ADDR)", host);
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_seconds);
  std::string last_error;
  while (fd_ < 0) {
    const int fd = ::socket(found->ai_family, found->ai_socktype, found->ai_protocol);
    if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
      fd_ = fd;
      break;
    }
    last_error = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    if (Clock::now() > deadline) {
      ::freeaddrinfo(found);
      FP8T_FAIL("TCP store: cannot connect to {}:{} (MASTER_ADDR:MASTER_PORT) within {} s: {}; is rank 0 running?",
                host, port_, timeout_seconds, last_error);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::freeaddrinfo(found);
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
  server_.reset();
}

void TcpStore::set(const std::string& key, const std::string& value) {
  const char op = 'S';
  FP8T_CHECK(send_all(fd_, &op, 1) && send_blob(fd_, key) && send_blob(fd_, value),
             "TCP store {}:{}: the connection broke while setting '{}'", host_, port_, key);
}

std::string TcpStore::get(const std::string& key) {
  const char op = 'G';
  FP8T_CHECK(send_all(fd_, &op, 1) && send_blob(fd_, key),
             "TCP store {}:{}: the connection broke while asking for '{}'", host_, port_, key);
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds_));
  std::string value;
  FP8T_CHECK(recv_blob(fd_, value, &deadline),
             "TCP store {}:{}: '{}' did not arrive within {} s (did rank 0 die, or never start?)", host_, port_, key,
             timeout_seconds_);
  return value;
}

}  // namespace fp8train::dist
