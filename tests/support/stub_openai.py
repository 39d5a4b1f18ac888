"""A tiny OpenAI-compatible completions server on 127.0.0.1, standing in for engines that
speak the protocol but export no vLLM metrics (SGLang, TGI, llama.cpp's server).

``metrics``: None (``/metrics`` answers 404), ``"other"`` (metrics under other names, as
those engines export) or ``"vllm"`` (vLLM's two queue gauges).  Each request streams
``max_tokens`` tokens, ``token_s`` apart, then a usage chunk and ``[DONE]``.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class StubServer:
    base_url: str
    model: str
    httpd: ThreadingHTTPServer
    thread: threading.Thread

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


def start_stub(model: str = "stub", metrics: str | None = None,
               token_s: float = 0.002) -> StubServer:
    state = {"running": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):          # keep test output clean
            pass

        def _json(self, code: int, obj) -> None:
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/health":
                self._json(200, {})
            elif self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": model, "object": "model"}]})
            elif self.path == "/metrics" and metrics is not None:
                if metrics == "vllm":
                    text = (f"# TYPE vllm:num_requests_running gauge\n"
                            f'vllm:num_requests_running{{model_name="{model}"}} '
                            f"{state['running']}\n"
                            f"# TYPE vllm:num_requests_waiting gauge\n"
                            f'vllm:num_requests_waiting{{model_name="{model}"}} 0\n')
                else:
                    text = f"# TYPE tgi_queue_size gauge\ntgi_queue_size {state['running']}\n"
                body = text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            else:
                self._json(404, {"error": {"message": "not found", "code": "not_found"}})

        def do_POST(self):
            length = int(self.headers.get("Content-Length", 0))
            req = json.loads(self.rfile.read(length) or b"{}")
            if self.path != "/v1/completions" or req.get("model") != model:
                self._json(404, {"error": {"message": "unknown route or model"}})
                return
            n = int(req.get("max_tokens", 16))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            with lock:
                state["running"] += 1
            try:
                for i in range(n):
                    time.sleep(token_s)
                    chunk = {"id": "x", "object": "text_completion", "model": model,
                             "choices": [{"index": 0, "text": f" t{i}",
                                          "finish_reason": "length" if i == n - 1 else None}]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                usage = {"id": "x", "choices": [], "usage": {
                    "prompt_tokens": len(req.get("prompt") or []), "completion_tokens": n}}
                self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
                self.wfile.flush()
            finally:
                with lock:
                    state["running"] -= 1
            self.close_connection = True

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    return StubServer(f"http://127.0.0.1:{httpd.server_address[1]}", model, httpd, thread)
