// TcpStore: a tiny key-value store over TCP for bootstrapping ranks that MPI did not start (the torchrun-style
// environment: MASTER_ADDR, MASTER_PORT): rank 0 serves it, every rank (rank 0 too) is a client. Its one job is
// to hand the NCCL unique id (and similar small blobs) from one rank to the others.
//   set(key, value)   stores value under key (overwrites)
//   get(key)          waits until key is set, then returns its value; throws Error naming the key, the server and
//                     the timeout when it never comes (a rank that died before publishing)
// Wire format (plain sockets, one connection per client): a request is an op byte ('S' or 'G'), the key length and
// key, and for 'S' the value length and value (lengths as little-endian uint32); the reply to 'G' is the value
// length and value, sent once the key exists. The server runs on its own thread until the store is destroyed.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace fp8train::dist {

class TcpStore {
 public:
  // is_server: bind host:port and serve (rank 0); every instance then connects to host:port as a client, retrying
  // until timeout_seconds pass. port 0 with is_server binds any free port (port() tells which: for tests).
  TcpStore(const std::string& host, int port, bool is_server, double timeout_seconds);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::string& value);
  std::string get(const std::string& key);
  int port() const { return port_; }

 private:
  struct Server;
  std::unique_ptr<Server> server_;
  std::string host_;
  int port_ = 0;
  int fd_ = -1;
  double timeout_seconds_ = 0;
};

}  // namespace fp8train::dist
