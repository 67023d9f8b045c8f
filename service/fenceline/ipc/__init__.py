"""The IPC fast path: a Unix SOCK_SEQPACKET socket with binary frames and fd passing
(docs/ipc.md). The wire format is fenceline.protocol.codec; ``server`` is the service side."""
