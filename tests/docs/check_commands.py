#!/usr/bin/env python3
"""Every command, flag, endpoint and script the docs name exists.

Usage: check_commands.py SOURCE_ROOT GANTRY GANTRYD GANTRY_AGENT GANTRY_SWARM

Reads README.md and docs/*.md and fails, naming the file and line, when

1. a command line runs `gantry`, `gantryd`, `gantry-agent` or `gantry-swarm` with a
   subcommand or a long `--flag` that the binary's `--help` (CLI11) for that subcommand
   does not list. `gantry sbatch` takes Slurm's options, which its own parser reads
   (src/cli/sbatch.cc, `kOptions`), not CLI11: those are checked against that table;
2. an HTTP path (docs/api.yaml `paths:`, or `/v1/...`, `/healthz`, `/metrics`, `GET /` in
   the pages) is not routed by gantryd, read statically from src/server/http_api.cc; and
   a route of http_api.cc that api.yaml does not document;
3. a `bench/X.py`, `bench/X.sh`, `scripts/X.sh` it runs does not exist, or is given a
   `--flag` that its `--help` does not print (Python scripts with argparse; shell scripts
   that answer --help; other scripts: existence only).

What counts as a command line (the rules are kept simple: an unclear case is skipped,
never guessed at):
- a line of a fenced code block marked sh, bash, shell, console or not marked (in a block
  where some lines start with `$ `, only those: the others are output), with `\\`
  continuations joined and `# comments` cut, so `#SBATCH` lines are never read;
- an inline code span (`...`) outside code blocks;
- split at ` | `, `||`, `&&`, `;` and ` & `, each part a command of its own, so flags of
  another program on the same line (`... | jq`, `podman run --rm`, Slurm's own `sbatch`
  or `srun`) are never read as ours: a part is ours only when its first word (after
  `VAR=value` assignments and a `$ ` prompt) is one of the four programs, by any path
  (`build/release/src/gantry`), or `python3 bench/X.py`, `bench/X.py`, `scripts/X.sh`;
- words are read left to right: a word naming a subcommand of the command so far goes
  down into it; an option that takes a value (the help shows its type) skips the next
  word; `--` ends the options. A word in capitals, or with `< > [ ] { } | ...` in it, is
  a placeholder: where a subcommand would be, the rest of that command is skipped. Any
  other word where a subcommand is required is an error; elsewhere it is a positional.
  A subcommand accepts its parents' options too (the client's subcommands fall through
  to `--server`, `--token`, `--ca-cert`);
- prose that names a flag alone (`--force`) names no command and is not checked.

The script also checks itself: it must find the route table, the sbatch options and the
programs' subcommands it knows are there, and made-up lines with a bogus flag, a bogus
subcommand, a bogus script flag and a bogus endpoint must be reported. Exit status: 0 all
found, 1 not.
"""

import difflib
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_formats import strip_comments  # noqa: E402  (the same C++ comment stripper)

PROGRAMS = ("gantry", "gantryd", "gantry-agent", "gantry-swarm")

# Flags a program reads before CLI11 sees its arguments, so --help does not list them;
# the docs may name them. Each with where it is handled.
HIDDEN_FLAGS = {
    # The per-worker shim: gantry-agent exec's itself with it (src/agent/agent_main.cc
    # checks argv[1] first); an internal mode, not an option for people.
    ("gantry-agent",): {"--shim-worker"},
}

# Lines whose stale reference is kept on purpose: (doc file, text on the line) -> why.
# Empty: every stale reference found so far was a doc error and is fixed.
ALLOWED = {}

# Paths of other projects' scripts the docs quote, shaped like ours.
OTHER_PROJECTS = {
    "scripts/generate_config_and_run.py": "FGD's artifact (docs/traces.md quotes its command)",
}

SHELL_FENCES = {"", "sh", "bash", "shell", "console"}
SEPARATORS = re.compile(r"\s+\|\|?\s+|\s*&&\s*|\s*;(?:\s+|$)|\s+&\s+")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# A program by name, or by a path to where it is built or installed: `build/release/src/gantry`,
# `/usr/local/bin/gantryd`; not a benchmark's name such as `scale/gantry`.
PROGRAM = re.compile(r"^(?:\S*/(?:src|bin)/)?(%s)$" % "|".join(re.escape(p) for p in PROGRAMS))
SCRIPT = re.compile(r"^(?:\./)?((?:bench|scripts)/[\w.-]+\.(?:py|sh))$")
METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD")


# ---------------------------------------------------------------------------------------
# Command lines in the pages


def cut_comment(line):
    """The line without a `# comment` (a # at the start or after a blank, outside quotes)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def snippets(text):
    """(first line, last line, text) of each command-line candidate of a page: lines of
    shell code blocks (with their continuation lines), and inline code spans outside
    blocks (which may wrap)."""
    out = []
    lines = text.splitlines()
    i = 0
    prose = []  # (line number, line) outside code blocks, for the inline spans
    while i < len(lines):
        m = re.match(r"^\s*```\s*(\S*)", lines[i])
        if not m:
            prose.append((i + 1, lines[i]))
            i += 1
            continue
        fence_info = m.group(1).lower()
        j = i + 1
        block = []
        while j < len(lines) and not re.match(r"^\s*```", lines[j]):
            block.append((j + 1, lines[j]))
            j += 1
        i = j + 1
        prose.append((None, ""))  # a block ends a paragraph
        if fence_info not in SHELL_FENCES:
            continue
        prompted = any(l.lstrip().startswith("$ ") for _, l in block)
        k = 0
        while k < len(block):
            number, line = block[k]
            first = number
            # Join `\` continuations.
            while line.rstrip().endswith("\\") and k + 1 < len(block):
                k += 1
                line = line.rstrip()[:-1] + " " + block[k][1]
            k += 1
            stripped = line.strip()
            if prompted:
                if not stripped.startswith("$ "):
                    continue  # output
                stripped = stripped[2:]
            out.append((first, block[k - 1][0], cut_comment(stripped)))
    # Inline spans: paragraph by paragraph (a span may wrap over a line break).
    paragraph = []
    for number, line in prose + [(None, "")]:
        if number is not None and line.strip():
            paragraph.append((number, line))
            continue
        if paragraph:
            joined = "\n".join(l for _, l in paragraph)
            for m in re.finditer(r"(`+)(.+?)\1", joined, re.S):
                first = paragraph[0][0] + joined[: m.start()].count("\n")
                last = first + m.group(2).count("\n")
                out.append((first, last, m.group(2).replace("\\|", "|").replace("\n", " ")))
        paragraph = []
    return out


def commands(snippet):
    """The words of each command in a snippet, its separators split off."""
    snippet = re.sub(r"\$\([^()]*\)", "X", snippet)  # $(cat token) -> one word
    out = []
    for part in SEPARATORS.split(snippet):
        try:
            words = shlex.split(part)
        except ValueError:  # an unbalanced quote: prose in backticks
            words = part.split()
        while words and ASSIGNMENT.match(words[0]):
            words = words[1:]
        if words:
            out.append(words)
    return out


def is_placeholder(word):
    """A word that stands for a value: in capitals (`NAME`, `ID`, `SUBCOMMAND`), or holding
    brackets, braces, `|`, `*` or an ellipsis (`<x>`, `{id}`, `sim|compare`, `...`)."""
    return (
        any(c in word for c in "<>[]{}|*")
        or "..." in word
        or "…" in word
        or (word.upper() == word and any(c.isalpha() for c in word))
    )


# ---------------------------------------------------------------------------------------
# What the programs accept


class Help:
    """One (sub)command's CLI11 --help: options {name: takes a value}, subcommands, and
    whether it has positionals."""

    def __init__(self, text):
        self.options, self.subcommands, self.positionals = {}, [], False
        section = None
        for line in text.splitlines():
            if line and not line[0].isspace() and line.rstrip().endswith(":"):
                section = line.strip()[:-1]
                continue
            if not line.startswith("  ") or line.startswith("   " * 6):
                continue  # a wrapped description
            head = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
            if section == "Options":
                names, _, kind = head.partition(" ")
                for name in names.split(","):
                    if name.startswith("-"):
                        self.options[name] = bool(kind.strip())
            elif section == "Subcommands":
                self.subcommands.append(head)
            elif section == "Positionals":
                self.positionals = True


class Programs:
    """The four binaries' help, asked once per (sub)command and kept."""

    def __init__(self, binaries, sbatch_options):
        self.binaries = binaries  # name -> path
        self.sbatch_options = sbatch_options  # {"--time": True, ...}
        self.cache = {}

    def help(self, path):
        if path not in self.cache:
            args = [self.binaries[path[0]], *path[1:], "--help"]
            try:
                p = subprocess.run(args, capture_output=True, text=True, timeout=30)
                text = p.stdout
            except (OSError, subprocess.TimeoutExpired) as e:
                text = ""
                print("cannot run %s: %s" % (" ".join(args), e), file=sys.stderr)
            h = Help(text)
            if path == ("gantry", "sbatch"):
                h.options.update(self.sbatch_options)
            for flag in HIDDEN_FLAGS.get(path, ()):
                h.options[flag] = False
            self.cache[path] = h
        return self.cache[path]


def sbatch_options(root):
    """{"--name": takes a value} from src/cli/sbatch.cc's kOptions table."""
    code = strip_comments((root / "src" / "cli" / "sbatch.cc").read_text())
    m = re.search(r"kOptions\[\]\s*=\s*\{(.*?)\};", code, re.S)
    if not m:
        return {}
    options = {}
    for name, letter, value in re.findall(
        r"\{\"([\w-]+)\",\s*(?:'(\w)'|0),\s*(true|false)\}", m.group(1)
    ):
        options["--" + name] = value == "true"
        if letter:
            options["-" + letter] = value == "true"
    return options


def next_is_option(words, i):
    """Whether the word after an option is another option, not its value: a synopsis
    such as `[--since --until]` lists options without their values."""
    return i < len(words) and words[i].lstrip("[(").startswith("--")


def check_invocation(words, programs, tally):
    """Problems of one command whose first word is a program: [(the word at fault, message)]
    (at most one: after a wrong word, what follows cannot be read)."""
    path = (PROGRAM.match(words[0]).group(1),)
    words = words[1:]
    if words:  # a program named alone in prose (`gantryd`) has nothing to check
        tally["commands"] += 1
    i = 0
    while i < len(words):
        word = words[i].lstrip("[(").rstrip("])")
        i += 1
        if word == "--":
            break
        h = programs.help(path)
        if word.startswith("--") and len(word) > 2:
            name = word.split("=", 1)[0]
            if is_placeholder(name):
                continue
            tally["flags"] += 1
            # The option, or a parent's (subcommands fall through to them).
            takes = None
            for depth in range(len(path), 0, -1):
                takes = programs.help(path[:depth]).options.get(name)
                if takes is not None:
                    break
            if takes is None:
                known = sorted(k for k in h.options if k.startswith("--"))
                near = difflib.get_close_matches(name, known, n=1)
                return [(name, "`%s` has no option %s%s (its --help lists %s)"
                         % (" ".join(path), name, "; did you mean %s?" % near[0] if near else "",
                            ", ".join(known) or "none"))]
            if takes and "=" not in word and not next_is_option(words, i):
                i += 1  # its value
        elif word.startswith("-") and len(word) > 1:
            if h.options.get(word.split("=", 1)[0]) and "=" not in word:
                i += 1
        elif h.subcommands:
            if word in h.subcommands:
                path += (word,)
                tally["subcommands"] += 1
            elif is_placeholder(word):
                return []  # which subcommand is not said: skip the rest
            elif not h.positionals:
                return [(word, "`%s` has no subcommand %r (its subcommands: %s)"
                         % (" ".join(path), word, ", ".join(h.subcommands)))]
        elif path == ("gantry", "sbatch"):
            break  # the script: what follows are its own arguments
    return []


# ---------------------------------------------------------------------------------------
# Scripts


def script_help(root, script, cache):
    """The flags a script's --help prints, or None when it has no --help to ask."""
    if script not in cache:
        path = root / script
        text = path.read_text()
        if script.endswith(".py") and "argparse" in text:
            args = [sys.executable, str(path), "--help"]
        elif script.endswith(".sh") and re.search(r"(^|[\s|(])--help\)", text, re.M):
            args = ["bash", str(path), "--help"]
        else:
            cache[script] = None
            return None
        try:
            p = subprocess.run(args, capture_output=True, text=True, timeout=30, cwd=root)
            cache[script] = set(re.findall(r"(?<![\w-])--[A-Za-z][\w-]*", p.stdout))
        except (OSError, subprocess.TimeoutExpired) as e:
            print("cannot run %s: %s" % (" ".join(args), e), file=sys.stderr)
            cache[script] = set()
    return cache[script]


def check_script(words, root, cache, tally):
    """Problems of one command that may run a script of bench/ or scripts/, as
    check_invocation's; [] for any other command."""
    if words[0] in ("python3", "python", "bash", "sh"):
        words = words[1:]
    if not words:
        return []
    m = SCRIPT.match(words[0])
    if not m:
        return []
    script = m.group(1)
    if script in OTHER_PROJECTS:
        return []
    tally["scripts"] += 1
    if not (root / script).is_file():
        return [(script, "%s does not exist" % script)]
    flags = script_help(root, script, cache)
    if flags is None:
        return []
    for word in words[1:]:
        word = word.lstrip("[(").rstrip("])")
        if word == "--":
            break
        if word.startswith("--") and len(word) > 2 and not is_placeholder(word):
            name = word.split("=", 1)[0]
            tally["script_flags"] += 1
            if name not in flags:
                near = difflib.get_close_matches(name, sorted(flags), n=1)
                return [(name, "%s has no option %s%s (its --help lists %s)"
                         % (script, name, "; did you mean %s?" % near[0] if near else "",
                            ", ".join(sorted(flags))))]
    return []


def check_snippet(snippet, programs, root, script_cache, tally):
    """[(the word at fault, message)] of every command in one snippet."""
    problems = []
    for words in commands(snippet):
        if PROGRAM.match(words[0]):
            problems += check_invocation(words, programs, tally)
        else:
            problems += check_script(words, root, script_cache, tally)
    return problems


# ---------------------------------------------------------------------------------------
# Endpoints


def routes(root):
    """[(method, [segment, ...])] gantryd serves: each `m == "METHOD"` of HttpApi::Handle
    applies to the `Match(req, {...})` calls after it; `req.segments.empty()` is `/`."""
    code = strip_comments((root / "src" / "server" / "http_api.cc").read_text())
    start = code.find("void HttpApi::Handle(")
    if start < 0:
        return []
    found, method = [], None
    token = re.compile(
        r'\bm\s*==\s*"([A-Z]+)"|\bMatch\(\s*req\s*,\s*\{([^{}]*)\}|\breq\.segments\.empty\(\)'
    )
    for m in token.finditer(code, start):
        if m.group(1):
            method = m.group(1)
        elif m.group(2) is not None:
            route = (method, re.findall(r'"([^"]*)"', m.group(2)))
            if route not in found:
                found.append(route)
        elif (method, []) not in found:
            found.append((method, []))
    return found


def segments(path):
    return [s for s in path.split("/") if s]


def served(method, path, table, prefix=False):
    """Whether a route of `table` serves `path` (any method when `method` is None). A route's
    `*` matches any one segment; a documented `{id}`/`ID` matches only a `*`. With
    `prefix`, a route that starts with the path will do."""
    want = segments(path)
    for m, route in table:
        if method and m != method:
            continue
        if len(route) != len(want) and not (prefix and len(route) > len(want)):
            continue
        if all(r == "*" or r == w for r, w in zip(route, want)):
            return True
    return False


def api_paths(text):
    """[(line number, method, path)] of docs/api.yaml's `paths:`."""
    out, in_paths, path = [], False, None
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(r"^\S", line):
            in_paths = line.startswith("paths:")
            continue
        if not in_paths:
            continue
        m = re.match(r"^  (/\S*):\s*$", line)
        if m:
            path = m.group(1)
            continue
        m = re.match(r"^    (get|put|post|delete|patch|head):", line)
        if m and path:
            out.append((number, m.group(1).upper(), path))
    return out


def page_endpoints(text):
    """[(line number, method or None, path, prefix)] of the HTTP paths a page names:
    `/v1/...`, `/healthz`, `/metrics`, and `/` after a method (`GET /`)."""
    out = []
    pattern = re.compile(
        r"(?<![A-Za-z_./-])(/v1(?:/[^\s`'\"()<>\[\],;|]*)?|/healthz(?![\w/-])|/metrics(?![\w/-])"
        r"|(?<=GET )/(?=[\s`),.;]|$))"
    )
    for number, line in enumerate(text.splitlines(), 1):
        for m in pattern.finditer(line):
            path = re.split(r"[?#]", m.group(1))[0].rstrip(".:")
            prefix = path != "/" and (path.endswith(("/", "...", "*")))
            path = path.rstrip("/").removesuffix("...").rstrip("*").rstrip("/") or "/"
            before = re.search(r"\b(%s)\s+$" % "|".join(METHODS), line[: m.start()])
            out.append((number, before.group(1) if before else None, path, prefix))
    return out


# ---------------------------------------------------------------------------------------


def allowed(doc, line):
    return any(doc == d and text in line for d, text in ALLOWED)


def check_pages(root, pages, programs, tally):
    problems, script_cache = [], {}
    for page in pages:
        rel = page.relative_to(root).as_posix()
        lines = page.read_text().splitlines()
        for first, last, snippet in snippets(page.read_text()):
            for word, p in check_snippet(snippet, programs, root, script_cache, tally):
                # The line of the snippet that holds the word (a command may span lines).
                number = next((n for n in range(first, last + 1) if word in lines[n - 1]), first)
                if not allowed(rel, lines[number - 1]):
                    problems.append("%s:%d: %s" % (rel, number, p))
    return problems


def check_endpoints(root, pages, table, tally):
    problems = []
    api = root / "docs" / "api.yaml"
    documented = api_paths(api.read_text())
    for number, method, path in documented:
        tally["api_paths"] += 1
        if not served(method, path, table):
            problems.append("docs/api.yaml:%d: %s %s is not a route of src/server/http_api.cc"
                            % (number, method, path))
    for method, route in table:
        shown = "/" + "/".join(route)
        tally["routes"] += 1
        pattern = "/" + "/".join("{x}" if s == "*" else s for s in route)
        if not any(
            m == method and [("*" if s.startswith("{") else s) for s in segments(p)] == route
            for _, m, p in documented
        ):
            problems.append(
                "docs/api.yaml: %s %s (src/server/http_api.cc) is not documented under paths: "
                "(add %s)" % (method, shown, pattern)
            )
    for page in pages:
        rel = page.relative_to(root).as_posix()
        text = page.read_text()
        lines = text.splitlines()
        for number, method, path, prefix in page_endpoints(text):
            tally["page_endpoints"] += 1
            if not served(method, path, table, prefix) and not allowed(rel, lines[number - 1]):
                problems.append(
                    "%s:%d: %s%s is not a route of src/server/http_api.cc"
                    % (rel, number, method + " " if method else "", path)
                )
    return problems


def main(argv):
    if len(argv) != 6:
        print(
            "usage: check_commands.py SOURCE_ROOT GANTRY GANTRYD GANTRY_AGENT GANTRY_SWARM",
            file=sys.stderr,
        )
        return 2
    root = Path(argv[1]).resolve()
    binaries = dict(zip(PROGRAMS, argv[2:]))
    pages = [root / "README.md"] + sorted((root / "docs").glob("*.md"))
    problems = []

    programs = Programs(binaries, sbatch_options(root))
    table = routes(root)

    # The parsers must see what is known to be there; otherwise the code changed shape and
    # this script must follow, rather than pass on finding nothing.
    anchors = [
        (("POST", ["v1", "jobs"]) in table, "the route POST /v1/jobs in src/server/http_api.cc"),
        (("GET", []) in table, "the route GET / in src/server/http_api.cc"),
        ("--time" in programs.sbatch_options, "--time in src/cli/sbatch.cc's kOptions"),
        ("submit" in programs.help(("gantry",)).subcommands, "`gantry --help`'s submit"),
        ("token" in programs.help(("gantryd",)).subcommands, "`gantryd --help`'s token"),
        ("--node" in programs.help(("gantry-agent",)).options, "`gantry-agent --help`'s --node"),
        ("--pool" in programs.help(("gantry-swarm",)).options, "`gantry-swarm --help`'s --pool"),
    ]
    for ok, what in anchors:
        if not ok:
            problems.append("check_commands.py did not find %s: update its parser" % what)

    tally = dict.fromkeys(
        ("commands", "subcommands", "flags", "scripts", "script_flags", "api_paths", "routes",
         "page_endpoints"), 0)
    problems += check_pages(root, pages, programs, tally)
    problems += check_endpoints(root, pages, table, tally)

    # The detector itself: made-up lines must be reported.
    if not problems:
        probe = {"commands": 0, "subcommands": 0, "flags": 0, "scripts": 0, "script_flags": 0}
        for line in (
            "gantry submit --no-such-flag job.yaml",
            "gantryd no-such-subcommand --db state.db",
            "GANTRY_TOKEN=$(cat t) build/release/src/gantry --server URL ls --no-such-flag",
            "python3 bench/submit_load.py --no-such-flag",
            "gantry sbatch --no-such-flag train.sh",
        ):
            if not check_snippet(line, programs, root, {}, probe):
                problems.append("check_commands.py did not notice what is wrong with `%s`" % line)
        for line in ("gantry ls --json | jq .", "gantry sbatch --parsable -t 1 x.sh --epochs 3"):
            if check_snippet(line, programs, root, {}, probe):
                problems.append("check_commands.py wrongly reports `%s`" % line)
        if served("GET", "/v1/no-such-endpoint", table) or not served("GET", "/v1/jobs/j12", table):
            problems.append("check_commands.py matched endpoints wrongly")

    if problems:
        for p in problems:
            print(p, file=sys.stderr)
        print(
            "(a stale reference: fix the page; a command that lost a documented feature on "
            "purpose: ALLOWED in tests/docs/check_commands.py, saying why)",
            file=sys.stderr,
        )
        return 1
    print(
        "%d pages: %d commands with %d subcommands and %d flags (against %d --help pages), "
        "%d script runs with %d flags, %d api.yaml operations against %d routes (both ways), "
        "%d endpoints named in pages: all exist" % (
            len(pages), tally["commands"], tally["subcommands"], tally["flags"],
            len(programs.cache), tally["scripts"], tally["script_flags"], tally["api_paths"],
            tally["routes"], tally["page_endpoints"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
