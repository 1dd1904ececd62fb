"""moto's per-request plumbing, done with less work and the same result.

Every AWS call a local run makes (and every moto-backed test) reaches in-process moto as a
botocore ``AWSPreparedRequest``. Before moto's service code sees it, moto turns it into a
werkzeug request through ``werkzeug.test.EnvironBuilder`` (``Request.from_primitives``):
167 microseconds a DynamoDB request on a loaded machine (61 built directly), for a builder
whose URL half (``iri_to_uri``, ``urlsplit``, the WSGI encoding of the path and query) is
the same for every request to one endpoint, and whose header half is a general ``Headers``
walk. In a fault lab's profile that was 6 % of the test.

:func:`install` replaces ``from_primitives`` with one that writes the same WSGI environ
directly, for the requests botocore sends (a non-empty ``bytes`` or ``str`` body, string
header values without line breaks): the URL keys are computed by werkzeug's own builder once
per URL (bounded by :data:`MAX_CACHED`) and copied; the method, body, content type and length
and headers are set per request, in werkzeug's order. Any other request (no body, a stream, a
header value werkzeug would convert or reject) is built by moto's own method. Nothing of one
request is kept for another: the cache holds strings derived from the URL alone. The
direct build follows werkzeug 3.1's ``EnvironBuilder.get_environ`` (locked with moto);
tests/local_run/test_moto_requests.py compares every environ of a few hundred calls with
werkzeug's, so an upgrade that changes the builder fails there, not in a run.
"""

from __future__ import annotations

import importlib
import re
import sys
from io import BytesIO
from typing import Any

#: Distinct URLs whose WSGI keys are kept; past it, werkzeug's builder works them out again.
MAX_CACHED = 4096

#: The environ keys ``EnvironBuilder.get_environ`` derives from the URL alone (werkzeug
#: 3.1), in the order it writes them; ``HTTP_HOST`` may be replaced by a ``Host`` header.
_URL_KEYS = (
    "SCRIPT_NAME",
    "PATH_INFO",
    "QUERY_STRING",
    "REQUEST_URI",
    "RAW_URI",
    "SERVER_NAME",
    "SERVER_PORT",
    "HTTP_HOST",
    "wsgi.url_scheme",
)

#: What werkzeug's ``Headers`` refuses in a header value (``_str_header_value``).
_NEWLINE = re.compile(r"[\r\n]")


def install() -> None:
    """Build moto's request objects without werkzeug's test builder, and look each URL's
    services up once (idempotent; imports ``moto.core.request`` and
    ``moto.core.botocore_stubber``: call it only where moto is used)."""
    _build_environ_directly()
    _match_services_once_per_url()


def _moto(name: str) -> Any:
    """The moto module ``moto.<name>``, untyped: these patches reach into its internals."""
    return importlib.import_module(f"moto.{name}")


def _build_environ_directly() -> None:
    request_module = _moto("core.request")
    werkzeug_test: Any = importlib.import_module("werkzeug.test")

    request_type = request_module.Request
    original = request_type.__dict__["from_primitives"]
    if getattr(original.__func__, "_cached", False):
        return
    build = original.__func__
    chunked = request_module.AwsChunkedWrapper
    preserved_key = request_module.PRESERVED_HEADER_NAMES_ENVIRON_KEY
    environ_key_for_header = request_module.environ_key_for_header
    should_preserve = request_module.should_preserve_original_header_name
    urlparse = request_module.urlparse
    builder_type = werkzeug_test.EnvironBuilder
    protocol = builder_type.server_protocol
    wsgi_version = builder_type.wsgi_version
    url_parts: dict[str, tuple[Any, ...]] = {}

    def parts_of(url: str) -> tuple[Any, ...]:
        """The URL's WSGI keys as werkzeug's builder writes them for moto's arguments."""
        found = url_parts.get(url)
        if found is None:
            parsed = urlparse(url)
            builder = builder_type(
                method="GET",
                base_url=f"{parsed.scheme}://{parsed.netloc}",
                path=parsed.path,
                query_string=parsed.query,
            )
            try:
                environ = builder.get_environ()
            finally:
                builder.close()
            found = tuple(environ[key] for key in _URL_KEYS)
            if len(url_parts) < MAX_CACHED:
                url_parts[url] = found
        return found

    def from_primitives(cls: Any, method: str, url: str, headers: Any, body: Any = None) -> Any:
        if isinstance(body, chunked):
            body = body.read()
        if type(body) is str:
            data = body.encode()
        elif type(body) is bytes:
            data = body
        else:
            data = b""
        header_items = [
            (key, value.decode("utf-8") if isinstance(value, bytes) else value)
            for key, value in headers.items()
            if key.lower() not in ["transfer-encoding"]
        ]
        if (
            not data
            or type(method) is not str
            or any(
                type(key) is not str or type(value) is not str or _NEWLINE.search(value)
                for key, value in header_items
            )
        ):
            return build(cls, method, url, headers, body)
        script, path, query, request_uri, raw_uri, server, port, host, scheme = parts_of(url)
        environ: dict[str, Any] = {
            "REQUEST_METHOD": method,
            "SCRIPT_NAME": script,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "REQUEST_URI": request_uri,
            "RAW_URI": raw_uri,
            "SERVER_NAME": server,
            "SERVER_PORT": port,
            "HTTP_HOST": host,
            "SERVER_PROTOCOL": protocol,
            "wsgi.version": wsgi_version,
            "wsgi.url_scheme": scheme,
            "wsgi.input": BytesIO(data),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": False,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        combined: dict[str, list[str]] = {}
        content_type = None
        for key, value in header_items:
            lowered = key.lower()
            if lowered == "content-type":
                if content_type is None:
                    content_type = value
            elif lowered != "content-length":
                combined.setdefault(f"HTTP_{key.upper().replace('-', '_')}", []).append(value)
        if content_type is not None:
            environ["CONTENT_TYPE"] = content_type
        environ["CONTENT_LENGTH"] = str(len(data))
        for key, values in combined.items():
            environ[key] = ", ".join(values)
        request = cls(environ)
        environ[preserved_key] = {
            environ_key_for_header(key): key for key, _ in header_items if should_preserve(key)
        }
        environ.setdefault("CONTENT_LENGTH", "0")
        return request

    from_primitives.__dict__["_cached"] = True
    from_primitives.__dict__["__wrapped__"] = build
    request_type.from_primitives = classmethod(from_primitives)


def _match_services_once_per_url() -> None:
    stubber = _moto("core.botocore_stubber")

    stubber_type = stubber.BotocoreStubber
    if getattr(stubber_type.process_request, "_cached", False):
        return
    original = stubber_type.process_request
    DEFAULT_ACCOUNT_ID = _moto("core").DEFAULT_ACCOUNT_ID
    HTTPException = _moto("core.exceptions").HTTPException
    not_implemented = re.compile(r"https?://.+\.amazonaws.com/.*")
    matches: dict[tuple[str, int, int], tuple[tuple[str, Any], ...]] = {}

    def services_matching(clean_url: str) -> tuple[tuple[str, Any], ...]:
        """The (service, pattern) pairs of moto's index that match, in the index's order."""
        patterns = stubber.backend_index.backend_url_patterns
        key = (clean_url, id(patterns), len(patterns))
        found = matches.get(key)
        if found is None:
            found = tuple((name, pattern) for name, pattern in patterns if pattern.match(clean_url))
            if len(matches) < MAX_CACHED:
                matches[key] = found
        return found

    # moto 5.2.5's BotocoreStubber.process_request, with its loop over every service's
    # pattern replaced by the patterns that match (the module's names are read at each call,
    # as moto's function reads its globals).
    def process_request(self: Any, request: Any) -> Any:
        parsed_url, _ = stubber.get_equivalent_url_in_aws_domain(request.url)
        clean_url = f"{parsed_url.scheme}://{parsed_url.netloc}{parsed_url.path}"

        if stubber.passthrough_url(clean_url):
            return None

        for service, _pattern in services_matching(clean_url):
            if stubber.passthrough_service(service):
                return None

            if not stubber.service_whitelisted(service):
                raise stubber.ServiceNotWhitelisted(service)

            backends = _moto("backends")
            backend_dict = backends.get_backend(service)

            if isinstance(backend_dict, stubber.BackendDict):
                if "us-east-1" in backend_dict[DEFAULT_ACCOUNT_ID]:
                    backend = backend_dict[DEFAULT_ACCOUNT_ID]["us-east-1"]
                else:
                    backend = backend_dict[DEFAULT_ACCOUNT_ID]["aws"]
            else:
                backend = backend_dict["global"]

            for url, method_to_execute in backend.urls.items():
                if re.compile(url).match(clean_url):
                    from moto.moto_api import recorder

                    normalized_request = stubber.normalize_request(request)
                    try:
                        recorder._record_request(normalized_request)
                        status, headers, body = method_to_execute(
                            normalized_request,
                            normalized_request.raw_url,
                            normalized_request.headers,
                        )
                    except HTTPException as e:
                        status = e.code
                        headers = e.get_headers()
                        body = e.get_body()

                    return status, headers, body

        if not_implemented.match(clean_url):
            return 404, {}, "Not yet implemented"

        return None

    process_request.__dict__["_cached"] = True
    process_request.__dict__["__wrapped__"] = original
    stubber_type.process_request = process_request
