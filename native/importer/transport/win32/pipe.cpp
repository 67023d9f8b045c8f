#include "pipe.h"

#include <sddl.h>

#include <vector>

#include "core/errors.h"
#include "platform/win32/win32_util.h"

namespace fl::win32 {

namespace {

constexpr DWORD kBufferBytes = 64 * 1024;

struct Event {
  HANDLE h = ::CreateEventW(nullptr, TRUE, FALSE, nullptr);
  ~Event() {
    if (h) ::CloseHandle(h);
  }
};

std::string sid_string(PSID sid) {
  LPWSTR text = nullptr;
  if (!::ConvertSidToStringSidW(sid, &text)) throw_last("ConvertSidToStringSid", ::GetLastError());
  std::wstring w(text);
  ::LocalFree(text);
  return std::string(w.begin(), w.end());  // SIDs are ASCII
}

std::string token_user_sid(HANDLE token) {
  DWORD n = 0;
  ::GetTokenInformation(token, TokenUser, nullptr, 0, &n);
  std::vector<unsigned char> buf(n ? n : 1);
  if (!::GetTokenInformation(token, TokenUser, buf.data(), n, &n))
    throw_last("GetTokenInformation", ::GetLastError());
  return sid_string(reinterpret_cast<TOKEN_USER *>(buf.data())->User.Sid);
}

}  // namespace

std::string current_user_sid() {
  HANDLE token = nullptr;
  if (!::OpenProcessToken(::GetCurrentProcess(), TOKEN_QUERY, &token))
    throw_last("OpenProcessToken", ::GetLastError());
  HandleGuard guard{token};
  return token_user_sid(token);
}

// -- connection -------------------------------------------------------------------------

PipeConnection::PipeConnection(HANDLE pipe, bool server)
    : pipe_(pipe), cancel_(::CreateEventW(nullptr, TRUE, FALSE, nullptr)), server_(server) {}

PipeConnection::~PipeConnection() {
  close();
  if (cancel_) ::CloseHandle(cancel_);
}

std::shared_ptr<PipeConnection> PipeConnection::connect(const std::string &name,
                                                        std::uint32_t timeout_ms) {
  const std::wstring wname = widen(name);
  const ULONGLONG deadline = ::GetTickCount64() + timeout_ms;
  for (;;) {
    HANDLE h = ::CreateFileW(wname.c_str(), GENERIC_READ | GENERIC_WRITE, 0, nullptr,
                             OPEN_EXISTING, FILE_FLAG_OVERLAPPED, nullptr);
    if (h != INVALID_HANDLE_VALUE) {
      DWORD mode = PIPE_READMODE_MESSAGE;
      if (!::SetNamedPipeHandleState(h, &mode, nullptr, nullptr)) {
        const DWORD err = ::GetLastError();
        ::CloseHandle(h);
        throw_last("SetNamedPipeHandleState", err);
      }
      return std::make_shared<PipeConnection>(h, false);
    }
    const DWORD err = ::GetLastError();
    if (err == ERROR_FILE_NOT_FOUND)
      throw Error(Code::NotFound, "no fenceline service listens on " + name +
                                      " (start `fenceline serve`, or pass its --pipe)");
    if (err != ERROR_PIPE_BUSY) throw_last("CreateFileW " + name, err);
    const ULONGLONG now = ::GetTickCount64();
    if (now >= deadline)
      throw Error(Code::ResourceExhausted, "every instance of " + name + " stayed busy");
    ::WaitNamedPipeW(wname.c_str(), static_cast<DWORD>(deadline - now));
  }
}

bool PipeConnection::wait_io(OVERLAPPED &ov, DWORD *transferred) {
  HANDLE both[2] = {ov.hEvent, cancel_};
  const DWORD w = ::WaitForMultipleObjects(2, both, FALSE, INFINITE);
  if (w != WAIT_OBJECT_0) {
    ::CancelIoEx(pipe_, &ov);
    ::GetOverlappedResult(pipe_, &ov, transferred, TRUE);  // the kernel is done with `ov`
    ::SetLastError(ERROR_OPERATION_ABORTED);
    return false;
  }
  return ::GetOverlappedResult(pipe_, &ov, transferred, FALSE) != 0;
}

std::optional<std::string> PipeConnection::recv(std::size_t max_bytes, bool *oversized) {
  if (oversized) *oversized = false;
  if (pipe_ == INVALID_HANDLE_VALUE || ::WaitForSingleObject(cancel_, 0) == WAIT_OBJECT_0)
    return std::nullopt;
  std::string buf(max_bytes ? max_bytes : 1, '\0');
  Event ev;
  OVERLAPPED ov{};
  ov.hEvent = ev.h;
  DWORD got = 0;
  BOOL ok = ::ReadFile(pipe_, &buf[0], static_cast<DWORD>(buf.size()), nullptr, &ov);
  DWORD err = ok ? 0 : ::GetLastError();
  if (!ok && err == ERROR_IO_PENDING) {
    ok = wait_io(ov, &got);
    err = ok ? 0 : ::GetLastError();
  } else if (ok || err == ERROR_MORE_DATA) {
    ::GetOverlappedResult(pipe_, &ov, &got, FALSE);
  }
  if (ok) {
    buf.resize(got);
    return buf;
  }
  if (err == ERROR_MORE_DATA) {
    buf.resize(got);  // the message's first max_bytes: its header, for the reply's request id
    // Consume the rest of the oversized message so the next read starts at a boundary.
    std::string rest(kBufferBytes, '\0');
    for (;;) {
      ::ResetEvent(ev.h);
      OVERLAPPED o2{};
      o2.hEvent = ev.h;
      DWORD n = 0;
      BOOL r = ::ReadFile(pipe_, &rest[0], kBufferBytes, nullptr, &o2);
      DWORD e2 = r ? 0 : ::GetLastError();
      if (!r && e2 == ERROR_IO_PENDING) {
        r = wait_io(o2, &n);
        e2 = r ? 0 : ::GetLastError();
      }
      if (r) break;
      if (e2 != ERROR_MORE_DATA) return std::nullopt;
    }
    if (oversized) {
      *oversized = true;
      return buf;
    }
    throw Error(Code::InvalidArgument,
                "message over " + std::to_string(max_bytes) + " bytes (docs/ipc.md)");
  }
  if (err == ERROR_BROKEN_PIPE || err == ERROR_PIPE_NOT_CONNECTED ||
      err == ERROR_OPERATION_ABORTED || err == ERROR_NO_DATA)
    return std::nullopt;
  throw_last("ReadFile", err);
}

bool PipeConnection::send(const std::string &data) {
  std::lock_guard<std::mutex> lock(send_mutex_);
  if (pipe_ == INVALID_HANDLE_VALUE) return false;
  Event ev;
  OVERLAPPED ov{};
  ov.hEvent = ev.h;
  DWORD put = 0;
  BOOL ok = ::WriteFile(pipe_, data.data(), static_cast<DWORD>(data.size()), nullptr, &ov);
  if (!ok && ::GetLastError() == ERROR_IO_PENDING) ok = wait_io(ov, &put);
  else if (ok) ::GetOverlappedResult(pipe_, &ov, &put, FALSE);
  return ok && put == data.size();
}

void PipeConnection::shutdown() {
  if (cancel_) ::SetEvent(cancel_);
}

void PipeConnection::close() {
  shutdown();
  std::lock_guard<std::mutex> lock(send_mutex_);
  if (pipe_ == INVALID_HANDLE_VALUE) return;
  if (server_) ::DisconnectNamedPipe(pipe_);
  ::CloseHandle(pipe_);
  pipe_ = INVALID_HANDLE_VALUE;
  std::lock_guard<std::mutex> peer_lock(peer_mutex_);
  if (peer_process_) ::CloseHandle(peer_process_);
  peer_process_ = nullptr;
}

bool PipeConnection::peer_gone() {
  std::lock_guard<std::mutex> lock(send_mutex_);  // close() takes it before closing pipe_
  if (pipe_ == INVALID_HANDLE_VALUE || ::WaitForSingleObject(cancel_, 0) == WAIT_OBJECT_0)
    return true;
  DWORD available = 0;
  if (!::PeekNamedPipe(pipe_, nullptr, 0, nullptr, &available, nullptr)) {
    const DWORD err = ::GetLastError();
    if (err == ERROR_BROKEN_PIPE || err == ERROR_PIPE_NOT_CONNECTED || err == ERROR_NO_DATA)
      return true;
  }
  // A killed peer's end closes a moment after it exits: its process says so first.
  std::lock_guard<std::mutex> peer_lock(peer_mutex_);
  DWORD code = 0;
  return peer_process_ && ::GetExitCodeProcess(peer_process_, &code) && code != STILL_ACTIVE;
}

std::uint32_t PipeConnection::peer_pid() const {
  ULONG pid = 0;
  BOOL ok = server_ ? ::GetNamedPipeClientProcessId(pipe_, &pid)
                    : ::GetNamedPipeServerProcessId(pipe_, &pid);
  if (!ok) throw_last("GetNamedPipeClientProcessId", ::GetLastError());
  return pid;
}

HANDLE PipeConnection::pinned_peer() const {
  std::lock_guard<std::mutex> lock(peer_mutex_);
  if (!peer_process_) {
    peer_process_ = ::OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, peer_pid());
    if (!peer_process_) throw_last("OpenProcess (peer)", ::GetLastError());
  }
  return peer_process_;
}

std::string PipeConnection::peer_user_sid() const {
  return process_handle_user_sid(pinned_peer());
}

std::string process_user_sid(std::uint32_t pid) {
  HANDLE proc = ::OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, pid);
  if (!proc) throw_last("OpenProcess (peer)", ::GetLastError());
  HandleGuard guard{proc};
  return process_handle_user_sid(proc);
}

std::string process_handle_user_sid(HANDLE proc) {
  HANDLE token = nullptr;
  const BOOL ok = ::OpenProcessToken(proc, TOKEN_QUERY, &token);
  const DWORD err = ::GetLastError();
  if (!ok) throw_last("OpenProcessToken (peer)", err);
  HandleGuard guard{token};
  return token_user_sid(token);
}

// -- listener ---------------------------------------------------------------------------

PipeListener::PipeListener(const std::string &name, const std::string &sddl)
    : name_(name), wname_(widen(name)), cancel_(::CreateEventW(nullptr, TRUE, FALSE, nullptr)) {
  if (name.rfind("\\\\.\\pipe\\", 0) != 0 || name.size() <= 9 || name.size() > 256)
    throw Error(Code::InvalidArgument,
                "pipe names are \\\\.\\pipe\\NAME, at most 256 characters, got '" + name + "'");
  if (!::ConvertStringSecurityDescriptorToSecurityDescriptorW(widen(sddl).c_str(), SDDL_REVISION_1,
                                                              &sd_, nullptr))
    throw Error(Code::InvalidArgument, "invalid pipe security descriptor '" + sddl + "'");
  next_ = make_instance(true);
}

PipeListener::~PipeListener() {
  close();
  if (next_ != INVALID_HANDLE_VALUE) ::CloseHandle(next_);
  if (sd_) ::LocalFree(sd_);
  if (cancel_) ::CloseHandle(cancel_);
}

HANDLE PipeListener::make_instance(bool first) {
  SECURITY_ATTRIBUTES sa{sizeof sa, sd_, FALSE};
  const DWORD open = PIPE_ACCESS_DUPLEX | FILE_FLAG_OVERLAPPED |
                     (first ? FILE_FLAG_FIRST_PIPE_INSTANCE : 0);
  const DWORD mode = PIPE_TYPE_MESSAGE | PIPE_READMODE_MESSAGE | PIPE_WAIT |
                     PIPE_REJECT_REMOTE_CLIENTS;
  HANDLE h = ::CreateNamedPipeW(wname_.c_str(), open, mode, PIPE_UNLIMITED_INSTANCES,
                                kBufferBytes, kBufferBytes, 0, &sa);
  if (h == INVALID_HANDLE_VALUE) {
    const DWORD err = ::GetLastError();
    if (first && (err == ERROR_ACCESS_DENIED || err == ERROR_PIPE_BUSY))
      throw Error(Code::Conflict, "another process already serves " + name_ +
                                      " (a second service, or a squatter)");
    throw_last("CreateNamedPipeW " + name_, err);
  }
  return h;
}

std::shared_ptr<PipeConnection> PipeListener::accept() {
  for (;;) {
    if (::WaitForSingleObject(cancel_, 0) == WAIT_OBJECT_0) return nullptr;
    if (next_ == INVALID_HANDLE_VALUE) next_ = make_instance(false);
    Event ev;
    OVERLAPPED ov{};
    ov.hEvent = ev.h;
    BOOL ok = ::ConnectNamedPipe(next_, &ov);
    DWORD err = ok ? 0 : ::GetLastError();
    if (!ok && err == ERROR_IO_PENDING) {
      HANDLE both[2] = {ev.h, cancel_};
      const DWORD w = ::WaitForMultipleObjects(2, both, FALSE, INFINITE);
      DWORD n = 0;
      if (w != WAIT_OBJECT_0) {
        ::CancelIoEx(next_, &ov);
        ::GetOverlappedResult(next_, &ov, &n, TRUE);
        ::CloseHandle(next_);
        next_ = INVALID_HANDLE_VALUE;
        return nullptr;
      }
      ok = ::GetOverlappedResult(next_, &ov, &n, FALSE);
      err = ok ? 0 : ::GetLastError();
    }
    if (ok || err == ERROR_PIPE_CONNECTED) {
      HANDLE h = next_;
      next_ = INVALID_HANDLE_VALUE;
      return std::make_shared<PipeConnection>(h, true);
    }
    // The client went away between connecting and our wait: recycle the instance.
    ::DisconnectNamedPipe(next_);
    if (err != ERROR_NO_DATA && err != ERROR_BROKEN_PIPE) throw_last("ConnectNamedPipe", err);
  }
}

// Only signals: the instance handle may be inside accept() on another thread; it is closed by
// accept's cancel path or the destructor.
void PipeListener::close() {
  if (cancel_) ::SetEvent(cancel_);
}

}  // namespace fl::win32
