"""Credentials kept out of every output: a storage URL's secrets, as its own parser reads them.

A storage URL can carry a password in two places: the userinfo (``scheme://user:PASSWORD@host``)
and a query parameter (``?password=...``). Which characters a password may hold there is the
parser's business: SQLAlchemy's ``make_url`` (which Optuna's RDB storage uses) takes
everything up to the first ``@`` as the userinfo's password, ``/ # ? , : ;`` included, and a
query value up to the next ``&``. Hand-written patterns that stopped at ``/`` or ``,`` let such
passwords through (issue 28), so here the URL is parsed by ``make_url`` and masked from the
parts it found, in the URL as written and wherever the secret appears on its own.

``redact(text, url)`` masks, in ``text``:
* every storage-like URL (``scheme://...``) it contains, parsed one by one;
* ``password=...`` of a libpq connection string (``host=db password=x``);
* when ``url`` is given: that URL's secrets wherever they appear, as written, decoded and
  re-encoded, if at least ``LITERAL_MIN`` characters long (a shorter one would mask the same
  characters in unrelated text: ``trial.seed=***``).
"""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote, quote_plus, unquote, unquote_plus

MASK = "***"
SECRET_KEYS = ("password", "passwd", "pwd", "sslpassword")
LITERAL_MIN = 6

_URL = re.compile(r"[A-Za-z][\w+.-]*://\S+")  # a quote may be part of a password: see _url_in
_DSN_PARAM = re.compile(r"(?i)(\b(?:password|passwd|pwd|sslpassword)\s*=\s*)('[^']*'|\"[^\"]*\"|[^&\s'\"]+)")


def _parsed(url: str):
    from sqlalchemy.engine import make_url

    try:
        return make_url(url)
    except Exception:  # not a URL SQLAlchemy reads (journal:PATH, a typo): nothing to find in it
        return None


def _spans(url: str) -> list[tuple[int, int]]:
    """Where ``url``'s secrets are written in it, as (start, end) offsets, checked against the
    parser's reading: the userinfo password ``make_url`` found, each password-like query value."""
    parsed = _parsed(url)
    if parsed is None:
        return []
    spans = []
    scheme_end = url.find("://") + 3
    at = url.find("@", scheme_end)
    if parsed.password is not None and at > 0:
        # make_url: the username runs to the first ':' (it holds no '/'), the password to the first '@'
        colon = url.find(":", scheme_end, at)
        if colon > 0 and "/" not in url[scheme_end:colon] and unquote(url[colon + 1:at]) == parsed.password:
            spans.append((colon + 1, at))
    query_at = url.find("?", at + 1 if at > 0 and parsed.password is not None else scheme_end)
    if query_at > 0 and any(k.lower() in SECRET_KEYS for k in parsed.query):
        pos = query_at + 1
        for part in url[query_at + 1:].split("&"):
            key, eq, _ = part.partition("=")
            if eq and unquote_plus(key).lower() in SECRET_KEYS:
                spans.append((pos + len(key) + 1, pos + len(part)))
            pos += len(part) + 1
    return spans


def secrets_of(url: str | None) -> list[str]:
    """Every form a secret of ``url`` may take in a text: as written, decoded, re-encoded."""
    if not url:
        return []
    parsed = _parsed(url)
    found = [url[a:b] for a, b in _spans(url)]
    if parsed is not None:
        found.append(parsed.password or "")
        for key, value in parsed.query.items():
            if key.lower() in SECRET_KEYS:
                found += [value] if isinstance(value, str) else list(value)
    forms = {f for s in found if s for f in (s, unquote(s), unquote_plus(s), quote(s, safe=""), quote_plus(s))}
    return sorted(forms, key=len, reverse=True)


def mask_url(url: str) -> str:
    """``url`` with each secret replaced by ``***``, the rest as written."""
    out = url
    for a, b in sorted(_spans(url), reverse=True):
        out = out[:a] + MASK + out[b:]
    return out


def _url_in(match: re.Match, change) -> str:
    """A URL found in a text, changed; a quote that closes one the URL opens with stays out."""
    token, before = match.group(), match.string[match.start() - 1:match.start()]
    if before in ("'", '"') and token.endswith(before):
        return change(token[:-1]) + before
    return change(token)


def redact(text, url: str | None = None) -> str:
    """``text`` with every storage credential masked as ``***`` (see the module's docstring)."""
    text = str(text)
    source = url or (text if _URL.fullmatch(text) else None)
    if url and url in text:
        text = text.replace(url, mask_url(url))
    text = _URL.sub(lambda m: _url_in(m, mask_url), text)
    text = _DSN_PARAM.sub(lambda m: m.group(1) + MASK, text)
    for secret in secrets_of(source):
        if len(secret) >= LITERAL_MIN:
            text = text.replace(secret, MASK)
    return text


def redact_files(folder: Path, url: str | None = None) -> None:
    """Mask credentials in files already written, such as the ``.hydra/*.yaml`` Hydra writes
    with the command line before the run starts. Each file is read as YAML and every string in
    it masked, so that YAML's own quoting of a value cannot hide a secret from the search."""
    import yaml

    for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
        text = path.read_text()
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            data = None
        masked = _masked(data, url) if data is not None else None
        if masked is not None and masked != data:
            path.write_text(yaml.safe_dump(masked, sort_keys=False, allow_unicode=True))
        elif redact(text, url) != text:
            path.write_text(redact(text, url))


def _masked(value, url):
    if isinstance(value, str):
        return redact(value, url)
    if isinstance(value, dict):
        return {k: _masked(v, url) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v, url) for v in value]
    return value
