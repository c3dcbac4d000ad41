"""Canonical request identity: RFC 8785 conformance, strict refusals, hash properties."""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
import random
import re
import struct
from typing import Any

import pytest
import rfc8785
from hypothesis import assume, given
from hypothesis import strategies as st

from effect_broker.canonical import (
    canonical_body,
    canonical_form,
    canonical_json,
    canonical_query,
    downstream_key,
    request_hash,
)
from effect_broker.errors import CanonicalizationError

# --- RFC 8785 published examples --------------------------------------------------------

# RFC 8785 section 3.2.2, input and output verbatim, but for its first number: the RFC's
# 333333333.33333329 is no double (it would become 333333333.3333333 and hash like it),
# so it is refused below and written here as the double it stands for.
RFC_MAIN_INPUT = rb"""{
  "numbers": [333333333.3333333, 1E30, 4.50,
              2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}"""
RFC_MAIN_OUTPUT = (
    '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
    '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
).encode()

# RFC 8785 section 3.2.3: keys sort by their UTF-16 code units.
RFC_SORT_INPUT = rb"""{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}"""
RFC_SORT_OUTPUT = (
    '{"\\r":"Carriage Return","1":"One","\u0080":"Control",'
    '"\u00f6":"Latin Small Letter O With Diaeresis","\u20ac":"Euro Sign",'
    '"\U0001f600":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}'
).encode()


def test_rfc8785_main_example() -> None:
    assert canonical_json(RFC_MAIN_INPUT) == RFC_MAIN_OUTPUT


def test_rfc8785_sorting_example() -> None:
    assert canonical_json(RFC_SORT_INPUT) == RFC_SORT_OUTPUT


# RFC 8785 appendix B: IEEE-754 bit patterns and their required serialization.
@pytest.mark.parametrize(
    ("ieee_hex", "expected"),
    [
        ("0000000000000000", "0"),
        ("8000000000000000", "0"),
        ("0000000000000001", "5e-324"),
        ("8000000000000001", "-5e-324"),
        ("7fefffffffffffff", "1.7976931348623157e+308"),
        ("ffefffffffffffff", "-1.7976931348623157e+308"),
        ("4340000000000000", "9007199254740992"),
        ("c340000000000000", "-9007199254740992"),
        ("4430000000000000", "295147905179352830000"),
        ("44b52d02c7e14af5", "9.999999999999997e+22"),
        ("44b52d02c7e14af6", "1e+23"),
        ("44b52d02c7e14af7", "1.0000000000000001e+23"),
        ("444b1ae4d6e2ef4e", "999999999999999700000"),
        ("444b1ae4d6e2ef4f", "999999999999999900000"),
        ("444b1ae4d6e2ef50", "1e+21"),
        ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
        ("3eb0c6f7a0b5ed8d", "0.000001"),
        ("41b3de4355555553", "333333333.3333332"),
        ("41b3de4355555554", "333333333.33333325"),
        ("41b3de4355555555", "333333333.3333333"),
        ("41b3de4355555556", "333333333.3333334"),
        ("41b3de4355555557", "333333333.33333343"),
        ("becbf647612f3696", "-0.0000033333333333333333"),
        ("43143ff3c1cb0959", "1424953923781206.2"),
    ],
)
def test_rfc8785_number_samples(ieee_hex: str, expected: str) -> None:
    (value,) = struct.unpack(">d", bytes.fromhex(ieee_hex))
    assert canonical_json(repr(value).encode()) == expected.encode()


@pytest.mark.parametrize(
    ("literal", "expected"),
    [
        ("1E30", "1e+30"),
        ("1e30", "1e+30"),
        ("4.50", "4.5"),
        ("2e-3", "0.002"),
        ("0.000001", "0.000001"),  # ECMAScript switches to exponents only below 1e-6
        ("1e-7", "1e-7"),
        ("-0", "0"),
        ("-0.0", "0"),
        ("333333333.3333333", "333333333.3333333"),
        ("0.1", "0.1"),
        ("9007199254740992.0", "9007199254740992"),
        ("1.0e-5", "0.00001"),
        ("0.000000000000000000000000001", "1e-27"),
        ("1e20", "100000000000000000000"),
        ("1e21", "1e+21"),
        ("100", "100"),
        ("-1.50", "-1.5"),
        ("9007199254740991", "9007199254740991"),
        ("-9007199254740991", "-9007199254740991"),
    ],
)
def test_number_literals(literal: str, expected: str) -> None:
    assert canonical_json(literal.encode()) == expected.encode()


def test_whitespace_and_escapes_are_normalized() -> None:
    body = b' {\n\t"b" : "\\u00e9\\/" ,\r\n "a" : [ 1 , true ] } \n'
    assert canonical_json(body) == '{"a":[1,true],"b":"\u00e9/"}'.encode()


def test_surrogate_pair_escape_is_one_character() -> None:
    assert canonical_json(b'"\\ud83d\\ude00"') == '"\U0001f600"'.encode()


# --- strict refusals --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"amount":1,"amount":2}', "duplicate key 'amount' in JSON object"),
        (b'{"a":{"b":1,"b":1}}', "duplicate key 'b' in JSON object"),
        (b'{"a":1,"\\u0061":2}', "duplicate key 'a' in JSON object"),
        (b"NaN", "NaN is not valid JSON"),
        (b'{"x":Infinity}', "Infinity is not valid JSON"),
        (b"[-Infinity]", "-Infinity is not valid JSON"),
        (b'{"amount":"\xff"}', "invalid UTF-8 at byte 11"),
        (b'"\xc0\xaf"', "invalid UTF-8 at byte 1"),  # overlong encoding of "/"
        (b'"\xed\xa0\x80"', "invalid UTF-8 at byte 1"),  # UTF-8-encoded surrogate
        (b'"\xe2\x82"', "invalid UTF-8 at byte 1"),  # truncated sequence
        (b"\xef\xbb\xbf{}", "byte order mark"),
        (b'["\\ud800"]', "lone surrogate \\ud800 in a JSON string"),
        (b'"\\udc00"', "lone surrogate \\udc00 in a JSON string"),
        (b'{"k\\ud83d":1}', "lone surrogate \\ud83d in a JSON string"),
        (b'"\\ude00\\ud83d"', "lone surrogate \\ude00 in a JSON string"),
        (b"1e400", "number '1e400' is too large for an IEEE-754 double"),
        (b"[-1E+400]", "number '-1E+400' is too large for an IEEE-754 double"),
        (b"1e-400", "number '1e-400' is too small for an IEEE-754 double"),
        (b"9007199254740992", "integer '9007199254740992' is outside ±(2**53 - 1)"),
        # Two payloads one hash, unless refused: a double cannot tell these apart.
        (b'{"amount":0.10000000000000000001}', "would become 0.1"),
        (b"9007199254740993.0", "would become 9007199254740992.0"),
        (b"333333333.33333329", "cannot be held exactly by an IEEE-754 double"),
        (b"[1.00000000000000000000000000000001]", "would become 1.0"),
        (b"[-9007199254740992]", "integer '-9007199254740992' is outside"),
        (b'{"id":12345678901234567890}', "send it as a string"),
        (b"1" * 5000, "is outside ±(2**53 - 1)"),
        (b'{"a":1} x', "unexpected data after the JSON value at byte 8"),
        (b"{}{}", "unexpected data after the JSON value at byte 2"),
        (b"[1,2]]", "unexpected data after the JSON value at byte 5"),
        # The wording after the prefix is Python's own, and 3.13 changed it for this one.
        (b"[1,]", "invalid JSON: "),
        (b"{'a':1}", "invalid JSON"),
        (b'{"a":1 /* note */}', "invalid JSON"),
        (b'"tab\there"', "invalid JSON: Invalid control character"),
        (b"", "empty"),
        (b" \n", "empty"),
        (b"[" * 300 + b"]" * 300, "nesting is deeper than 256 levels"),
        (b"[" * 100_000, "nesting is deeper than 256 levels"),
    ],
)
def test_json_refusals(body: bytes, message: str) -> None:
    with pytest.raises(CanonicalizationError) as caught:
        canonical_json(body)
    assert message in caught.value.message


def test_nesting_up_to_the_limit_is_accepted() -> None:
    assert canonical_json(b"[" * 256 + b"]" * 256) == b"[" * 256 + b"]" * 256


def test_refusal_is_a_400_problem() -> None:
    with pytest.raises(CanonicalizationError) as caught:
        canonical_json(b"NaN")
    assert caught.value.status == 400


# --- form data and query strings --------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"", b""),
        (b"b=2&a=1", b"a=1&b=2"),
        (b"B=1&a=1&_=1", b"B=1&_=1&a=1"),  # byte order: upper case, "_", lower case
        (b"%C3%A9=1&z=1", b"z=1&%C3%A9=1"),  # sorted by UTF-8 bytes
        (b"a=2&a=1", b"a=2&a=1"),  # repeated names keep their order: it is a list
        (b"a=&b", b"a=&b"),  # blank value kept, and distinct from no "="
        (b"&a=1&&b=2&", b"a=1&b=2"),  # empty segments carry nothing
        (b"q=a+b", b"q=a%20b"),
        (b"q=a%2Bb", b"q=a%2Bb"),  # an encoded "+" is a plus, not a space
        (b"x=%7e&y=%c3%a9&z=%41", b"x=~&y=%C3%A9&z=A"),
        ("n=\u00e9".encode(), b"n=%C3%A9"),  # raw UTF-8 bytes are encoded
        (b"a=b=c", b"a=b%3Dc"),
        (b"a%26b=1", b"a%26b=1"),
    ],
)
def test_canonical_form(body: bytes, expected: bytes) -> None:
    assert canonical_form(body) == expected


def test_form_equivalent_spellings_are_equal() -> None:
    assert canonical_form(b"b=x+y&a=%7E") == canonical_form(b"a=~&b=x%20y")


def test_form_distinctions_are_kept() -> None:
    assert canonical_form(b"a=1&a=2") != canonical_form(b"a=2&a=1")
    assert canonical_form(b"flag") != canonical_form(b"flag=")
    assert canonical_form(b"q=a+b") != canonical_form(b"q=a%2Bb")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            b"a=%ff",
            "invalid UTF-8 at byte 0 of a form field value after percent-decoding",
        ),
        (b"%C3=1", "invalid UTF-8 at byte 0 of a form field name after percent-decoding"),
        (b"a=%zz", "malformed percent-escape '%zz' in form field value"),
        (b"a=100%", "malformed percent-escape '%' in form field value"),
        (b"%4=1", "malformed percent-escape '%4' in form field name"),
    ],
)
def test_form_refusals(body: bytes, message: str) -> None:
    with pytest.raises(CanonicalizationError) as caught:
        canonical_form(body)
    assert message in caught.value.message


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", b""),
        ("b=1&a=2", b"a=2&b=1"),
        ("to=\u00e9&amount=10", b"amount=10&to=%C3%A9"),
        ("expand=a&expand=b&limit", b"expand=a&expand=b&limit"),
    ],
)
def test_canonical_query(query: str, expected: bytes) -> None:
    assert canonical_query(query) == expected


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("a=%ff", "invalid UTF-8 at byte 0 of a query field value"),
        ("a=%", "malformed percent-escape '%' in query field value"),
        ("a=\udcff", "query string is not valid text at character 2"),
    ],
)
def test_query_refusals(query: str, message: str) -> None:
    with pytest.raises(CanonicalizationError) as caught:
        canonical_query(query)
    assert message in caught.value.message


# --- content-type dispatch --------------------------------------------------------------

JSON_BODY = b'{ "b": 1, "a": 4.50 }'
FORM_BODY = b"b=1&a=x+y"


@pytest.mark.parametrize(
    ("content_type", "body", "expected"),
    [
        ("application/json", JSON_BODY, b'{"a":4.5,"b":1}'),
        ("Application/JSON; charset=UTF-8", JSON_BODY, b'{"a":4.5,"b":1}'),
        ("application/problem+json", JSON_BODY, b'{"a":4.5,"b":1}'),
        ("application/vnd.api+JSON ; ext=x", JSON_BODY, b'{"a":4.5,"b":1}'),
        ("application/x-www-form-urlencoded", FORM_BODY, b"a=x%20y&b=1"),
        ("application/x-www-form-urlencoded; charset=utf-8", FORM_BODY, b"a=x%20y&b=1"),
        ("text/plain", JSON_BODY, JSON_BODY),
        ("application/json-seq", JSON_BODY, JSON_BODY),
        ("text/json+xml", JSON_BODY, JSON_BODY),
        ("application/octet-stream", b"\xff\x00NaN", b"\xff\x00NaN"),
        ("multipart/form-data; boundary=x", FORM_BODY, FORM_BODY),
        (None, JSON_BODY, JSON_BODY),
        ("", FORM_BODY, FORM_BODY),
        ("application/json", b"", b""),
        ("application/x-www-form-urlencoded", b"", b""),
        (None, b"", b""),
    ],
)
def test_canonical_body_dispatch(
    content_type: str | None, body: bytes, expected: bytes
) -> None:
    assert canonical_body(content_type, body) == expected


def test_canonical_body_refuses_bad_json() -> None:
    with pytest.raises(CanonicalizationError, match="duplicate key 'a'"):
        canonical_body("application/merge-patch+json", b'{"a":1,"a":1}')


# --- request_hash -----------------------------------------------------------------------

BASE: dict[str, Any] = {
    "method": "POST",
    "route": "charge",
    "path": "/v1/charges",
    "query": b"expand=customer",
    "body": b'{"amount":100}',
    "contract_name": "payments.charge",
    "contract_version": "1",
}
FIELDS = tuple(BASE)


def test_request_hash_known_answer() -> None:
    stream = b"".join(
        len(field).to_bytes(8, "big") + field
        for field in (
            b"POST",
            b"charge",
            b"/v1/charges",
            b"expand=customer",
            b'{"amount":100}',
            b"payments.charge",
            b"1",
        )
    )
    assert request_hash(**BASE) == hashlib.sha256(stream).hexdigest()


def test_request_hash_method_is_case_insensitive() -> None:
    assert request_hash(**{**BASE, "method": "post"}) == request_hash(**BASE)


@pytest.mark.parametrize("field", FIELDS)
def test_request_hash_covers_every_field(field: str) -> None:
    changed = BASE[field] + (b"x" if isinstance(BASE[field], bytes) else "x")
    assert request_hash(**{**BASE, field: changed}) != request_hash(**BASE)


def test_request_hash_split_example() -> None:
    left = request_hash(**{**BASE, "path": "ab", "query": b"c"})
    right = request_hash(**{**BASE, "path": "a", "query": b"bc"})
    assert left != right


def _as_fields(pieces: list[str]) -> dict[str, Any]:
    return {
        name: piece.encode() if name in ("query", "body") else piece
        for name, piece in zip(FIELDS, pieces, strict=True)
    }


def _split(joined: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted(min(cut, len(joined)) for cut in cuts), len(joined)]
    return [joined[a:b] for a, b in itertools.pairwise(bounds)]


# Every character here is its own upper case, so only the split differs between tuples.
@given(
    st.text(alphabet="AB/?=&\x00\u20ac", max_size=16),
    st.lists(st.integers(0, 16), min_size=6, max_size=6),
    st.lists(st.integers(0, 16), min_size=6, max_size=6),
)
def test_request_hash_different_splits_never_collide(
    joined: str, cuts_a: list[int], cuts_b: list[int]
) -> None:
    pieces_a, pieces_b = _split(joined, cuts_a), _split(joined, cuts_b)
    assume(pieces_a != pieces_b)
    assert request_hash(**_as_fields(pieces_a)) != request_hash(**_as_fields(pieces_b))


# --- hashing properties over generated JSON ---------------------------------------------

SAFE_INT = 2**53 - 1
json_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=8)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-SAFE_INT, SAFE_INT)
    | st.floats(allow_nan=False, allow_infinity=False)
    | json_text
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(json_text, children, max_size=4)
    ),
    max_leaves=16,
)


def _shuffled(value: Any, rnd: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {key: _shuffled(child, rnd) for key, child in items}
    if isinstance(value, list):
        return [_shuffled(child, rnd) for child in value]
    return value


def _json_hash(body: bytes) -> str:
    return request_hash(**{**BASE, "body": canonical_body("application/json", body)})


@given(
    json_values,
    st.randoms(use_true_random=False),
    st.sampled_from([None, 0, 2, "\t"]),
    st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t")]),
    st.booleans(),
)
def test_key_order_and_whitespace_never_change_the_hash(
    value: Any,
    rnd: random.Random,
    indent: int | str | None,
    separators: tuple[str, str],
    ensure_ascii: bool,
) -> None:
    compact = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    reformatted = json.dumps(
        _shuffled(value, rnd),
        indent=indent,
        separators=separators,
        ensure_ascii=ensure_ascii,
    ).encode()
    assert canonical_json(reformatted) == canonical_json(compact)
    assert _json_hash(reformatted) == _json_hash(compact)


@given(st.dictionaries(json_text, json_values, min_size=1, max_size=4), st.data())
def test_any_changed_value_changes_the_hash(
    obj: dict[str, Any], data: st.DataObject
) -> None:
    key = data.draw(st.sampled_from(sorted(obj)))
    replacement = data.draw(json_values)
    assume(replacement != obj[key])  # Python equality: 1 == 1.0 == True are skipped
    changed = {**obj, key: replacement}
    assert _json_hash(json.dumps(obj).encode()) != _json_hash(
        json.dumps(changed).encode()
    )


# The simple trees (no float, ASCII keys) are serialized by the standard library's
# encoder, everything else by rfc8785: both must write the very same bytes.
simple_scalars = st.none() | st.booleans() | st.integers(-SAFE_INT, SAFE_INT) | json_text
simple_values = st.recursive(
    simple_scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(st.characters(max_codepoint=127), max_size=6), children, max_size=4
        )
    ),
    max_leaves=16,
)


@given(simple_values | json_values)
def test_canonical_json_is_rfc8785_whichever_encoder_writes_it(value: Any) -> None:
    body = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
    assert canonical_json(body) == bytes(rfc8785.dumps(value))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"a": 1, "b": 2, "a": 3}', "duplicate key 'a'"),
        (b'{"a": "\\ud800", "b": 1}', "lone surrogate \\ud800"),
        (b'{"\\udfff": 1}', "lone surrogate \\udfff"),
        (b'["ok", {"k\\u00e9": "x\\udc00"}]', "lone surrogate \\udc00"),
    ],
)
def test_refusals_on_the_simple_path(body: bytes, message: str) -> None:
    with pytest.raises(CanonicalizationError, match=re.escape(message)):
        canonical_json(body)


# --- downstream_key ---------------------------------------------------------------------

TENANT_KEY = bytes(range(32))


def test_downstream_key_matches_its_definition() -> None:
    mac = hmac.new(TENANT_KEY, b"acme\x00order-42", hashlib.sha256).digest()
    expected = base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
    key = downstream_key(TENANT_KEY, "acme", "order-42")
    assert key == expected
    assert len(key) == 43
    assert "=" not in key


def test_downstream_key_is_deterministic() -> None:
    assert downstream_key(TENANT_KEY, "acme", "order-42") == downstream_key(
        bytes(range(32)), "acme", "order-42"
    )


@given(st.text(max_size=12), st.text(max_size=12), st.text(max_size=24))
def test_same_operation_key_in_two_tenants_differs(
    tenant_a: str, tenant_b: str, operation_key: str
) -> None:
    assume(tenant_a != tenant_b)
    key_a = downstream_key(TENANT_KEY, tenant_a, operation_key)
    key_b = downstream_key(TENANT_KEY, tenant_b, operation_key)
    assert key_a != key_b
    assert key_a == downstream_key(TENANT_KEY, tenant_a, operation_key)


def test_downstream_key_depends_on_the_tenant_key_and_operation_key() -> None:
    key = downstream_key(TENANT_KEY, "acme", "order-42")
    assert downstream_key(bytes(32), "acme", "order-42") != key
    assert downstream_key(TENANT_KEY, "acme", "order-43") != key
