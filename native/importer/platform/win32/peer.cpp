// Who is on the other end of a loopback TCP connection, on Windows: the HTTP transport's
// equivalent of reading /proc/net/tcp on Linux (fenceline.api.peers). The TCP table with owner
// process ids names the process that holds the client's end; its token names the user.
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <winsock2.h>
#include <ws2tcpip.h>
#include <windows.h>
#include <iphlpapi.h>

#include <optional>
#include <string>
#include <vector>

#include "transport/win32/pipe.h"
#include "win32_util.h"

namespace fl::win32 {

std::optional<std::uint32_t> tcp_client_pid(const std::string &client_ip, std::uint16_t client_port,
                                             std::uint16_t server_port) {
  IN_ADDR client{};
  if (::InetPtonA(AF_INET, client_ip.c_str(), &client) != 1) return std::nullopt;
  std::vector<unsigned char> buf(64 * 1024);
  for (int attempt = 0; attempt < 4; ++attempt) {
    DWORD size = static_cast<DWORD>(buf.size());
    const DWORD rc = ::GetExtendedTcpTable(buf.data(), &size, FALSE, AF_INET,
                                           TCP_TABLE_OWNER_PID_CONNECTIONS, 0);
    if (rc == ERROR_INSUFFICIENT_BUFFER) {
      buf.resize(size + 4096);
      continue;
    }
    if (rc != NO_ERROR) return std::nullopt;
    const auto *table = reinterpret_cast<const MIB_TCPTABLE_OWNER_PID *>(buf.data());
    for (DWORD i = 0; i < table->dwNumEntries; ++i) {
      const MIB_TCPROW_OWNER_PID &row = table->table[i];
      // The client's row: its local end is the client's address, its remote end our port.
      if (row.dwState == MIB_TCP_STATE_ESTAB && row.dwLocalAddr == client.S_un.S_addr &&
          ::ntohs(static_cast<u_short>(row.dwLocalPort)) == client_port &&
          ::ntohs(static_cast<u_short>(row.dwRemotePort)) == server_port && row.dwOwningPid != 0)
        return row.dwOwningPid;
    }
    return std::nullopt;
  }
  return std::nullopt;
}

std::optional<std::string> tcp_client_sid(const std::string &client_ip, std::uint16_t client_port,
                                          std::uint16_t server_port) {
  const auto pid = tcp_client_pid(client_ip, client_port, server_port);
  if (!pid) return std::nullopt;
  try {
    return process_user_sid(*pid);
  } catch (const Error &) {
    return std::nullopt;  // the process is gone, or we may not look at it: unknown
  }
}

}  // namespace fl::win32
