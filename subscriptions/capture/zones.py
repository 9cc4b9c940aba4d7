"""Time zones of captured values, as firebird-driver's own tzinfo.

The engine names zones from its ICU data; the driver looks them up in the
system's tz database (dateutil). ICU still knows Java's old three-letter
IDs and two links the tz database has dropped, so a value stored as
``12:00 PST`` would name a zone no tzinfo exists for (the driver then
returns it without a zone). Each of them comes as the region it stands for,
with the same rules: tests/test_capture_types.py checks every zone the
engine has against the engine's own conversion to UTC.
"""

from __future__ import annotations

import datetime as dt

LEGACY_ZONES = {
    "ACT": "Australia/Darwin",
    "AET": "Australia/Sydney",
    "AGT": "America/Argentina/Buenos_Aires",
    "ART": "Africa/Cairo",
    "AST": "America/Anchorage",
    "BET": "America/Sao_Paulo",
    "BST": "Asia/Dhaka",
    "CAT": "Africa/Harare",
    "CNT": "America/St_Johns",
    "CST": "America/Chicago",
    "CTT": "Asia/Shanghai",
    "EAT": "Africa/Addis_Ababa",
    "ECT": "Europe/Paris",
    "IET": "America/Indiana/Indianapolis",
    "IST": "Asia/Kolkata",
    "JST": "Asia/Tokyo",
    "MIT": "Pacific/Apia",
    "NET": "Asia/Yerevan",
    "NST": "Pacific/Auckland",
    "PLT": "Asia/Karachi",
    "PNT": "America/Phoenix",
    "PRT": "America/Puerto_Rico",
    "PST": "America/Los_Angeles",
    "SST": "Pacific/Guadalcanal",
    "VST": "Asia/Ho_Chi_Minh",
    "Canada/East-Saskatchewan": "America/Regina",
    "US/Pacific-New": "America/Los_Angeles",
}


def zone(name: str) -> dt.tzinfo:
    """The driver's own tzinfo for a Firebird zone, a region or an offset: a
    captured value then compares, prints and binds back into firebird-driver
    (a handler writing it to another database) as the value it selects.
    Imported here: handler processes load the driver only for zoned values."""
    from firebird.driver import get_timezone

    found: dt.tzinfo | None = get_timezone(name)
    if found is None and name in LEGACY_ZONES:
        found = get_timezone(LEGACY_ZONES[name])
    if found is None:
        raise ValueError(f"time zone {name!r} is not in this system's time zone database; update the tzdata package")
    return found
