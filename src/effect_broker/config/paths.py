"""One normalised request path for matching, stripping, hashing and forwarding.

Matching once used aiohttp's decoded path while ``strip_prefix`` worked on the raw one,
so ``/%65cho/api/x`` matched the ``/echo`` route and still reached the upstream as
``/inner/%65cho/api/x``, with the route's injected credentials. Here both come from the
same split of the raw path, so what was matched is exactly what is stripped and sent:

- the raw path is split on ``/`` only; empty segments are dropped (``//a`` is ``/a``);
- in each segment, percent-encoded unreserved characters (RFC 3986 2.3) are decoded and
  every other escape is kept with upper-case hex: that is the forwarded form;
- matching compares fully decoded segments, so no escape of any character makes a
  protected path look unprotected;
- refused with a 400, because a target may read them as structure the proxy did not
  match: a dot segment (``.``, ``..``, either percent-encoded, or followed by ``;...``),
  a slash or backslash inside a segment (``%2F``, ``%5C``), a raw backslash, a ``#``.

Pure: no I/O; errors are ``MalformedRequest`` so the proxy answers them as problems.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

from effect_broker.errors import MalformedRequest

UNRESERVED = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
)
DOT_SEGMENTS = frozenset({".", ".."})
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")


def is_dot_segment(decoded: str) -> bool:
    """``.`` or ``..``, also with parameters (``..;x``, which Tomcat reads as ``..``)."""
    return decoded.split(";", 1)[0] in DOT_SEGMENTS


def _normal_escapes(segment: str) -> str:
    def one(found: re.Match[str]) -> str:
        char = chr(int(found.group(1), 16))
        return char if char in UNRESERVED else "%" + found.group(1).upper()

    return _ESCAPE.sub(one, segment)


@dataclass(frozen=True, slots=True)
class RequestPath:
    """A request path split once: ``segments`` as forwarded, ``decoded`` for matching."""

    segments: tuple[str, ...]
    decoded: tuple[str, ...]

    @property
    def forwarded(self) -> str:
        """The path to send upstream: normalised escapes, no empty segments."""
        return "/" + "/".join(self.segments)

    @property
    def text(self) -> str:
        """The decoded path, for matching, hashing and display."""
        return "/" + "/".join(self.decoded)

    def without_prefix(self, prefix: str | None) -> RequestPath:
        """This path with ``prefix``'s segments removed when it starts with them."""
        if not prefix:
            return self
        want = tuple(unquote(part) for part in prefix.split("/") if part)
        if self.decoded[: len(want)] != want:
            return self
        return RequestPath(self.segments[len(want) :], self.decoded[len(want) :])


def normalize_path(raw: str) -> RequestPath:
    """Normalise a raw (still percent-encoded) path; ``MalformedRequest`` if refused."""
    if "\\" in raw:
        raise MalformedRequest(
            "the path contains a backslash, which some targets read as '/'; write "
            "'/' or percent-encode it as part of a value elsewhere (nothing was sent)"
        )
    if "#" in raw:
        raise MalformedRequest("a request path cannot contain '#'; nothing was sent")
    segments: list[str] = []
    decoded: list[str] = []
    for part in raw.split("/"):
        if not part:
            continue
        plain = unquote(part, errors="surrogateescape")
        if is_dot_segment(plain):
            raise MalformedRequest(
                f"the path has a dot segment ({part!r}), which a target may resolve to "
                "another path than the one matched; send the resolved path instead"
            )
        if "/" in plain or "\\" in plain:
            raise MalformedRequest(
                f"the path segment {part!r} hides a '/' or '\\' behind percent-encoding, "
                "which a target may read as a separator; nothing was sent"
            )
        segments.append(_normal_escapes(part))
        decoded.append(plain)
    return RequestPath(tuple(segments), tuple(decoded))


#: What ends the authority of an absolute-form target (RFC 3986, section 3.2).
_AUTHORITY_END = re.compile("[/?#]")


def split_target(target: str) -> tuple[str, str]:
    """Raw path and raw query of a request target, origin or absolute form."""
    if target[:8].lower().startswith(("http://", "https://")):
        end_of_authority = _AUTHORITY_END.search(target, target.index("//") + 2)
        target = target[end_of_authority.start() :] if end_of_authority else "/"
    path, _, query = target.partition("?")
    return path or "/", query
