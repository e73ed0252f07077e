"""The configuration reference, as the code and each document state it.

config_keys() reads the key tables of config/config.c (what the parser
accepts). reload_classes(doc) reads what a document says a reload does with
each key: the README's "### Reload" section, the SIGHUP paragraph of
ringd(8), or the "# Reloading" comment of deploy/ringd.example.yaml. Each
names the keys in two lists, each after a colon that follows its marker
("at once", "re-form" for the ring), separated by commas or "and", ended by
a full stop or a semicolon; remarks go in parentheses. No key waits for a
restart.
"""
import os
import re

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


def reload_section(doc):
    """The text where doc (README.md, ringd.8 or ringd.example.yaml) says
    what a reload does."""
    text = open(path(doc)).read()
    if doc.endswith(".md"):
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
