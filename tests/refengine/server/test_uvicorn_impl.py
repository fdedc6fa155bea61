"""The server's --http and --loop (uvicorn's implementations): a bad choice is one line, not a
traceback; each choice serves, streams and keeps the header deadline; "auto" takes the C pair that
the project installs (httptools, uvloop), as vLLM serves."""

from __future__ import annotations

import socket
import subprocess
import sys

import httpx
import pytest
from refengine_proc import start_refengine

from refengine.errors import RefEngineError
from refengine.server.cli import main
from refengine.server.http_protocol import header_timeout_protocol
from refengine.server.uvicorn_impl import event_loop, http_protocol_class, implementations_in_use


def test_unknown_choices_are_one_line_errors(capsys):
    with pytest.raises(RefEngineError, match="--http must be one of auto, h11, httptools"):
        http_protocol_class("zttp")
    with pytest.raises(RefEngineError, match="--loop must be one of auto, asyncio, uvloop"):
        event_loop("trio")
    with pytest.raises(SystemExit):  # argparse says which values it takes
        main(["--model", "tiny-test", "--http", "zttp"])
    assert "invalid choice: 'zttp'" in capsys.readouterr().err


def test_auto_is_the_c_pair_the_project_installs():
    assert implementations_in_use("auto", "auto") == "httptools, uvloop"
    assert implementations_in_use("h11", "asyncio") == "h11, asyncio"


@pytest.mark.parametrize("http", ["h11", "httptools"])
def test_the_header_deadline_wraps_either_parser(http):
    base = http_protocol_class(http)
    cls = header_timeout_protocol(2.0, base)
    assert issubclass(cls, base) and cls is not base


def _stream_tokens(url: str) -> int:
    body = {"model": "tiny-test", "prompt": "hello there", "max_tokens": 8, "ignore_eos": True, "stream": True}
    chunks = 0
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: {"):
                chunks += 1
    return chunks


@pytest.mark.slow  # a real server start (~7 s); .ci/run runs it by name
def test_h11_and_asyncio_serve_stream_and_keep_the_header_deadline():
    proc, url = start_refengine("--http", "h11", "--loop", "asyncio", "--timeout-request-header", "1")
    try:
        assert _stream_tokens(url) >= 8
        host, port = url.rsplit("/", 1)[-1].split(":")
        with socket.create_connection((host, int(port)), timeout=15) as half:
            half.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            reply = b""
            while chunk := half.recv(65536):
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
        assert _stream_tokens(url) >= 8  # and it keeps serving
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert "HTTP h11, asyncio)" in out


def test_a_loop_that_is_not_installed_is_one_line(tmp_path):
    """uvicorn would fail inside its run with a traceback; the server says it before loading a model."""
    script = tmp_path / "no_uvloop.py"
    script.write_text(
        "import sys\nsys.modules['uvloop'] = None  # as if not installed\n"
        "from refengine.server.cli import main\nsys.exit(main(['--model', 'tiny-test', '--loop', 'uvloop']))\n"
    )
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == ["error: --loop uvloop: uvloop is not installed (pip install uvloop)"]
