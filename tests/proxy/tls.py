"""An HTTPS stand-in for a Function URL on 127.0.0.1, with a throwaway self-signed certificate."""

from __future__ import annotations

import atexit
import datetime
import ipaddress
import shutil
import ssl
import threading
from collections.abc import Callable
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from tempfile import mkdtemp

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

# (method, target, headers, body) -> (status, headers, body)
Answer = Callable[[str, str, dict[str, str], bytes], tuple[int, dict[str, str], bytes]]


@lru_cache(maxsize=1)
def certificate() -> tuple[Path, Path]:
    """PEM paths of a self-signed certificate for 127.0.0.1 and localhost (one per session,
    in a folder removed when the process exits)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder = Path(mkdtemp(prefix="viewer-tls-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def client_context() -> ssl.SSLContext:
    """Trusts only the throwaway certificate (what the proxy gets as ``ssl_context``)."""
    return ssl.create_default_context(cafile=str(certificate()[0]))


def _ok(method: str, target: str, headers: dict[str, str], body: bytes):
    return 200, {"Content-Type": "text/plain"}, b"ok"


class HttpsUpstream:
    """Records every request that reaches it and answers with ``answer``."""

    def __init__(self, answer: Answer = _ok) -> None:
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                record = (self.command, self.path, dict(self.headers.items()), body)
                upstream.requests.append(record)
                status, headers, payload = answer(*record)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_DELETE = _answer

        server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_context.load_cert_chain(*map(str, certificate()))
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.socket = server_context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.url = f"https://127.0.0.1:{self.port}/"
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
