"""Content keys for cache paths: a short hash of any JSON-able parts (settings, fingerprints, data keys)."""

from __future__ import annotations

import hashlib
import json


def content_key(*parts) -> str:
    """20 hex digits of sha256 over the parts as sorted JSON (the same key for the same content)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]
