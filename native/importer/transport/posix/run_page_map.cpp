#include "run_page_map.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "core/errors.h"

namespace fl {

namespace {
FlRunPage *map_page(int fd) {
  void *p = ::mmap(nullptr, FL_RUN_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<FlRunPage *>(p);
}
}  // namespace

std::unique_ptr<RunPageMap> RunPageMap::adopt(int fd) {
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0)
    throw Error(Code::InvalidArgument,
                "the run page must be a memfd sealed against shrinking (F_SEAL_SHRINK)");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(FL_RUN_PAGE_SIZE))
    throw Error(Code::InvalidArgument,
                "the run page must hold " + std::to_string(FL_RUN_PAGE_SIZE) + " bytes");
  FlRunPage *page = map_page(fd);
  if (page == nullptr) throw Error(Code::InvalidArgument, errno_message("mmap of the run page", errno));
  return std::unique_ptr<RunPageMap>(new RunPageMap(page, -1));
}

std::unique_ptr<RunPageMap> RunPageMap::create() {
  const int fd = ::memfd_create("fenceline-run-page", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) throw Error(Code::OsError, errno_message("memfd_create", errno));
  if (::ftruncate(fd, FL_RUN_PAGE_SIZE) != 0 ||
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(Code::OsError, errno_message("sealing the run page", err));
  }
  FlRunPage *page = map_page(fd);
  if (page == nullptr) {
    const int err = errno;
    ::close(fd);
    throw Error(Code::OsError, errno_message("mmap of the run page", err));
  }
  return std::unique_ptr<RunPageMap>(new RunPageMap(page, fd));
}

RunPageMap::~RunPageMap() {
  ::munmap(page_, FL_RUN_PAGE_SIZE);
  close_fd();
}

void RunPageMap::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace fl
