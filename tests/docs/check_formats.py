#!/usr/bin/env python3
"""Every field the cluster config and job readers accept has a row in docs/formats.md.

Usage: check_formats.py SOURCE_ROOT

Reads the known-field lists from src/spec/config_reader.cc (each `Fields NAME(..., {...})`)
and src/spec/job_reader.cc (the same, plus the `spec_fields` and `trace_fields` lists), and
fails naming each field that no table row of docs/formats.md documents. A field counts as
documented when the first cell of a table row holds it in backticks, alone (`vram_gb`), in
a list (`cpus`, `memory_gb`) or as the last part of a path (`max_grace_s.critical`).

The script also checks itself: it must find the lists it knows are there (so a rewrite of
the readers cannot make it pass by finding nothing), and a field whose rows are taken out
of the page must then be reported missing. Exit status: 0 all documented, 1 not.
"""

import re
import sys
from pathlib import Path

STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def strip_comments(code):
    """C++ text with // and /* */ comments blanked, string literals kept."""
    out, i, n = [], 0, len(code)
    while i < n:
        c = code[i]
        if c == '"':
            j = i + 1
            while j < n and code[j] != '"':
                j += 2 if code[j] == "\\" else 1
            out.append(code[i : j + 1])
            i = j + 1
        elif c == "'":
            j = i + 1
            while j < n and code[j] != "'":
                j += 2 if code[j] == "\\" else 1
            out.append(code[i : j + 1])
            i = j + 1
        elif code.startswith("//", i):
            j = code.find("\n", i)
            i = n if j < 0 else j
        elif code.startswith("/*", i):
            j = code.find("*/", i + 2)
            i = n if j < 0 else j + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def call_text(code, open_paren):
    """The text between `open_paren` and its matching ')', skipping string literals."""
    depth, i = 0, open_paren
    while i < len(code):
        c = code[i]
        if c == '"':
            i += 1
            while code[i] != '"':
                i += 2 if code[i] == "\\" else 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return code[open_paren + 1 : i]
        i += 1
    raise ValueError("unbalanced parentheses after offset %d" % open_paren)


def braced_lists(text):
    """The string literals of each {...} in `text` that holds any."""
    lists = []
    for m in re.finditer(r"\{([^{}]*)\}", text):
        names = STRING.findall(m.group(1))
        if names:
            lists.append(names)
    return lists


def known_field_lists(path):
    """(label, [field, ...]) for each known-field list of a reader."""
    code = strip_comments(path.read_text())
    found = []
    for m in re.finditer(r"\bFields\s+(\w+)\s*\(", code):
        args = call_text(code, m.end() - 1)
        for names in braced_lists(args):
            found.append(("%s: Fields %s" % (path.name, m.group(1)), names))
    for m in re.finditer(
        r"initializer_list<std::string_view>\s+(\w+)\s*=\s*\{([^{}]*)\}", code
    ):
        found.append(("%s: %s" % (path.name, m.group(1)), STRING.findall(m.group(2))))
    return found


def documented(doc_text):
    """Field names the first cells of the page's table rows hold in backticks."""
    names = set()
    for line in doc_text.splitlines():
        if not line.startswith("|"):
            continue
        cells = line.split("|")
        if len(cells) < 3:
            continue
        for token in re.findall(r"`([^`]+)`", cells[1]):
            names.add(token)
            names.add(token.rsplit(".", 1)[-1])  # max_grace_s.critical, .standard
    return names


def missing(lists, doc_text):
    """{field: [list labels]} for every field the page does not document."""
    have = documented(doc_text)
    out = {}
    for label, names in lists:
        for name in names:
            if name not in have:
                out.setdefault(name, []).append(label)
    return out


def without_rows_of(doc_text, field):
    """The page with every table row whose first cell names `field` taken out."""
    keep = []
    for line in doc_text.splitlines():
        cells = line.split("|")
        if line.startswith("|") and len(cells) >= 3 and ("`%s`" % field) in cells[1]:
            continue
        keep.append(line)
    return "\n".join(keep)


def main(argv):
    if len(argv) != 2:
        print("usage: check_formats.py SOURCE_ROOT", file=sys.stderr)
        return 2
    root = Path(argv[1])
    doc_path = root / "docs" / "formats.md"
    readers = [root / "src" / "spec" / "config_reader.cc", root / "src" / "spec" / "job_reader.cc"]
    problems = []

    lists = []
    for reader in readers:
        lists += known_field_lists(reader)

    # The parser must see what is known to be there: the config's top level and its
    # queues, and the job reader's two lists. Otherwise the readers changed shape and this
    # script must follow, rather than pass on finding nothing.
    def has_list(file, label_part, field):
        return any(
            label.startswith(file) and label_part in label and field in names
            for label, names in lists
        )

    anchors = [
        ("config_reader.cc", "Fields", "pools"),
        ("config_reader.cc", "Fields", "guaranteed_gpus"),
        ("config_reader.cc", "Fields", "max_grace_s"),
        ("job_reader.cc", "spec_fields", "vram_gb"),
        ("job_reader.cc", "trace_fields", "duration"),
        ("job_reader.cc", "Fields", "down_s"),
    ]
    for file, part, field in anchors:
        if not has_list(file, part, field):
            problems.append(
                "check_formats.py found no %s list holding %r in src/spec/%s: the reader "
                "changed shape; update the script's parser" % (part, field, file)
            )

    doc_text = doc_path.read_text() if doc_path.exists() else ""
    if not doc_text:
        problems.append("%s is missing or empty" % doc_path)

    for field, labels in sorted(missing(lists, doc_text).items()):
        problems.append(
            "docs/formats.md: field `%s` (%s) has no table row; add one (the rule for "
            "extending a format is at the top of that page)" % (field, "; ".join(sorted(set(labels))))
        )

    # The detector itself: with a field's rows taken out, it must be reported.
    if not problems:
        probe = "vram_gb"
        if probe not in missing(lists, without_rows_of(doc_text, probe)):
            problems.append("check_formats.py did not notice `%s` taken out of the page" % probe)

    count = sum(len(names) for _, names in lists)
    if problems:
        for p in problems:
            print(p, file=sys.stderr)
        return 1
    print(
        "docs/formats.md documents all %d fields of %d known-field lists" % (count, len(lists))
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
