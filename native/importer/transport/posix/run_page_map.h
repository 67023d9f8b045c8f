// The run page's memory (../common/run_page.h): a client makes it, a sealed memfd; the service
// maps the one a client hands it, refusing one that could shrink under it. Linux only (memfd
// seals); the Windows pipe has no run page.
#pragma once

#include <memory>

#include "common/run_page.h"

namespace fl {

class RunPageMap {
 public:
  // The service's: maps the page behind a client's fd (the caller keeps the fd). Error
  // (invalid_argument) unless it is a memfd sealed against shrinking, of FL_RUN_PAGE_SIZE bytes
  // or more.
  static std::unique_ptr<RunPageMap> adopt(int fd);
  // A client's: a new page, zeroed and sealed; fd() is the memfd to hand to the service.
  static std::unique_ptr<RunPageMap> create();

  ~RunPageMap();
  RunPageMap(const RunPageMap &) = delete;
  RunPageMap &operator=(const RunPageMap &) = delete;

  FlRunPage *page() const { return page_; }
  int fd() const { return fd_; }  // create()'s memfd, -1 once closed or for adopt()
  void close_fd();

 private:
  RunPageMap(FlRunPage *page, int fd) : page_(page), fd_(fd) {}
  FlRunPage *page_;
  int fd_;
};

}  // namespace fl
