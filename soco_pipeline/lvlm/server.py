"""A small OpenAI-compatible chat-completions server on loopback, around any answer function."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from soco_pipeline.lvlm.prompt import ChatRequest, parse_openai_messages


@dataclass
class HttpReply:
    """A raw reply: status, body bytes, headers, and seconds to wait before sending it."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


AnswerFn = Callable[[ChatRequest, dict], "str | HttpReply"]


def completion_body(text: str, model: str) -> bytes:
    """A chat-completions response body holding one assistant message."""
    return json.dumps(
        {
            "id": "chatcmpl-local",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            ],
        }
    ).encode()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes: no 40 ms delayed-ACK stall

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - silence per-request logging
        return

    def _send(self, reply: HttpReply) -> None:
        if reply.delay_s:
            time.sleep(reply.delay_s)
        self.send_response(reply.status)
        for k, v in {"Content-Type": "application/json", **reply.headers}.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        try:
            self.wfile.write(reply.body)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout)
            pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path.rstrip("/") == "/v1/models":
            body = json.dumps({"object": "list", "data": [{"id": self.server.model_name, "object": "model"}]})
            self._send(HttpReply(200, body.encode()))
        else:
            self._send(HttpReply(404, b'{"error": "not found"}'))

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(HttpReply(404, b'{"error": "not found"}'))
            return
        try:
            if self.server.decode:
                body = json.loads(raw)
                request = parse_openai_messages(body["messages"])
            else:  # a stand-in that ignores the content (benchmarks): read the body, decode nothing
                body, request = {}, ChatRequest((), "")
        except (ValueError, KeyError, TypeError) as e:
            self._send(HttpReply(400, json.dumps({"error": f"bad request: {e}"}).encode()))
            return
        with self.server.lock:
            self.server.requests += 1
        self.server.auth_headers.append(self.headers.get("Authorization", ""))
        try:
            out = self.server.answer(request, body)
        except Exception as e:  # noqa: BLE001 - a failing model is a 500 for the client, not a dead server
            out = HttpReply(500, json.dumps({"error": f"{type(e).__name__}: {e}"}).encode())
        if isinstance(out, HttpReply):
            self._send(out)
        else:
            self._send(HttpReply(200, completion_body(str(out), body.get("model", self.server.model_name))))


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, addr, answer: AnswerFn, model_name: str, decode: bool = True) -> None:
        super().__init__(addr, _Handler)
        self.answer = answer
        self.decode = decode
        self.model_name = model_name
        self.lock = threading.Lock()
        self.requests = 0
        self.auth_headers: list[str] = []


@dataclass
class RunningServer:
    """A started server: its base URL and request counters."""

    base_url: str
    _server: _Server

    @property
    def requests(self) -> int:
        """Chat-completions requests received so far."""
        return self._server.requests

    @property
    def auth_headers(self) -> list[str]:
        """The Authorization header of every request (tests check the key arrives there)."""
        return list(self._server.auth_headers)


@contextmanager
def serve(
    answer: AnswerFn, host: str = "127.0.0.1", port: int = 0, model_name: str = "local", decode: bool = True
) -> Iterator[RunningServer]:
    """Serve `answer` at http://host:port (0: a free port) until the block exits."""
    server = _Server((host, port), answer, model_name, decode)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield RunningServer(f"http://{host}:{server.server_address[1]}", server)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
