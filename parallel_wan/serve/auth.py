"""PARALLEL_WAN_API_KEY: when set, every endpoint but /health needs `Authorization: Bearer
<key>`. A browser cannot add a bearer header to the page it opens or to a <video src>, so the
key is also taken as the password of HTTP Basic auth (any user name): the page answers 401 with
a Basic challenge, the browser asks once and sends it on every request to the server. Keys are
compared in constant time."""

from __future__ import annotations

import base64
import binascii
import hmac
import os

KEY_ENV = "PARALLEL_WAN_API_KEY"


def api_key(env=os.environ) -> bytes | None:
    key = env.get(KEY_ENV)
    return key.encode() if key else None


def authorized(header: str | None, key: bytes | None) -> bool:
    if key is None:
        return True
    if not header:
        return False
    scheme, _, value = header.partition(" ")
    scheme, value = scheme.lower(), value.strip()
    if scheme == "bearer":
        given = value.encode()
    elif scheme == "basic":
        try:
            given = base64.b64decode(value, validate=True).partition(b":")[2]
        except (binascii.Error, ValueError):
            return False
    else:
        return False
    return hmac.compare_digest(given, key)
