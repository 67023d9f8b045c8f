"""The IPC fast path: a Unix SOCK_SEQPACKET socket with binary frames and fd passing
(docs/ipc.md). ``codec`` is the wire format, ``server`` the service side."""
