"""A real HTTP server speaking the OpenAI chat-completions protocol whose replies a test scripts.

Used to test judge plumbing (retries, parse failures, call counts) and the lfs selector: the client,
the HTTP layer and the parsing are the real ones; only the model's words are chosen by the test.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from service.generation.openai_llm import OpenAILLM


class ScriptedServer:
    """``reply(prompt) -> str`` answers each request; every prompt received is kept in ``prompts``."""

    def __init__(self, reply: Callable[[str], str]) -> None:
        self.prompts: list[str] = []
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                prompt = body["messages"][0]["content"]
                with lock:
                    outer.prompts.append(prompt)
                out = json.dumps({"choices": [{"message": {"role": "assistant", "content": reply(prompt)}}]}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def llm(self, name: str = "scripted") -> OpenAILLM:
        return OpenAILLM(self.url, name)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
