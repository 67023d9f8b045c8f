/* The OS half of one connection to the service: a SOCK_SEQPACKET Unix socket (platform/posix) or a
 * message-mode named pipe (platform/win32). Both carry the same frames (docs/ipc.md), one message
 * per frame; framing, request ids and errors stay in client.c.
 *
 * Deadlines are absolute times on fl_htl_now_ns's clock; a negative deadline never passes. */
#ifndef FENCELINE_CLIENT_TRANSPORT_H
#define FENCELINE_CLIENT_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"
#include "run_page.h" /* native/common */

typedef struct fl_conn fl_conn;

/* The default endpoint, as the service and the Python client compute it: $FENCELINE_SOCKET, else
 * the OS's per-user default. */
FlStatus *fl_conn_default_path(char *buf, size_t size);

/* Connects to `path`. FL_ERROR_TRANSPORT when nobody serves it; FL_ERROR_TIMED_OUT when it stays
 * busy past the deadline. */
FlStatus *fl_conn_open(const char *path, int64_t deadline_ns, fl_conn **out);

/* Closes the connection (the service then releases everything made over it) and frees it. */
void fl_conn_close(fl_conn *c);

/* Sends one message of len bytes. fd >= 0 travels with it (Unix only: on Windows the caller never
 * passes one). On failure *fatal tells whether the connection is unusable from here on (a bad
 * caller fd is not). */
FlStatus *fl_conn_send(fl_conn *c, const uint8_t *buf, size_t len, int fd, int64_t deadline_ns,
                       int *fatal);

/* Receives one message into buf (cap bytes). Spins with non-blocking reads for spin_ns first,
 * then sleeps until a message comes or the deadline passes (FL_ERROR_TIMED_OUT). A message longer
 * than cap sets *len to cap (the caller refuses it). Every failure leaves the connection
 * unusable. deadline_ns equal to "now" only takes what has already arrived. */
FlStatus *fl_conn_recv(fl_conn *c, uint8_t *buf, size_t cap, size_t *len, int64_t spin_ns,
                       int64_t deadline_ns);

/* The run page (native/common/run_page.h, docs/ipc.md "The run page"): one RUN at a time in
 * shared memory beside the socket, in the page's slot 0 (the client asks for no more slots: it
 * keeps one RUN in flight). fl_conn_page_make maps a new page and gives its memfd, to
 * send with OPEN_RUN_PAGE (FL_ERROR_UNSUPPORTED where the OS has none: Windows);
 * fl_conn_page_keep closes that fd and keeps the page if the service took it. */
FlStatus *fl_conn_page_make(fl_conn *c, int *fd);
void fl_conn_page_keep(fl_conn *c, int taken);
int fl_conn_has_page(const fl_conn *c);

/* Posts a RUN on the page (a NUDGE sent when the service sleeps) and waits for its reply there:
 * a spin of spin_ns, then a sleep on the socket, which the service nudges. *answered = 1 with
 * *reply set when the page answered; 0 when the reply comes on the socket (the page said so, or
 * a frame came: fl_conn_recv reads it). FL_ERROR_TIMED_OUT past the deadline. */
FlStatus *fl_conn_page_run(fl_conn *c, const FlRunPageRun *run, int64_t spin_ns,
                           int64_t deadline_ns, FlRunPageReply *reply, int *answered);

#endif
