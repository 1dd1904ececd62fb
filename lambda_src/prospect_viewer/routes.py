"""The viewer's routes: exact path -> the one method it answers.

The app routes on this table, and both loopback servers (the local server and the
signing proxy) forward nothing else.
"""

from __future__ import annotations

ROUTES: dict[str, str] = {
    "/": "GET",
    "/api/uploads": "GET",
    "/api/failures": "GET",
    "/export.csv": "GET",
    "/api/retry": "POST",
    "/api/retry-upload": "POST",
}
