"""What the transports share: ``codec`` is the IPC wire format (frames, the RUN layout, error
replies), ``schemas`` the control requests (import memory, import fence, create session) that
HTTP bodies and IPC JSON frames both decode into."""
