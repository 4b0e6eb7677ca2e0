"""`make setup` on a fresh clone: wall time (/usr/bin/time) and the bytes it downloaded.

    python3 benchmarks/bench_setup.py --ref HEAD --dir /tmp/setup_after              # cold caches
    python3 benchmarks/bench_setup.py --ref main --dir /tmp/setup_before --cache-dir DIR

Clones this repository at --ref into --dir (a new folder) and runs `make setup` there under
/usr/bin/time, with pip's and uv's caches in --cache-dir (default: an empty folder inside --dir, so
a cold cache) and HTTPS_PROXY pointing at a counting proxy on 127.0.0.1: every byte pip and uv fetch
over the network passes through it (local wheel folders and file:// indexes do not). Prints the wall
time, the bytes received and sent, the cache's state and the setup's last lines.
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class CountingProxy:
    """An HTTP CONNECT proxy that counts the bytes it tunnels each way."""

    def __init__(self) -> None:
        self.received = self.sent = 0
        self._lock = threading.Lock()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            client, _ = self.server.accept()
            threading.Thread(target=self._tunnel, args=(client,), daemon=True).start()

    def _tunnel(self, client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = client.recv(4096)
            if not chunk:
                client.close()
                return
            head += chunk
        method, target = head.split(b" ", 2)[:2]
        host, _, port = target.decode().rpartition(":")
        try:
            if method != b"CONNECT":
                raise OSError(f"only CONNECT is proxied, not {method.decode()}")
            upstream = socket.create_connection((host, int(port)), timeout=60)
        except OSError:
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
            client.close()
            return
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        threading.Thread(target=self._pipe, args=(upstream, client, "received"), daemon=True).start()
        self._pipe(client, upstream, "sent")

    def _pipe(self, source: socket.socket, sink: socket.socket, counter: str) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
                with self._lock:
                    setattr(self, counter, getattr(self, counter) + len(chunk))
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ref", default="HEAD", help="the commit to clone")
    parser.add_argument("--dir", type=Path, required=True, help="a new folder for the clone")
    parser.add_argument("--cache-dir", type=Path, help="pip's and uv's caches (default: empty, inside --dir)")
    args = parser.parse_args()
    if args.dir.exists():
        parser.error(f"--dir {args.dir} exists: give a new folder (a fresh clone)")
    clone = args.dir / "clone"
    subprocess.run(["git", "clone", "--quiet", "--no-local", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", args.ref], check=True, capture_output=True, text=True).stdout.strip()],
        check=True)
    cache = (args.cache_dir or args.dir / "cache").resolve()
    cache_before = folder_bytes(cache) if cache.exists() else 0
    proxy = CountingProxy()
    proxy_url = f"http://127.0.0.1:{proxy.port}"
    env = {**os.environ, "HTTPS_PROXY": proxy_url, "https_proxy": proxy_url,
           "PIP_CACHE_DIR": str(cache / "pip"), "UV_CACHE_DIR": str(cache / "uv")}
    log = args.dir / "setup.log"
    with open(log, "w") as out:
        status = subprocess.run(["/usr/bin/time", "-f", "wall %e s, max RSS %M KB", "make", "setup"], cwd=clone,
                                env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    lines = log.read_text().splitlines()
    print(f"ref {args.ref} in {clone}: make setup exit status {status}\n"
          f"{next(line for line in reversed(lines) if line.startswith('wall '))}\n"
          f"downloaded {proxy.received / 1e6:.1f} MB (sent {proxy.sent / 1e6:.2f} MB) through the proxy\n"
          f"cache {cache}: {cache_before / 1e6:.1f} MB before, {folder_bytes(cache) / 1e6:.1f} MB after\n"
          "last lines of the setup:\n  " + "\n  ".join(lines[-4:]))
    return status


if __name__ == "__main__":
    sys.exit(main())
