"""Decoder/validator: every rule, and arbitrary bytes never raise (hypothesis)."""

from __future__ import annotations

import json

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dp.config import EventsConfig
from stream_dp.ingest.decode import DECODE_REASONS, Event, EventDecoder, Rejection

DEC = EventDecoder(EventsConfig(max_key_bytes=8, max_user_bytes=8))


def _reason(value: bytes | None, timestamp_ms: int | None = None) -> str:
    out = DEC.decode(value, partition=0, offset=0, timestamp_ms=timestamp_ms)
    return "ok" if isinstance(out, Event) else out.reason


def _j(obj) -> bytes:
    return json.dumps(obj).encode()


def test_each_rule_has_its_reason():
    cases = {
        None: "empty", b"": "empty", b"\xc3\x28": "not_utf8", b"{": "bad_json", b"NaNx": "bad_json",
        b"[" * 50_000: "bad_json", _j([1]): "not_object", _j("s"): "not_object",
        _j({"key": "k"}): "missing_user", _j({"user": "", "key": "k"}): "missing_user",
        _j({"user": None, "key": "k"}): "missing_user", _j({"user": 5, "key": "k"}): "bad_user",
        _j({"user": "a\x00b", "key": "k"}): "bad_user", b'{"user": "\\ud800", "key": "k"}': "bad_user",
        _j({"user": "u" * 9, "key": "k"}): "user_too_long", _j({"user": "u"}): "missing_key",
        _j({"user": "u", "key": ["k"]}): "bad_key", _j({"user": "u", "key": "é" * 5}): "key_too_long",
        _j({"user": "u", "key": "k", "ts": "1"}): "bad_time", _j({"user": "u", "key": "k", "ts": True}): "bad_time",
        _j({"user": "u", "key": "k", "ts": -1}): "bad_time", b'{"user": "u", "key": "k", "ts": NaN}': "bad_time",
        b'{"user": "u", "key": "k", "ts": Infinity}': "bad_time", _j({"user": "u", "key": "k", "ts": 10**400}): "bad_time",
        _j({"user": "u", "key": "k"}): "bad_time",  # no ts and no record timestamp
        _j({"user": "a\x1b[2J", "key": "k"}): "user_control_chars",  # an escape sequence
        _j({"user": "u", "key": "k\u200b"}): "key_control_chars",  # a zero-width space
        _j({"user": "u", "key": "\u0301\u0308", "ts": 1}): "key_no_base_char",  # combining marks only
        b" " * 1_048_589: "record_too_large",  # over events.max_record_bytes (Kafka's message.max.bytes)
    }
    for value, reason in cases.items():
        assert _reason(value) == reason, value
    assert set(cases.values()) == set(DECODE_REASONS)


def test_record_size_limit_is_checked_before_parsing_and_is_configurable():
    dec = EventDecoder(EventsConfig(max_record_bytes=64))
    ok = _j({"user": "u", "key": "k", "ts": 5})
    assert isinstance(dec.decode(ok, partition=0, offset=0, timestamp_ms=None), Event)
    padded = _j({"user": "u", "key": "k", "ts": 5, "pad": "p" * 64})
    assert dec.fields(padded, None) is None
    assert dec.decode(padded, partition=0, offset=1, timestamp_ms=None).reason == "record_too_large"


def test_valid_events_and_fallback_to_the_record_timestamp():
    ev = DEC.decode(_j({"user": "ü", "key": "k", "ts": 12}), partition=3, offset=9, timestamp_ms=None)
    assert ev == Event("ü", "k", 12.0, 3, 9)
    ev = DEC.decode(_j({"user": "u", "key": "k", "extra": [1]}), partition=0, offset=0, timestamp_ms=1500)
    assert ev.ts == 1.5
    assert _reason(_j({"user": "u", "key": "é" * 4})) == "bad_time"  # 8 bytes is within the limit


def test_field_names_come_from_the_config():
    dec = EventDecoder(EventsConfig(user_field="uid", key_field="movie", time_field="t"))
    ev = dec.decode(_j({"uid": "1", "movie": "m", "t": 5}), partition=0, offset=0, timestamp_ms=None)
    assert (ev.user, ev.key, ev.ts) == ("1", "m", 5.0)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.binary(max_size=300), st.none()), st.one_of(st.none(), st.integers(-2**70, 2**70)))
def test_arbitrary_bytes_never_raise(value, timestamp_ms):
    fast = DEC.fields(value, timestamp_ms)
    out = DEC.decode(value, partition=0, offset=0, timestamp_ms=timestamp_ms)
    assert fast is None or (isinstance(out, Event) and (out.user, out.key, out.ts) == fast)
    assert isinstance(out, (Event, Rejection))
    if isinstance(out, Rejection):
        assert out.reason in DECODE_REASONS


_json = st.recursive(st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=12),
                     lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
                     max_leaves=8)


@settings(max_examples=400, deadline=None)
@given(st.fixed_dictionaries({}, optional={"user": _json, "key": _json, "ts": _json}),
       st.sampled_from([None, 0, 1500, -1]), st.booleans())
def test_fast_path_agrees_with_the_full_decoder(obj, timestamp_ms, ascii_json):
    value = json.dumps(obj, ensure_ascii=ascii_json).encode("utf-8", "surrogatepass")
    full = DEC.decode(value, partition=0, offset=0, timestamp_ms=timestamp_ms)
    fast = DEC.fields(value, timestamp_ms)
    if fast is not None:
        assert isinstance(full, Event) and (full.user, full.key, full.ts) == fast
    good = json.dumps({"user": "u1", "key": "k", "ts": 5}).encode()
    assert DEC.fields(good, None) == ("u1", "k", 5.0)  # the common case takes the fast path


@settings(max_examples=400, deadline=None)
@given(st.fixed_dictionaries({}, optional={"user": _json, "key": _json, "ts": _json}))
def test_arbitrary_json_objects_are_classified(obj):
    out = DEC.decode(json.dumps(obj).encode("utf-8", "surrogatepass"), partition=0, offset=0, timestamp_ms=None)
    if isinstance(out, Event):
        assert out.user == obj["user"] and out.key == obj["key"] and float(obj["ts"]) == out.ts
        assert "\x00" not in out.user + out.key
        assert len(out.key.encode()) <= 8 and len(out.user.encode()) <= 8
    else:
        assert out.reason in DECODE_REASONS


def test_fast_path_edge_cases_agree_with_the_full_decoder():
    # the fast path (orjson) and the full decoder (json) differ on some inputs; the fast path must then
    # defer (None) or agree: duplicate names (last wins in both), a BOM, huge numbers, deep nesting,
    # lone surrogates, non-ASCII strings, whitespace around the object
    cases = [
        b'{"user": "a", "user": "b", "key": "k", "ts": 1}', b'\xef\xbb\xbf{"user": "u", "key": "k", "ts": 1}',
        b'{"user": "u", "key": "k", "ts": 1e400}', b'{"user": "u", "key": "k", "ts": 123456789012345678901234}',
        b'{"user": "u", "key": "k", "ts": 1, "x": ' + b"[" * 2000 + b"]" * 2000 + b"}",
        b'{"user": "\\ud800", "key": "k", "ts": 1}', '{"user": "ü", "key": "k", "ts": 1}'.encode(),
        b' \n{"user": "u", "key": "k", "ts": 1.5} \t', b'{"user": "u", "key": "k", "ts": -0.0}',
        b'{"user": "u\\u0000", "key": "k", "ts": 1}', b'{"user": "u", "key": "k\\u0007", "ts": 1}',
    ]
    for value in cases:
        fast = DEC.fields(value, None)
        full = DEC.decode(value, partition=0, offset=0, timestamp_ms=None)
        assert fast is None or (isinstance(full, Event) and (full.user, full.key, full.ts) == fast), value
    assert DEC.fields(cases[0], None) == ("b", "k", 1.0)
    assert DEC.fields(cases[7], None) == ("u", "k", 1.5)
    assert _reason(cases[5]) == "bad_user" and _reason(cases[9]) == "bad_user"


@pytest.mark.parametrize("char", ["\t", "\n", "\r", "\x1b", "\x7f", "\x85", "\u200b", "\u200d", "\u200e",
                                  "\u202e", "\u2028", "\u2029", "\u2060", "\ufeff", "\u00ad"])
def test_control_and_invisible_format_characters_are_rejected_in_users_and_keys(char):
    dec = EventDecoder(EventsConfig(max_user_bytes=64, max_key_bytes=64))
    for field, reason in (("user", "user_control_chars"), ("key", "key_control_chars")):
        record = {"user": "u", "key": "k", "ts": 1}
        record[field] = f"ab{char}cd"
        out = dec.decode(_j(record), partition=0, offset=0, timestamp_ms=None)
        assert isinstance(out, Rejection) and out.reason == reason, (field, repr(char))
        assert dec.fields(_j(record), None) is None


def test_users_and_keys_are_nfc_normalised():
    dec = EventDecoder(EventsConfig(max_user_bytes=64, max_key_bytes=64))
    composed, decomposed = "Caf\u00e9", "Cafe\u0301"
    a = dec.decode(_j({"user": decomposed, "key": decomposed, "ts": 1}), partition=0, offset=0, timestamp_ms=None)
    b = dec.decode(_j({"user": composed, "key": composed, "ts": 1}), partition=0, offset=1, timestamp_ms=None)
    assert (a.user, a.key) == (b.user, b.key) == (composed, composed)
    # visible non-ASCII text (letters, emoji, CJK, non-breaking space) stays accepted
    for text in ("Zoë", "東京", "🎬", "a\u00a0b", "\u0928\u092e\u0938\u094d\u0924\u0947"):
        out = dec.decode(_j({"user": text, "key": text, "ts": 1}), partition=0, offset=0, timestamp_ms=None)
        assert isinstance(out, Event), text


def test_the_byte_limit_applies_to_the_raw_and_the_normalised_text():
    dec = EventDecoder(EventsConfig(max_user_bytes=8, max_key_bytes=8))
    # "\u0958" (3 bytes) is excluded from composition: NFC maps it to "\u0915\u093c" (6 bytes)
    out = dec.decode(_j({"user": "u", "key": "\u0958" * 2, "ts": 1}), partition=0, offset=0, timestamp_ms=None)
    assert isinstance(out, Rejection) and out.reason == "key_too_long"
    # "\u212b" (ANGSTROM SIGN, 3 bytes) normalises to "\u00c5" (2 bytes)
    out = dec.decode(_j({"user": "u", "key": "\u212b" * 2, "ts": 1}), partition=0, offset=0, timestamp_ms=None)
    assert isinstance(out, Event) and out.key == "\u00c5" * 2


def test_a_key_needs_a_base_character() -> None:
    """Combining marks and spaces alone are no key a reader can see (issue 44): dead-lettered; a mark on a
    letter, a symbol, a digit or punctuation is a key."""
    dec = EventDecoder(EventsConfig(max_key_bytes=64))
    for key in ("\u0301", "\u0301\u20dd\u0308", "   ", " \u0301 ", "\u3000", "\u0903"):  # Mn, Me, Zs, Mc
        out = dec.decode(_j({"user": "u", "key": key, "ts": 1}), partition=0, offset=0, timestamp_ms=None)
        assert not isinstance(out, Event) and out.reason == "key_no_base_char", repr(key)
        assert dec.fields(_j({"user": "u", "key": key, "ts": 1}), None) is None  # the fast path defers
    for key in ("e\u0301", "\u20ac", "7", "-", " x ", "\ue000"):  # a letter, a symbol, a digit, punctuation, private use
        assert isinstance(dec.decode(_j({"user": "u", "key": key, "ts": 1}), partition=0, offset=0,
                                     timestamp_ms=None), Event), repr(key)


def test_keys_normalization_nfkc_folds_compatibility_look_alikes_and_nfc_keeps_them_apart() -> None:
    from stream_dp.config import KeysConfig

    fullwidth, plain = "\uff43\uff41\uff46e\u0301", "café"  # ｃａｆé (decomposed é) and café
    nfc = EventDecoder(EventsConfig(max_key_bytes=64))
    nfkc = EventDecoder(EventsConfig(max_key_bytes=64), KeysConfig(normalization="NFKC"))

    def key(dec, k, user="ｕ"):
        return dec.decode(_j({"user": user, "key": k, "ts": 1}), partition=0, offset=0, timestamp_ms=None)

    assert key(nfc, fullwidth).key == "\uff43\uff41\uff46é" and key(nfc, plain).key == "café"
    assert key(nfkc, fullwidth).key == key(nfkc, plain).key == "café"
    assert key(nfkc, "\ufb01le").key == "file"  # the "ﬁ" ligature
    assert key(nfkc, "k", user="\uff55").user == "\uff55"  # user ids stay NFC: the setting is for keys
    assert key(nfkc, "x" * 10 + "\u2474").key == "x" * 10 + "(1)"  # the byte limit applies to the folded key too


def test_keys_normalization_is_one_of_nfc_and_nfkc() -> None:
    import pytest

    from stream_dp.config import ConfigError, config_from_mapping

    assert config_from_mapping({}).keys.normalization == "NFC"
    assert config_from_mapping({"keys": {"normalization": "NFKC"}}).keys.normalization == "NFKC"
    with pytest.raises(ConfigError, match="keys.normalization"):
        config_from_mapping({"keys": {"normalization": "NFD"}})


def test_the_documented_lists_of_dead_letter_reasons_are_complete() -> None:
    """README's metrics table and docs/ingest.md list every reason a record can be rejected for."""
    import re
    from pathlib import Path

    from stream_dp.ingest.decode import REJECT_REASONS

    root = Path(__file__).resolve().parents[2]
    readme = re.search(r"`stream_dp_ingest_events_rejected_total` \| counter \| `reason`: ([^|]+) \|",
                       (root / "README.md").read_text()).group(1)
    ingest = re.search(r"rejected_total\{reason\}` \(reasons: ([^;]+);", (root / "docs" / "ingest.md").read_text()).group(1)
    for listed in (readme, ingest):
        assert {r.strip() for r in listed.replace("\n", " ").split(",")} == set(REJECT_REASONS), listed
