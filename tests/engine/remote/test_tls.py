"""TLS: a server whose certificate cannot be verified gets nothing (not even
the API key), and a clear sentence; trusting its authority (SSL_CERT_FILE)
makes it work. A real HTTPS server on loopback with a self-signed certificate
made by openssl."""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from chat.engine.remote import ServerConfig, connect
from chat.errors import ServerError
from tests.engine.remote.fake_servers import FakeServer, openai_routes


@pytest.fixture
def https_server(tmp_path: Path) -> Iterator[tuple[FakeServer, Path]]:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes"),
            *("-keyout", str(key), "-out", str(cert), "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = FakeServer(openai_routes(), api_key="sk-secret", tls=context)
    server.start()
    try:
        yield server, cert
    finally:
        server.stop()


def test_an_unverifiable_certificate_gets_nothing(
    https_server: tuple[FakeServer, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, _ = https_server
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    config = ServerConfig(server.url, kind="openai", api_key="sk-secret", api_key_env="KEY")
    with pytest.raises(ServerError) as caught:
        connect(config)
    message = str(caught.value)
    assert "certificate that could not be verified" in message and server.url in message
    assert "sk-secret" not in message
    assert not server.seen  # no request reached it: the key was never sent


def test_a_trusted_authority_is_accepted(
    https_server: tuple[FakeServer, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, cert = https_server
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    engine = connect(ServerConfig(server.url, kind="openai", api_key="sk-secret"))
    try:
        assert engine.info.server_url == server.url
    finally:
        engine.close()
