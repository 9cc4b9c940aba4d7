"""Text of every Firebird character set read back from its stored bytes as
the engine itself reads it: a captured value then equals what
firebird-driver selects through a UTF8 attachment (the engine's
transliteration), not what some other table of the same name says.

Most character sets have a Python codec that agrees with the engine on
every character it can store. For the single-byte sets where none does
(CYRL and NEXT have no codec; ISO8859_7, ISO8859_8 and KOI8U follow older
tables; TIS620 has Windows-874's additions and private-use characters) the
engine's own table of bytes 0x80-0xFF is below, made from Firebird 5's
transliteration of each byte; tests/test_capture_types.py checks every
single-byte set against each engine. Bytes a set leaves undefined, and any
text that is not valid in its set (CHARACTER SET NONE that is not UTF-8),
stay bytes.
"""

from __future__ import annotations

import codecs

# Firebird character sets read with a Python codec of another name.
_CODECS = {
    "UTF8": "utf-8",
    "UNICODE_FSS": "utf-8",
    "ASCII": "ascii",
    "NONE": "utf-8",
    "SJIS_0208": "shift_jis",
    "EUCJ_0208": "euc_jp",
    # The engine's KSC_5601 is Microsoft's code page 949 (all of Hangul).
    "KSC_5601": "cp949",
    "BIG_5": "big5",
    "GB_2312": "gb2312",
    # The engine's GBK has GB18030's two-byte characters and the euro sign
    # as the single byte 0x80 (_GBK_EURO).
    "GBK": "gb18030",
    "CP943C": "cp932",
    "KOI8R": "koi8_r",
}
_GBK_EURO = "subs.gbk_euro"
# Python's GB18030 is the 2000 edition; the engine's is 2005's, which swaps
# these two characters (bytes A8BC and 8135F437).
_GB18030_2005 = {0x1E3F: 0xE7C7, 0xE7C7: 0x1E3F}
# Bytes 0x80-0xFF as the engine reads them; U+FFFE (undefined to
# codecs.charmap_decode) where it has none.
_UPPER_HALVES = {
    "CYRL": (
        "ЂЃ‚ѓ„…†‡€‰Љ‹ЊЌЋЏ"
        "ђ‘’“”•–—\ufffe™љ›њќћџ"
        "\u00a0ЎўЈ¤Ґ¦§Ё©Є«¬\u00ad®Ї"
        "°±Ііґµ¶·ё№є»јЅѕї"
        "АБВГДЕЖЗИЙКЛМНОП"
        "РСТУФХЦЧШЩЪЫЬЭЮЯ"
        "абвгдежзийклмноп"
        "рстуфхцчшщъыьэюя"
    ),
    "ISO8859_7": (
        "\u0080\u0081\u0082\u0083\u0084\u0085\u0086\u0087\u0088\u0089\u008a\u008b\u008c\u008d\u008e\u008f"
        "\u0090\u0091\u0092\u0093\u0094\u0095\u0096\u0097\u0098\u0099\u009a\u009b\u009c\u009d\u009e\u009f"
        "\u00a0ʽʼ£\ufffe\ufffe¦§¨©\ufffe«¬\u00ad\ufffe―"
        "°±²³΄΅Ά·ΈΉΊ»Ό½ΎΏ"
        "ΐΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟ"
        "ΠΡ\ufffeΣΤΥΦΧΨΩΪΫάέήί"
        "ΰαβγδεζηθικλμνξο"
        "πρςστυφχψωϊϋόύώ\ufffe"
    ),
    "ISO8859_8": (
        "\u0080\u0081\u0082\u0083\u0084\u0085\u0086\u0087\u0088\u0089\u008a\u008b\u008c\u008d\u008e\u008f"
        "\u0090\u0091\u0092\u0093\u0094\u0095\u0096\u0097\u0098\u0099\u009a\u009b\u009c\u009d\u009e\u009f"
        "\u00a0\ufffe¢£¤¥¦§¨©×«¬\u00ad®‾"
        "°±²³´µ¶·¸¹÷»¼½¾\ufffe"
        "\ufffe\ufffe\ufffe\ufffe\ufffe\ufffe\ufffe\ufffe\ufffe\ufffe\ufffe\ufffe\ufffe\ufffe\ufffe\ufffe"
        "\ufffe\ufffe\ufffe\ufffe\ufffe\ufffe\ufffe\ufffe\ufffe\ufffe\ufffe\ufffe\ufffe\ufffe\ufffe‗"
        "אבגדהוזחטיךכלםמן"
        "נסעףפץצקרשת\ufffe\ufffe\ufffe\ufffe\ufffe"
    ),
    "KOI8U": (
        "─│┌┐└┘├┤┬┴┼▀▄█▌▐"
        "░▒▓⌠■∙√≈≤≥\u00a0⌡°²·÷"
        "═║╒ёє╔ії╗╘╙╚╛ґў╞"
        "╟╠╡ЁЄ╣ІЇ╦╧╨╩╪ҐЎ©"
        "юабцдефгхийклмно"
        "пярстужвьызшэщчъ"
        "ЮАБЦДЕФГХИЙКЛМНО"
        "ПЯРСТУЖВЬЫЗШЭЩЧЪ"
    ),
    "NEXT": (
        "\u00a0ÀÁÂÃÄÅÇÈÉÊËÌÍÎÏ"
        "ÐÑÒÓÔÕÖÙÚÛÜÝÞµ×÷"
        "©¡¢£⁄¥ƒ§¤’“«‹›ﬁﬂ"
        "®–†‡·¦¶•‚„”»…‰¬¿"
        "¹ˋ´ˆ˜¯˘˙¨²˚¸³˝˛ˇ"
        "—±¼½¾àáâãäåçèéêë"
        "ìÆíªîïðñŁØŒºòóôõ"
        "öæùúûıüýłøœßþÿ\ufffe\ufffe"
    ),
    "TIS620": (
        "€\u0081\u0082\u0083\u0084…\u0086\u0087\u0088\u0089\u008a\u008b\u008c\u008d\u008e\u008f"
        "\u0090‘’“”•–—\u0098\u0099\u009a\u009b\u009c\u009d\u009e\u009f"
        "\u00a0กขฃคฅฆงจฉชซฌญฎฏ"
        "ฐฑฒณดตถทธนบปผฝพฟ"
        "ภมยรฤลฦวศษสหฬอฮฯ"
        "ะัาำิีึืฺุู\uf8c1\uf8c2\uf8c3\uf8c4฿"
        "เแโใไๅๆ็่้๊๋์ํ๎๏"
        "๐๑๒๓๔๕๖๗๘๙๚๛\uf8c5\uf8c6\uf8c7\uf8c8"
    ),
}
_CHARMAPS = {name: "".join(map(chr, range(128))) + upper for name, upper in _UPPER_HALVES.items()}


def _euro_in_gbk(error: UnicodeError) -> tuple[str, int]:
    if isinstance(error, UnicodeDecodeError) and error.object[error.start] == 0x80:
        return "\u20ac", error.start + 1
    raise error


codecs.register_error(_GBK_EURO, _euro_in_gbk)


def decode_text(data: bytes, charset: str) -> str | bytes:
    """``data``, text of ``charset`` in its stored bytes, as str; bytes when
    it is not valid text of that set."""
    try:
        if charset in _CHARMAPS:
            return codecs.charmap_decode(data, "strict", _CHARMAPS[charset])[0]
        if charset == "GB18030":
            return data.decode("gb18030").translate(_GB18030_2005)
        return data.decode(_codec(charset), _GBK_EURO if charset == "GBK" else "strict")
    except (LookupError, UnicodeDecodeError):
        return data


def _codec(charset: str) -> str:
    """The Python codec of a Firebird character set (WIN1252 is cp1252,
    DOS866 cp866, ISO8859_2 iso8859_2, ...)."""
    if charset in _CODECS:
        return _CODECS[charset]
    for prefix in ("WIN", "DOS"):
        if charset.startswith(prefix) and charset[len(prefix) :].isdigit():
            return "cp" + charset[len(prefix) :]
    return charset.lower()
