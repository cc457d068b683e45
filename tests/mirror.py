"""A real HTTP mirror on 127.0.0.1 for tests: serves shared MNIST and misbehaves on request.

The first path segment picks the behaviour, the rest names the file:
  /good/<file>       the real archive
  /missing/<file>    404
  /html/<file>       200 with an HTML error page
  /truncated/<file>  the first half of the archive, announced at that length
  /short/<file>      the first half of the archive, announced at its full length (then closed)
  /cut/<file>        chunked: the first half of the archive as one whole chunk, then a chunk
                     announced at the rest's length and closed after 10 of its bytes
  /corrupt/<file>    gzip's magic bytes, then bytes that are not a deflate stream
  /flipped/<file>    a valid gzip whose content has one byte flipped (checksum mismatch)
  /hang/<file>       accepts the connection and never answers
  /stall/<file>      sends the headers and half the body, then nothing until the test ends
  /flaky/<file>      500 on the first request for a file, then the real archive
  /endless/<file>    no length, gzip's header and then zero bytes without end
  /padded/<file>     no length, gzip's header and then empty deflate blocks without end: valid
                     deflate that inflates to nothing, so only the archive's bound stops it
  /huge/<file>       announces 10**12 bytes, then sends the real archive
  /bomb/<file>       a valid gzip of zeros, 1 MiB longer than the real content (about 1 KB)
  /trickle/<file>    announces the real length, then sends one byte every TRICKLE_S seconds
"""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

TRICKLE_S = 0.05
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
# A non-final stored deflate block of length 0: 3 header bits and padding, LEN 0, NLEN 0xffff.
EMPTY_STORED_BLOCK = b"\x00\x00\x00\xff\xff"
ENDLESS = {"endless": b"\x00" * (1 << 16), "padded": EMPTY_STORED_BLOCK * (1 << 13)}


class MirrorServer:
    def __init__(self, root: Path):
        self.root = root
        self.release = threading.Event()
        self.requests: list[str] = []
        self.user_agents: list[str | None] = []
        self._flaky_seen: set[str] = set()
        self._flipped: dict[str, bytes] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_GET(self):  # noqa: N802 - http.server's naming
                server.requests.append(self.path)
                server.user_agents.append(self.headers.get("User-Agent"))
                mode, _, name = self.path.lstrip("/").partition("/")
                path = server.root / name
                if mode == "hang":
                    server.release.wait(60)
                    return
                if mode in ENDLESS:
                    self.send_response(200)
                    self.end_headers()
                    self._send_until_closed(GZIP_HEADER, ENDLESS[mode])
                    return
                if mode == "trickle" and path.is_file():
                    body = path.read_bytes()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    one_by_one = [body[i : i + 1] for i in range(len(body))]
                    self._send_until_closed(b"", *one_by_one, pause=TRICKLE_S)
                    return
                if mode == "stall" and path.is_file():
                    body = path.read_bytes()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    server.release.wait(60)
                    return
                if mode == "missing" or not path.is_file():
                    self.send_error(404, "Not Found")
                    return
                if mode == "flaky" and name not in server._flaky_seen:
                    server._flaky_seen.add(name)
                    self.send_error(500, "Internal Server Error")
                    return
                if mode == "html":
                    body = b"<!DOCTYPE html>\n<html><body>Rate limited, try later</body></html>\n"
                elif mode == "truncated":
                    body = path.read_bytes()
                    body = body[: len(body) // 2]
                elif mode == "flipped":
                    body = server.flipped(name)
                elif mode == "corrupt":
                    body = b"\x1f\x8b\x08\x00" + bytes(range(256)) * 4
                elif mode == "bomb":
                    body = server.bomb(name)
                else:
                    body = path.read_bytes()
                announced = len(body)
                if mode == "cut":
                    self.send_response(200)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    half, rest = body[: announced // 2], body[announced // 2 :]
                    self.wfile.write(f"{len(half):x}\r\n".encode() + half + b"\r\n")
                    self.wfile.write(f"{len(rest):x}\r\n".encode() + rest[:10])
                    return
                if mode == "short":
                    body = body[: announced // 2]
                if mode == "huge":
                    announced = 10**12
                self.send_response(200)
                self.send_header("Content-Length", str(announced))
                self.end_headers()
                self._send_until_closed(b"", body)

            def _send_until_closed(self, first: bytes, *pieces: bytes, pause: float = 0.0) -> None:
                """Write `first`, then each piece (cycling through them when there is one, forever
                for an endless mode) until the client hangs up, the pieces end or the test ends."""
                endless = self.path.lstrip("/").partition("/")[0] in ENDLESS
                try:
                    self.wfile.write(first)
                    index = 0
                    while index < len(pieces) and not server.release.is_set():
                        self.wfile.write(pieces[index])
                        self.wfile.flush()
                        index = 0 if endless else index + 1
                        if pause:
                            server.release.wait(pause)
                except OSError:  # the client hung up: what a bounded download does
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def flipped(self, name: str) -> bytes:
        if name not in self._flipped:
            content = bytearray(gzip.decompress((self.root / name).read_bytes()))
            content[len(content) // 2] ^= 0x01
            self._flipped[name] = gzip.compress(bytes(content), compresslevel=1)
        return self._flipped[name]

    def bomb(self, name: str) -> bytes:
        content = gzip.decompress((self.root / name).read_bytes())
        return gzip.compress(b"\x00" * (len(content) + (1 << 20)), compresslevel=9, mtime=0)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def requests_for(self, mode: str, name: str) -> int:
        return self.requests.count(f"/{mode}/{name}")

    def mirror(self, mode: str) -> str:
        return f"{self.url}/{mode}/"

    def __enter__(self) -> MirrorServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
