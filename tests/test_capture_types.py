"""The capture never fails a write and keeps every value exact: for every
column type, with edge values, each event's key, old and new values equal
what firebird-driver returns when it selects that row (on every engine)."""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import struct
import uuid
import zoneinfo
from decimal import Decimal

import pytest
from firebird.driver import DatabaseError, get_timezone

from subscriptions.capture.charsets import decode_text
from subscriptions.capture.zones import LEGACY_ZONES
from subscriptions.db.connection import Database, read_blob, read_text
from subscriptions.events import Event

from conftest import Subs, events, execute

COMMON = [
    ("C_SMALLINT", "SMALLINT"),
    ("C_INTEGER", "INTEGER"),
    ("C_BIGINT", "BIGINT"),
    ("C_NUM4", "NUMERIC(4, 0)"),
    ("C_NUM9", "NUMERIC(9, 2)"),
    ("C_NUM18", "NUMERIC(18, 0)"),
    ("C_DEC18", "DECIMAL(18, 4)"),
    ("C_FLOAT", "FLOAT"),
    ("C_DOUBLE", "DOUBLE PRECISION"),
    ("C_BOOLEAN", "BOOLEAN"),
    ("C_DATE", "DATE"),
    ("C_TIME", "TIME"),
    ("C_TIMESTAMP", "TIMESTAMP"),
    ("C_CHAR", "CHAR(5)"),
    ("C_VARCHAR", "VARCHAR(60) CHARACTER SET UTF8"),
    ("C_CHAR_UTF8", "CHAR(3) CHARACTER SET UTF8"),
    ("C_WIN1252", "VARCHAR(20) CHARACTER SET WIN1252"),
    ("C_NONE", "VARCHAR(20) CHARACTER SET NONE"),
    ("C_OCTETS", "VARCHAR(16) CHARACTER SET OCTETS"),
    ("C_UUID", "CHAR(16) CHARACTER SET OCTETS"),
    ("C_TEXT", "BLOB SUB_TYPE TEXT CHARACTER SET UTF8"),
    ("C_BINARY", "BLOB SUB_TYPE BINARY"),
    ("C_TEXT_NONE", "BLOB SUB_TYPE TEXT CHARACTER SET NONE"),
    ("C_TEXT_WIN1252", "BLOB SUB_TYPE TEXT CHARACTER SET WIN1252"),
    ("C_AMOUNT", "D_AMOUNT"),
]
SINCE_FB4 = [
    ("C_INT128", "INT128"),
    ("C_NUM38", "NUMERIC(38, 10)"),
    ("C_DECFLOAT16", "DECFLOAT(16)"),
    ("C_DECFLOAT34", "DECFLOAT(34)"),
    ("C_TIME_TZ", "TIME WITH TIME ZONE"),
    ("C_TIMESTAMP_TZ", "TIMESTAMP WITH TIME ZONE"),
    ("C_VARBINARY", "VARBINARY(10)"),
]
LEFT_OUT = [("C_ARRAY", "INTEGER [3]"), ("C_COMPUTED", "COMPUTED BY (C_INTEGER / (ID - ID))")]

NOT_UTF8 = b"\xc3\x28 caf\xe9 \xff"
# Bytes a client bound as text could not give: written in SQL.
NONE_NOT_UTF8 = (
    f"UPDATE ALL_TYPES SET C_NONE = CAST(x'{NOT_UTF8.hex()}' AS VARCHAR(20) CHARACTER SET NONE), "
    f"C_TEXT_NONE = CAST(x'{NOT_UTF8.hex()}' AS BLOB SUB_TYPE TEXT CHARACTER SET NONE) WHERE ID = 5"
)
HIGH = {
    "C_SMALLINT": 32767,
    "C_INTEGER": 2147483647,
    "C_BIGINT": 9223372036854775807,
    "C_NUM4": Decimal("9999"),
    "C_NUM9": Decimal("9999999.99"),
    "C_NUM18": Decimal("999999999999999999"),
    "C_DEC18": Decimal("92233720368547.5807"),
    "C_FLOAT": 3.4028234663852886e38,
    "C_DOUBLE": 1.7976931348623157e308,
    "C_BOOLEAN": True,
    "C_DATE": dt.date(9999, 12, 31),
    "C_TIME": dt.time(23, 59, 59, 999900),
    "C_TIMESTAMP": dt.datetime(9999, 12, 31, 23, 59, 59, 999900),
    "C_CHAR": "abcde",
    "C_VARCHAR": "🎉 ü ' \" \\ : 12:3: \n\r\t" + "x" * 30,
    "C_CHAR_UTF8": "ñé𝄞",
    "C_WIN1252": "€ café ÿ",
    "C_NONE": "plain",
    "C_OCTETS": bytes(range(240, 256)),
    "C_UUID": uuid.UUID("12345678-1234-5678-1234-567812345678").bytes,
    "C_TEXT": "ü" * 35_000,
    "C_BINARY": bytes(range(256)) * 4,
    "C_TEXT_NONE": "plain",
    "C_TEXT_WIN1252": "€ café ÿ" * 5_000,
    "C_AMOUNT": Decimal("-0.01"),
}
LOW = {
    "C_SMALLINT": -32768,
    "C_INTEGER": -2147483648,
    "C_BIGINT": -9223372036854775808,
    "C_NUM4": Decimal("-9999"),
    "C_NUM9": Decimal("-0.01"),
    "C_NUM18": Decimal("-999999999999999999"),
    "C_DEC18": Decimal("-0.0001"),
    "C_FLOAT": 1.401298464324817e-45,
    "C_DOUBLE": 5e-324,
    "C_BOOLEAN": False,
    "C_DATE": dt.date(1, 1, 1),
    "C_TIME": dt.time(0, 0),
    # The driver cannot bind timestamps before 1858-11-17 (its day 0).
    "C_TIMESTAMP": dt.datetime(1858, 11, 17),
    "C_CHAR": "",
    "C_VARCHAR": "",
    "C_CHAR_UTF8": "",
    "C_WIN1252": "",
    "C_NONE": "",
    "C_OCTETS": b"\x00\x01\x02",
    "C_UUID": bytes(16),
    "C_TEXT": "",
    "C_BINARY": b"",
    "C_TEXT_NONE": "",
    "C_TEXT_WIN1252": "",
    "C_AMOUNT": Decimal("0"),
}
ODD = {
    "C_FLOAT": 1.1,
    "C_DOUBLE": 0.1 + 0.2,
    "C_NUM9": Decimal("0.10"),
    "C_OCTETS": bytes(range(16)),
    "C_BINARY": bytes(range(256)),
    "C_TEXT": "é" * 70_000,
}
FB4_HIGH = {
    "C_INT128": Decimal(2**127 - 1),
    "C_NUM38": Decimal("9999999999999999999999999999.9999999999"),
    "C_DECFLOAT16": Decimal("9.999999999999999E+384"),
    "C_DECFLOAT34": Decimal("-1.234567890123456789012345678901234E-6143"),
    "C_VARBINARY": b"\xff" * 10,
}
FB4_LOW = {
    "C_INT128": Decimal(-(2**127)),
    "C_NUM38": Decimal("-0.0000000001"),
    "C_DECFLOAT16": Decimal("0E-398"),
    "C_DECFLOAT34": Decimal("1E+6144"),
    "C_VARBINARY": b"",
}
# Zoned values are bound with a named zone: the driver refuses zoneinfo's.
ZONED = {
    2: (dt.time(6, 45), "America/Sao_Paulo", dt.datetime(2024, 2, 29, 12, 30, 15, 500000), "+05:30"),
    3: (dt.time(23, 59, 59, 999900), "UTC", dt.datetime(1858, 11, 17, 0, 0), "Europe/Prague"),
}


def _columns(engine: str) -> list[tuple[str, str]]:
    return COMMON + (SINCE_FB4 if engine != "fb3" else []) + LEFT_OUT


def _rows(engine: str) -> dict[int, dict]:
    """Rows by id: highs, lows, all NULL, odd values; NONE text that is not
    UTF-8 is written in SQL (row 5)."""
    later = engine != "fb3"
    rows = {
        2: {**HIGH, **(FB4_HIGH if later else {})},
        3: {**LOW, **(FB4_LOW if later else {})},
        4: {},
        5: ODD,
    }
    if later:
        for row_id, (time, time_zone, stamp, stamp_zone) in ZONED.items():
            rows[row_id]["C_TIME_TZ"] = time.replace(tzinfo=get_timezone(time_zone))
            rows[row_id]["C_TIMESTAMP_TZ"] = stamp.replace(tzinfo=get_timezone(stamp_zone))
    return rows


def _insert(settings, row_id: int, values: dict) -> None:
    names = ", ".join(["ID", *values])
    marks = ", ".join("?" * (len(values) + 1))
    execute(settings, f"INSERT INTO ALL_TYPES ({names}) VALUES ({marks})", params=(row_id, *values.values()))


def _as_selected(settings, engine: str) -> dict[int, dict]:
    """Every row as the driver selects it: the reference. The driver cannot
    fetch NONE text that is not UTF-8 at all, so those columns are read as bytes."""
    names = [name for name, _ in _columns(engine) if (name, _) not in LEFT_OUT]
    as_bytes = {
        "C_NONE": "CAST(C_NONE AS VARCHAR(20) CHARACTER SET OCTETS)",
        "C_TEXT_NONE": "CAST(C_TEXT_NONE AS BLOB SUB_TYPE BINARY)",
    }
    expressions = [as_bytes.get(name, name) for name in ["ID", *names]]
    rows = {}
    with Database(settings) as db, db.transaction() as cursor:
        cursor.execute(f"SELECT {', '.join(expressions)} FROM ALL_TYPES ORDER BY ID")
        for row in cursor.fetchall():
            values = dict(zip(["ID", *names], row))
            values["C_TEXT"] = read_text(values["C_TEXT"])
            values["C_BINARY"] = read_blob(values["C_BINARY"])
            values["C_TEXT_WIN1252"] = read_text(values["C_TEXT_WIN1252"])
            values["C_TEXT_NONE"] = read_blob(values["C_TEXT_NONE"])
            for name in as_bytes:
                none = values[name]
                values[name] = none if none is None or none == NOT_UTF8 else none.decode()
            rows[values["ID"]] = values
    return rows


def _same(captured: dict, selected: dict) -> None:
    assert list(captured) == list(selected)
    for name, value in selected.items():
        got = captured[name]
        assert type(got) is type(value), (name, got, value)
        if isinstance(value, (dt.datetime, dt.time)) and value.tzinfo is not None:
            # The driver's own tzinfo, with the zone's Firebird name.
            assert type(got.tzinfo) is type(value.tzinfo), (name, got.tzinfo, value.tzinfo)
            assert got.tzinfo._timezone_ == value.tzinfo._timezone_, name
            assert got.replace(tzinfo=None) == value.replace(tzinfo=None), name
        elif isinstance(value, Decimal):
            assert str(got) == str(value), name  # the same digits, exponent and sign
        elif isinstance(value, float):
            assert _same_float(got, value), (name, got, value)
        else:
            assert got == value, name


def _same_float(got: float, value: float) -> bool:
    """Equal, NaN included, and zeros with the same sign."""
    if math.isnan(value):
        return math.isnan(got)
    return got == value and math.copysign(1, got) == math.copysign(1, value)


@pytest.fixture
def all_types(settings, engine):
    execute(settings, "CREATE DOMAIN D_AMOUNT AS NUMERIC(12, 2)")
    columns = ", ".join(f"{name} {kind}" for name, kind in _columns(engine))
    execute(settings, f"CREATE TABLE ALL_TYPES (ID INTEGER NOT NULL PRIMARY KEY, {columns})")
    Subs(settings).ok("add", "all_types", "IUD", "audit")
    return settings


def test_every_type_round_trips_exactly_through_insert_update_delete(all_types, engine):
    settings = all_types
    rows = _rows(engine)
    for row_id, values in rows.items():
        _insert(settings, row_id, values)
    inserted = _as_selected(settings, engine)
    execute(settings, NONE_NOT_UTF8)
    before = _as_selected(settings, engine)
    # Each row takes the next row's values: every value is once old, once new.
    names = list(rows[2])
    for row_id, source in {2: 3, 3: 4, 4: 5, 5: 2}.items():
        # NULL as a literal: firebird-driver 2.1 fails to bind None to a CHAR UTF8.
        values = {name: rows[source].get(name) for name in names}
        assignments = ", ".join(f"{name} = {'NULL' if value is None else '?'}" for name, value in values.items())
        bound = tuple(value for value in values.values() if value is not None)
        execute(settings, f"UPDATE ALL_TYPES SET {assignments} WHERE ID = ?", params=(*bound, row_id))
    after = _as_selected(settings, engine)
    execute(settings, "DELETE FROM ALL_TYPES")

    logged = events(settings)
    assert [e["action"] for e in logged] == ["I"] * 4 + ["U"] * 5 + ["D"] * 4
    inserts, none_fix, updates, deletes = logged[:4], logged[4], logged[5:9], logged[9:]
    for event in inserts:
        assert event["old"] is None
        _same(event["new"], inserted[event["pk"]["ID"]])
    _same(none_fix["old"], inserted[5])
    _same(none_fix["new"], before[5])
    assert none_fix["new"]["C_NONE"] == none_fix["new"]["C_TEXT_NONE"] == NOT_UTF8
    for event in updates:
        _same(event["old"], before[event["pk"]["ID"]])
        _same(event["new"], after[event["pk"]["ID"]])
    for event in deletes:
        _same(event["old"], after[event["pk"]["ID"]])
        assert event["new"] is None
    assert [e["pk"] for e in logged] == [{"ID": e["pk"]["ID"]} for e in logged]


def test_captured_values_bind_back_into_the_driver(all_types, engine):
    """A handler copying changes into another Firebird table (replication)
    binds the event's values as they come: the copy equals the original."""
    settings = all_types
    rows = _rows(engine)
    for row_id, values in rows.items():
        _insert(settings, row_id, values)
    execute(settings, NONE_NOT_UTF8)
    captured = [e["new"] for e in events(settings) if e["action"] == "I"]
    captured[-1] = [e["new"] for e in events(settings) if e["action"] == "U"][0]
    execute(settings, "DELETE FROM ALL_TYPES")
    for values in captured:
        # NULL as a literal: firebird-driver 2.1 fails to bind None to a CHAR UTF8.
        given = {name: value for name, value in values.items() if value is not None}
        _insert(settings, given.pop("ID"), given)
    copied = _as_selected(settings, engine)
    assert sorted(copied) == [2, 3, 4, 5]
    for values in captured:
        _same(values, copied[values["ID"]])


def test_arrays_and_computed_columns_are_left_out_and_never_fail_a_write(all_types, engine):
    execute(all_types, "INSERT INTO ALL_TYPES (ID, C_INTEGER) VALUES (1, 7)")
    (event,) = events(all_types)
    assert "C_ARRAY" not in event["new"] and "C_COMPUTED" not in event["new"]
    assert event["new"]["C_INTEGER"] == 7


# (FLOAT, DOUBLE PRECISION) by row: values no arithmetic may touch, and zeros.
SPECIAL_FLOATS = {
    1: (math.inf, -math.inf),
    2: (-math.inf, math.nan),
    3: (math.nan, -0.0),
    4: (-0.0, math.inf),
    5: (0.0, 0.0),
}


def _floats(settings) -> dict[int, dict]:
    with Database(settings) as db, db.transaction() as cursor:
        cursor.execute("SELECT ID, F, D FROM FLOATS ORDER BY ID")
        return {row[0]: {"ID": row[0], "F": row[1], "D": row[2]} for row in cursor.fetchall()}


def test_infinities_nan_and_negative_zero_never_fail_a_write_and_arrive_as_stored(settings):
    execute(settings, "CREATE TABLE FLOATS (ID INTEGER NOT NULL PRIMARY KEY, F FLOAT, D DOUBLE PRECISION)")
    Subs(settings).ok("add", "floats", "IUD", "audit")
    for row_id, (single, double) in SPECIAL_FLOATS.items():
        execute(settings, "INSERT INTO FLOATS VALUES (?, ?, ?)", params=(row_id, single, double))
    inserted = _floats(settings)
    execute(settings, "UPDATE FLOATS SET F = D, D = F")
    updated = _floats(settings)
    execute(settings, "DELETE FROM FLOATS")

    logged = events(settings)
    assert [e["action"] for e in logged] == ["I"] * 5 + ["U"] * 5 + ["D"] * 5
    for event in logged:
        key = event["pk"]["ID"]
        if event["action"] == "I":
            _same(event["new"], inserted[key])
        elif event["action"] == "U":
            _same(event["old"], inserted[key])
            _same(event["new"], updated[key])
        else:
            _same(event["old"], updated[key])
    assert math.copysign(1, inserted[3]["D"]) == -1, "the driver reads -0 back: the comparison means something"


def test_floats_of_every_magnitude_arrive_bit_for_bit(settings, engine):
    """Random bit patterns (every exponent, subnormals, extremes) through the
    float encodings: decimal digits in row images on Firebird 4 and later
    (written by a session that traps every DECFLOAT condition and rounds
    up: the conversion is exact), integer and power of two elsewhere (keys,
    Firebird 3)."""
    generator = random.Random(18)
    smallest_normal = 2.0**-1022  # the binade the integer-and-power-of-two form once got wrong
    doubles = [5e-324, -smallest_normal, math.nextafter(smallest_normal, 1), 1.7976931348623157e308, 0.1, 2.0**53 + 2]
    singles = [1.4e-45, -3.4028234663852886e38, 1.1]
    while len(doubles) < 1500:
        (double,) = struct.unpack("<d", generator.getrandbits(64).to_bytes(8, "little"))
        if math.isfinite(double) and double:
            doubles.append(double)
    while len(singles) < len(doubles):
        (single,) = struct.unpack("<f", generator.getrandbits(32).to_bytes(4, "little"))
        if math.isfinite(single) and single:
            singles.append(single)
    execute(
        settings,
        "CREATE TABLE RANDOM_FLOATS (ID INTEGER NOT NULL, K DOUBLE PRECISION NOT NULL, F FLOAT, D DOUBLE PRECISION, "
        "PRIMARY KEY (ID, K))",
    )
    Subs(settings).ok("add", "random_floats", "I", "audit")
    with Database(settings) as db:
        if engine != "fb3":
            db.connection.execute_immediate(
                "SET DECFLOAT TRAPS TO Division_by_zero, Inexact, Invalid_operation, Overflow, Underflow"
            )
            db.connection.execute_immediate("SET DECFLOAT ROUND CEILING")
            db.connection.commit()  # the settings belong to the attachment
            with db.transaction() as cursor, pytest.raises(DatabaseError, match="(?i)inexact"):
                cursor.execute("SELECT CAST(1 AS DECFLOAT(34)) / 3 FROM RDB$DATABASE")
                cursor.fetchone()
        with db.transaction() as cursor:
            cursor.executemany(
                "INSERT INTO RANDOM_FLOATS VALUES (?, ?, ?, ?)",
                [(row_id, double, single, double) for row_id, (single, double) in enumerate(zip(singles, doubles))],
            )
    with Database(settings) as db, db.transaction() as cursor:
        cursor.execute("SELECT ID, K, F, D FROM RANDOM_FLOATS")
        selected = {row[0]: row for row in cursor.fetchall()}
    logged = events(settings)
    assert len(logged) == len(selected) == len(doubles)
    for event in logged:
        row_id, key, single, double = selected[event["pk"]["ID"]]
        assert struct.pack("<dd", event["pk"]["K"], event["new"]["K"]) == struct.pack("<dd", key, key), row_id
        assert struct.pack("<dd", event["new"]["F"], event["new"]["D"]) == struct.pack("<dd", single, double), row_id


def test_every_time_zone_of_the_engine_arrives_as_the_same_instant(settings, engine):
    """A value in each zone the engine has decodes to the instant the engine
    gives it, with the driver's tzinfo of its zone: as the driver selects it,
    or, for a zone the tz database dropped (which the driver returns without
    a zone), the region it stands for (capture/zones.py)."""
    if engine == "fb3":
        pytest.skip("Firebird 3 has no time zone types")
    execute(
        settings,
        "CREATE TABLE ZONED (ID INTEGER NOT NULL PRIMARY KEY, ZONE_NAME VARCHAR(63), "
        "STAMP TIMESTAMP WITH TIME ZONE, CLOCK TIME WITH TIME ZONE)",
    )
    Subs(settings).ok("add", "zoned", "I", "audit")
    execute(
        settings,
        """EXECUTE BLOCK AS
        DECLARE row_id INTEGER = 0;
        DECLARE zone_name VARCHAR(63);
        DECLARE stamp_day VARCHAR(10);
        BEGIN
            FOR SELECT TRIM(RDB$TIME_ZONE_NAME) FROM RDB$TIME_ZONES INTO zone_name DO
                FOR SELECT d FROM (SELECT '2024-01-15' AS d FROM RDB$DATABASE
                                   UNION ALL SELECT '2024-07-01' FROM RDB$DATABASE) INTO stamp_day DO
                BEGIN
                    row_id = row_id + 1;
                    INSERT INTO ZONED VALUES (:row_id, :zone_name,
                        CAST(:stamp_day || ' 12:00:00 ' || :zone_name AS TIMESTAMP WITH TIME ZONE),
                        CAST('12:00:00 ' || :zone_name AS TIME WITH TIME ZONE));
                END
        END""",
    )
    with Database(settings) as db, db.transaction() as cursor:
        cursor.execute("SELECT ID, ZONE_NAME, CAST(STAMP AT TIME ZONE 'UTC' AS TIMESTAMP), STAMP, CLOCK FROM ZONED")
        selected = {row[0]: row[1:] for row in cursor.fetchall()}
    captured = {event["new"]["ID"]: event["new"] for event in events(settings)}
    assert len(captured) == len(selected) > 1000
    legacy = set()
    for row_id, (name, utc, stamp, clock) in selected.items():
        new = captured[row_id]
        assert new["STAMP"].astimezone(dt.timezone.utc).replace(tzinfo=None) == utc, name
        if stamp.tzinfo is None:
            legacy.add(name)
            assert new["STAMP"].tzinfo._timezone_ == LEGACY_ZONES[name]
            assert new["CLOCK"].tzinfo._timezone_ == LEGACY_ZONES[name]
            assert new["STAMP"].replace(tzinfo=None) == stamp and new["CLOCK"].replace(tzinfo=None) == clock
        else:
            _same({"STAMP": new["STAMP"], "CLOCK": new["CLOCK"]}, {"STAMP": stamp, "CLOCK": clock})
    assert legacy <= set(LEGACY_ZONES) and "PST" in legacy


def test_binary_keys_none_text_keys_and_float_keys_are_exact(settings):
    execute(
        settings,
        "CREATE TABLE ODD_KEYS (K1 VARCHAR(5) CHARACTER SET OCTETS NOT NULL, K2 VARCHAR(8) CHARACTER SET NONE "
        "NOT NULL, K3 DOUBLE PRECISION NOT NULL, NOTE INTEGER, PRIMARY KEY (K1, K2, K3))",
    )
    Subs(settings).ok("add", "odd_keys", "IUD", "audit")
    execute(
        settings,
        f"INSERT INTO ODD_KEYS VALUES (x'00ff', CAST(x'{NOT_UTF8[:8].hex()}' AS VARCHAR(8) CHARACTER SET NONE), ?, 1)",
        params=(0.1 + 0.2,),
    )
    execute(settings, "UPDATE ODD_KEYS SET NOTE = 2", "DELETE FROM ODD_KEYS")
    keys = [e["pk"] for e in events(settings)]
    assert keys == [{"K1": b"\x00\xff", "K2": NOT_UTF8[:8], "K3": 0.30000000000000004}] * 3


def test_to_json_is_lossless_and_documented(settings, engine):
    """Decimal as its digits, floats as their shortest exact repr (NaN and
    the infinities as strings: JSON has no number for them), bytes as
    base64, times in ISO 8601 with the zone name when there is one."""
    event = Event(
        id=1,
        table="T",
        action="I",
        tag="t",
        pk={"ID": 1},
        old=None,
        new={
            "d": Decimal("1.10"),
            "f": 0.1 + 0.2,
            "b": b"\x00\xff",
            "z": dt.datetime(2024, 2, 29, 12, 30, tzinfo=zoneinfo.ZoneInfo("Europe/Prague")),
            "o": dt.time(6, 45, tzinfo=dt.timezone(dt.timedelta(hours=-3))),
            # As captured values come: with the driver's tzinfo.
            "Z": dt.datetime(2024, 2, 29, 12, 30, tzinfo=get_timezone("Europe/Prague")),
            "O": dt.time(6, 45, tzinfo=get_timezone("-03:00")),
            "inf": -math.inf,
            "nan": math.nan,
            "dnan": Decimal("NaN"),
            "zero": -0.0,
        },
        attempt=1,
        created_at=dt.datetime(2024, 1, 1),
    )
    new = json.loads(event.to_json(), parse_constant=_not_json)["new"]
    assert new == {
        "d": "1.10",
        "f": 0.30000000000000004,
        "b": "AP8=",
        "z": "2024-02-29T12:30:00+01:00[Europe/Prague]",
        "o": "06:45:00-03:00",
        "Z": "2024-02-29T12:30:00+01:00[Europe/Prague]",
        "O": "06:45:00-03:00",
        "inf": "-Infinity",
        "nan": "NaN",
        "dnan": "NaN",
        "zero": -0.0,
    }
    assert math.copysign(1, new["zero"]) == -1


def _not_json(token: str) -> None:
    raise AssertionError(f"{token} is not JSON")


# Letters of many scripts: each character set's column gets those it can hold.
SAMPLE_TEXT = "Azé€ŽЖўÆßğłΩʽאبกあア中갂각ḿ“…±"


def test_text_of_every_character_set_is_captured_as_the_driver_reads_it(settings):
    with Database(settings) as db, db.transaction() as cursor:
        cursor.execute("SELECT TRIM(RDB$CHARACTER_SET_NAME) FROM RDB$CHARACTER_SETS ORDER BY RDB$CHARACTER_SET_ID")
        charsets = [row[0] for row in cursor.fetchall() if row[0] not in ("NONE", "OCTETS")]
        texts = {}
        for charset in charsets:
            held = []
            for char in SAMPLE_TEXT:
                try:
                    cursor.execute(f"SELECT CAST(? AS VARCHAR(1) CHARACTER SET {charset}) FROM RDB$DATABASE", (char,))
                    held.append(cursor.fetchone()[0])
                except DatabaseError:
                    pass
            texts[charset] = "".join(held)
    assert len(charsets) >= 50 and len(texts["KSC_5601"]) > 3 and len(texts["TIS620"]) > 3
    columns = ", ".join(f'"C_{charset}" VARCHAR(30) CHARACTER SET {charset}' for charset in charsets)
    execute(settings, f"CREATE TABLE CHARSETS (ID INTEGER NOT NULL PRIMARY KEY, {columns})")
    Subs(settings).ok("add", "charsets", "I", "audit")
    execute(settings, f"INSERT INTO CHARSETS VALUES (1{', ?' * len(charsets)})", params=tuple(texts.values()))

    with Database(settings) as db, db.transaction() as cursor:
        cursor.execute("SELECT * FROM CHARSETS")
        selected = dict(zip([d[0] for d in cursor.description], cursor.fetchone()))
    captured = events(settings)[0]["new"]
    assert {name: (type(v), v) for name, v in captured.items()} == {name: (type(v), v) for name, v in selected.items()}


def test_every_byte_of_every_single_byte_character_set_reads_as_the_engine_reads_it(settings):
    """Byte by byte, the decoder against the engine's own transliteration;
    a byte the set leaves undefined (the engine reads it as U+0000 or U+FFFD,
    or refuses it) keeps the value bytes."""
    misread = []
    with Database(settings) as db, db.transaction() as cursor:
        cursor.execute(
            "SELECT TRIM(RDB$CHARACTER_SET_NAME) FROM RDB$CHARACTER_SETS "
            "WHERE RDB$BYTES_PER_CHARACTER = 1 AND RDB$CHARACTER_SET_NAME NOT IN ('NONE', 'OCTETS')"
        )
        for (charset,) in cursor.fetchall():
            for byte in range(1, 256):
                try:
                    cursor.execute(
                        f"SELECT CAST(CAST(CAST(? AS VARCHAR(1) CHARACTER SET OCTETS) AS VARCHAR(1) CHARACTER SET "
                        f"{charset}) AS VARCHAR(1) CHARACTER SET UTF8) FROM RDB$DATABASE",
                        (bytes([byte]),),
                    )
                    read = cursor.fetchone()[0]
                except DatabaseError:
                    read = "\ufffd"
                expected = bytes([byte]) if read in ("\x00", "\ufffd") else read
                if decode_text(bytes([byte]), charset) != expected:
                    misread.append((charset, hex(byte), read, decode_text(bytes([byte]), charset)))
    assert misread == []
