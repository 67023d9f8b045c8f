// The Windows IPC transport: a message-mode named pipe, the same frames as the Unix socket
// (docs/ipc.md). Overlapped I/O throughout, so that shutdown() can wake a blocked accept or
// receive from another thread, as shutdown(2) does on Linux.
#pragma once

#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace fl::win32 {

// The SID of this process's user, as S-1-5-...
std::string current_user_sid();
// The user SID of another process (throws when it cannot be opened).
std::string process_user_sid(std::uint32_t pid);
// The user SID of a process handle with PROCESS_QUERY_LIMITED_INFORMATION.
std::string process_handle_user_sid(HANDLE process);
// The user SID behind the client end of a loopback TCP connection to server_port; nullopt when
// no such live connection exists here.
std::optional<std::string> tcp_client_sid(const std::string &client_ip, std::uint16_t client_port,
                                          std::uint16_t server_port);

// The kernel object type of a handle of this process ("Section", "Semaphore", ...; "" when
// Windows does not say).
std::string object_type_name(std::intptr_t handle);

class PipeConnection {
 public:
  // Client side: connects to a listening service; waits up to timeout_ms while every instance
  // is busy. NotFound when nothing listens on `name`.
  static std::shared_ptr<PipeConnection> connect(const std::string &name, std::uint32_t timeout_ms);
  PipeConnection(HANDLE pipe, bool server);
  ~PipeConnection();
  PipeConnection(const PipeConnection &) = delete;
  PipeConnection &operator=(const PipeConnection &) = delete;

  // One whole message; nullopt once the peer closed or shutdown() ran. A message over max_bytes
  // is read to its end, so the stream stays in step, and reported as InvalidArgument; or, with
  // `oversized`, returned cut to its first max_bytes with *oversized set (the server answers it
  // with the request id of its header).
  std::optional<std::string> recv(std::size_t max_bytes, bool *oversized = nullptr);
  // Whole message; false when the peer is gone.
  bool send(const std::string &data);
  // Wakes a blocked recv (it returns nullopt) and fails later calls; the handle stays open
  // until close() or destruction.
  void shutdown();
  void close();
  // True once the peer closed its end or its process exited (or shutdown() ran): what a wait
  // done for this peer checks, since nobody reads the pipe meanwhile. Never blocks.
  bool peer_gone();

  // The peer's process id and user SID: the server side's SO_PEERCRED. The first call that
  // identifies the peer opens its process and holds it until close(): a process id is not
  // reused while a handle to the process is open, so later duplications come from the process
  // that was identified, even after it exited.
  std::uint32_t peer_pid() const;
  std::string peer_user_sid() const;
  // Duplicates the peer process's `handle` into this one, with the same access, and checks it
  // names an object of the type `role` needs (nt_handles.h). The caller owns the result; nothing
  // is left open when this throws (handles.cpp).
  std::intptr_t duplicate_from_peer(std::uint64_t handle, const std::string &role) const;

 private:
  bool wait_io(OVERLAPPED &ov, DWORD *transferred);
  HANDLE pinned_peer() const;  // the held peer process (PROCESS_QUERY_LIMITED_INFORMATION)
  HANDLE pipe_;
  mutable HANDLE peer_process_ = nullptr;
  mutable std::mutex peer_mutex_;
  HANDLE cancel_;  // manual-reset: set by shutdown()
  bool server_;
  std::mutex send_mutex_;
};

class PipeListener {
 public:
  // sddl: the security descriptor of every instance (who may connect). Remote clients are
  // rejected; the first instance is created with FILE_FLAG_FIRST_PIPE_INSTANCE, so a second
  // service (or a squatter that got there first) makes this throw Conflict.
  PipeListener(const std::string &name, const std::string &sddl);
  ~PipeListener();
  PipeListener(const PipeListener &) = delete;
  PipeListener &operator=(const PipeListener &) = delete;

  // Blocks until a client connects; nullptr once close() ran.
  std::shared_ptr<PipeConnection> accept();
  void close();
  const std::string &name() const { return name_; }

 private:
  HANDLE make_instance(bool first);
  std::string name_;
  std::wstring wname_;
  PSECURITY_DESCRIPTOR sd_ = nullptr;
  HANDLE next_ = INVALID_HANDLE_VALUE;
  HANDLE cancel_;
};

}  // namespace fl::win32
