"""A hung, not dead, service for the clients' deadline tests: it accepts IPC connections on a
real socket and then stops answering.

    python -m tests.support.silent_service SOCKET mute    answers nothing at all
    python -m tests.support.silent_service SOCKET hello   answers each HELLO, then nothing

It prints "ready" once it listens and runs until it is killed, keeping every connection open."""

from __future__ import annotations

import socket
import sys

from fenceline.protocol import codec


def main() -> None:
    path, mode = sys.argv[1], sys.argv[2]
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.bind(path)
    server.listen(16)
    print("ready", flush=True)
    held = []
    while True:
        conn, _ = server.accept()
        held.append(conn)  # open, never read again: the client's requests go unanswered
        if mode == "hello":
            frame = codec.decode(conn.recv(codec.MAX_FRAME))
            reply = {"server": "silent", "version": "0", "protocol": 1, "capabilities": {}}
            conn.send(codec.encode_json(frame.kind | codec.REPLY_BIT, frame.request_id, reply))


if __name__ == "__main__":
    main()
