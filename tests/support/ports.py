"""Ports for programs that cannot bind port 0 themselves and report theirs (a server started from
a port number in its config). The ports are free when picked; another process may take one before
the program binds it, so whoever uses them starts again on new ones after a bind failure. And a URL
where a connection is refused."""
import socket
from contextlib import contextmanager


def free_ports(count: int = 1) -> list[int]:
    """``count`` distinct ports of 127.0.0.1 that are free now."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@contextmanager
def refused_url():
    """A URL of 127.0.0.1 where nothing listens, nor can start to while the context lasts: a socket
    holds its port, bound but not listening (a connection is refused). A port that was merely free
    when picked could meanwhile be taken by a server of a test running beside this one."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
