"""The configuration reference, as the code and each document state it.

config_keys() reads the key tables of config/config.c (what the parser
accepts), key_table() each key's parser, bounds and default (set_defaults).
reload_classes(doc) reads what a document says a reload does with each key:
the RELOADING section of ringd.yaml(5), the reference, or the "# Reloading"
comment of deploy/ringd.example.yaml (a "### Reload" section of a Markdown
file and the SIGHUP paragraph of ringd(8) are read too, should they list
keys). Each names the keys in two lists, each after a colon that follows its
marker ("at once", "re-form" for the ring), separated by commas or "and",
ended by a full stop or a semicolon; remarks go in parentheses. No key waits
for a restart.
"""
import os
import re

MAN5 = "deploy/man/man5/ringd.yaml.5"
SOURCE = os.environ.get("RINGD_SOURCE_DIR",
                        os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CLASSES = ("at once", "re-form")


def path(rel):
    return os.path.join(SOURCE, rel)


def config_keys():
    """(top-level keys, host keys) that config/config.c accepts."""
    text = open(path("config/config.c")).read()
    tables = {}
    for name in ("top_keys", "host_keys"):
        body = re.search(r"static const struct key %s\[\] = \{(.*?)\n\};" % name, text, re.S)
        tables[name] = re.findall(r'^\s*\{"([a-z_]+)",', body.group(1), re.M)
    return tables["top_keys"], tables["host_keys"]


# The constants of config/config.c's tables and defaults.
UNITS = {"KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3, "SEC": 1000, "MIN": 60000,
         "HOUR": 3600000}


def key_table():
    """{key: {"parser", "required", "min", "max", "field", "default"}} for the
    top-level keys of config/config.c; min, max and default are numbers (in
    bytes or milliseconds) or None, a default may be a string."""
    text = open(path("config/config.c")).read()
    consts = dict(UNITS)
    for m in re.finditer(r"^#define (CFG_MAX_\w+) (\d+)", open(path("config/config.h")).read(), re.M):
        consts[m.group(1)] = int(m.group(2))

    def num(expr):
        expr = expr.strip().replace("ull", "")
        if not re.fullmatch(r"[\w\s*]+", expr):
            return None
        if re.fullmatch(r"0[0-7]+", expr):  # C's octal
            return int(expr, 8)
        try:
            return eval(expr, {"__builtins__": {}}, consts)
        except NameError:
            return None

    body = re.search(r"static const struct key top_keys\[\] = \{(.*?)\n\};", text, re.S).group(1)
    out = {}
    for m in re.finditer(r'\{"([a-z_]+)",\s*(\w+),\s*(true|false),\s*(.*?)\},', body, re.S):
        rest = [r.strip() for r in re.sub(r"\s+", " ", m.group(4)).split(",")]
        field = re.match(r"FIELD\(cfg,\s*(\w+)\)", ",".join(rest[:2]))
        tail = rest[2:] if field else rest[3:]
        out[m.group(1)] = {"parser": m.group(2), "required": m.group(3) == "true",
                           "field": field.group(1) if field else None,
                           "min": num(tail[0]) if len(tail) > 1 else None,
                           "max": num(tail[1]) if len(tail) > 1 else None, "default": None}
    defaults = re.search(r"static void set_defaults\(cfg \*c\)\n\{(.*?)\n\}", text, re.S).group(1)
    for m in re.finditer(r"c->(\w+) = (.*?);", defaults):
        for info in out.values():
            if info["field"] == m.group(1):
                s = re.fullmatch(r'strdup\("(.*)"\)', m.group(2))
                info["default"] = s.group(1) if s else num(m.group(2))
    return out


def show(value, parser):
    """A size or a duration as ringd.yaml(5) writes it: 256KiB, 100ms, 24h."""
    if parser in ("parse_size",):
        units = [("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)]
    elif parser in ("parse_duration", "parse_evict_after"):
        units = [("h", 3600000), ("m", 60000), ("s", 1000)]
        if value == 0:
            return "0"
        for name, size in units:
            if value % size == 0:
                return "%d%s" % (value // size, name)
        return "%dms" % value
    else:
        return str(value)
    for name, size in units:
        if value and value % size == 0:
            return "%d%s" % (value // size, name)
    return str(value)


def man_entries(doc=MAN5):
    """{key: text} of the .TP entries of a man page that start with a bold
    key name, by section: {"top": {...}, "host": {...}}; the HOST KEYS
    section holds the keys of a host entry."""
    text = open(path(doc)).read()
    out = {"top": {}, "host": {}}
    section = None
    for block in re.split(r"^(?=\.SH |\.TP\n)", text, flags=re.M):
        if block.startswith(".SH "):
            section = block.split("\n", 1)[0][4:].strip().strip('"')
            continue
        m = re.match(r"\.TP\n\.B ([a-z_]+)\n(.*)", block, re.S)
        if m and section != "DESCRIPTION" and section != "FILES":
            kind = "host" if section == "HOST KEYS" else "top"
            out[kind][m.group(1)] = re.sub(r"\\-", "-", m.group(2))
    return out


def reload_section(doc):
    """The text where doc (ringd.yaml.5, ringd.example.yaml, or a Markdown
    file or ringd.8 that lists keys) says what a reload does."""
    text = open(path(doc)).read()
    if doc.endswith(".5"):
        m = re.search(r"^\.SH RELOADING\n(.*?)(?=^\.SH)", text, re.S | re.M)
    elif doc.endswith(".md"):
        m = re.search(r"^### Reload\n(.*?)(?=^#)", text, re.S | re.M)
    elif doc.endswith(".8"):
        m = re.search(r"^\.B SIGHUP\n(.*?)(?=^\.(?:SH|TP))", text, re.S | re.M)
    else:
        m = re.search(r"^# Reloading(.*?)(?=^\s*$)", text, re.S | re.M)
    assert m, "%s: no reload section found" % doc
    # Unescape troff's \- and drop markup so keys read as words.
    return re.sub(r"\\-", "-", m.group(1))


def reload_classes(doc):
    """{class: set of keys} for the classes of CLASSES, as doc states them."""
    text = reload_section(doc)
    text = re.sub(r"^#", "", text, flags=re.M)           # YAML comment marks
    text = re.sub(r"\([^()]*\)", "", text)               # remarks in parentheses
    text = re.sub(r"\\f[BIRP]|`|\*", "", text)           # troff and Markdown markup
    out = {}
    for c in CLASSES:
        m = re.search(re.escape(c) + r"[^:]*:(.*?)(?:[.;](?:\s|$)|$)", text, re.S)
        assert m, "%s: the reload section has no list after %r" % (doc, c)
        items = [i.strip() for i in re.split(r",|\band\b", m.group(1))]
        out[c] = {i for i in items if i}
    return out


def parser_words(parser):
    """The words a parser of config/config.c accepts (its names[] table and
    the strings it compares with), e.g. ["crc32c", "none"]."""
    text = open(path("config/config.c")).read()
    m = re.search(r"^static int %s\(.*?^\}" % parser, text, re.S | re.M)
    if not m:
        return []
    body = m.group(0)
    words = []
    for table in re.findall(r"names\[\] = \{(.*?)\};", body, re.S):
        words += re.findall(r'"([^"]+)"', table)
    words += re.findall(r'strcmp\(s, "([^"]+)"\)', body)
    return sorted(set(words))


def parse_value(text, parser):
    """A size or a duration as written in a document (256KiB, 4 MiB, 100ms,
    24h, 0), in bytes or milliseconds; None if it is not one."""
    m = re.fullmatch(r"(\d+)\s*([A-Za-z]*)", text.strip())
    if not m:
        return None
    n, unit = int(m.group(1)), m.group(2)
    if parser == "parse_size":
        scale = {"": 1, "K": 1024, "KiB": 1024, "M": 1024 ** 2, "MiB": 1024 ** 2,
                 "G": 1024 ** 3, "GiB": 1024 ** 3}
    elif parser in ("parse_duration", "parse_evict_after"):
        scale = {"ms": 1, "s": 1000, "m": 60000, "h": 3600000, "": 1 if n == 0 else None}
    else:
        scale = {"": 1}
    return n * scale[unit] if scale.get(unit) is not None else None

