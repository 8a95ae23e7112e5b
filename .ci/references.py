#!/usr/bin/env python3
"""Checks that every document the repository cites is in the repository.

Run from the repository root (`.ci/stages/05-references.sh` does). Scans the
tracked source and documentation files (`git ls-files`) and fails, naming file and
line, when one of them:

- cites a `docs/<file>.md` (or `../docs/...`) that does not exist, or a heading of
  it, or of `ARCHITECTURE.md`, that does not exist (the form is
  `docs/<file>.md, "<heading>"`, optionally followed by `, rule N`, see
  docs/README.md);
- cites something that is not in the repository: numbered sections of the
  planning documents the project started from, those documents by name, paths
  into a `shared` folder outside the repository, or the seed files;
- names an issue of the project's tracker by number in a document or in a code
  comment (BENCHMARKS.md and RELIABILITY.md are histories and may);
- in ARCHITECTURE.md or a note under docs/, names a file or folder of the
  repository (a path that starts with one of its top-level folders) that does
  not exist: those documents walk the reader through the code by file.

`--self-test` checks the checker on made-up text: each rule must catch its bad
example and pass its good one.
"""

import os
import re
import subprocess
import sys

SCANNED = (".rs", ".md", ".sh", ".py", ".toml", ".proto", ".yml", ".yaml")
SCANNED_NAMES = (".ci/run", "interop/run")
SELF = ".ci/references.py"
HISTORIES = ("BENCHMARKS.md", "RELIABILITY.md")

# Built from pieces so that this file does not match itself.
SECTION = "\u00a7"
FORBIDDEN = [
    (re.compile(SECTION + r"\s*\d"), "a numbered section of a document outside the repository"),
    (re.compile(r"\bdoc " + SECTION), "a numbered section of a document outside the repository"),
    (re.compile(r"\bDESIGN(\.md\b|\s+I\d|\b)"), "the planning document DESIGN" + ".md"),
    (re.compile(r"\bSTYLE\.md\b"), "the planning document STYLE" + ".md"),
    (re.compile(r"\b(zab" + "-protocol|curator" + "-recipes|zk-client-protocol)" + r"\.md\b"),
     "a protocol document outside the repository (see docs/README.md)"),
    (re.compile(r"\b(server-seams|structure)[- ]review\b|\btest-audit\.md\b"),
     "a review outside the repository"),
    (re.compile(r"(\.\./)+shared\b|\bshared/(docs|seeds)\b"), "a path outside the repository"),
    (re.compile(r"\b(interrupted-trunc-sync|leader-latch-session-expiry|"
                r"observer-master-pending-proposals|zxid-epoch-rollover)\.txt\b"),
     "a seed file outside the repository (ARCHITECTURE.md describes the four failures)"),
]
ISSUE = re.compile(r"\bissues?\s+\d+", re.IGNORECASE)
ISSUE_WORD = "iss" + "ue"

DOC_PATH = re.compile(r"(?<![\w/.-])(?:\.\./)*(docs/[A-Za-z0-9_.-]+\.md|ARCHITECTURE\.md)")
CITED_HEADING = re.compile(r'`?\s*,\s*"([^"]+)"(?:\s*,\s*(?:rule|step)\s+(\d+))?')
COMMENT_LEAD = re.compile(r"^\s*(//[/!]?|#+(?!\[)|\*|--|>)?\s?")


PATH_DOCS = re.compile(r"^(ARCHITECTURE\.md|docs/[^/]+\.md)$")


def repo_path_pattern(root):
    """Paths that start with one of the repository's top-level folders."""
    tops = sorted(d for d in os.listdir(root)
                  if os.path.isdir(os.path.join(root, d)) and d not in (".git", "target"))
    return re.compile(r"(?<![\w/.-])((?:%s)/[A-Za-z0-9_./-]*[A-Za-z0-9_/])(?!\{)"
                      % "|".join(re.escape(t) for t in tops))


def tracked_files():
    out = subprocess.run(["git", "ls-files"], check=True, capture_output=True, text=True).stdout
    for path in out.splitlines():
        if path == SELF or not os.path.isfile(path):
            continue
        if path.endswith(SCANNED) or path in SCANNED_NAMES:
            yield path


def headings(path, cache={}):
    """The headings of a markdown file: text -> (level, line index), and its lines."""
    if path not in cache:
        lines = open(path, encoding="utf-8").read().splitlines()
        found = {}
        in_code = False
        for i, line in enumerate(lines):
            if line.startswith("```"):
                in_code = not in_code
            m = re.match(r"^(#+)\s+(.*?)\s*$", line)
            if m and not in_code:
                found.setdefault(m.group(2), (len(m.group(1)), i))
        cache[path] = (found, lines)
    return cache[path]


def has_rule(lines, start, level, rule):
    """Whether the section that starts at `start` has a list item `rule.`."""
    for line in lines[start + 1:]:
        m = re.match(r"^(#+)\s", line)
        if m and len(m.group(1)) <= level:
            return False
        if re.match(r"^\s*%d\.\s" % rule, line):
            return True
    return False


def quote_aware_comment(line, marker):
    """The part of `line` after a comment marker that is not inside a string."""
    quote = None
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif line.startswith(marker, i):
            return line[i + len(marker):]
        i += 1
    return ""


def comment_text(path, lines):
    """Per line, the text the issue rule looks at: all of a document, the comments
    (and Python docstrings) of code."""
    if path.endswith(".md"):
        return lines
    marker = "//" if path.endswith((".rs", ".proto")) else "#"
    out = []
    in_doc = False
    for line in lines:
        if path.endswith(".py"):
            n = line.count('"""') + line.count("'''")
            if in_doc or n:
                out.append(line)
                if n % 2 == 1:
                    in_doc = not in_doc
                continue
        out.append(quote_aware_comment(line, marker))
    return out


def flatten(lines):
    """The file as one string with comment markers and indentation taken off each
    line, so that a citation broken over two comment lines is read whole; and the
    offset at which each line starts."""
    parts, starts, pos = [], [], 0
    for line in lines:
        text = COMMENT_LEAD.sub("", line, count=1).strip()
        starts.append(pos)
        parts.append(text)
        pos += len(text) + 1
    return " ".join(parts), starts


def line_of(starts, offset):
    lo, hi = 0, len(starts) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= offset:
            lo = mid
        else:
            hi = mid - 1
    return lo + 1


def check_text(path, text, root="."):
    """Yields (line, message) for every bad reference in `text`, the content of
    `path` (relative to `root`)."""
    lines = text.splitlines()
    for n, line in enumerate(lines, 1):
        for pattern, what in FORBIDDEN:
            m = pattern.search(line)
            if m:
                yield n, "cites %s: %r" % (what, m.group(0))
                break
    if os.path.basename(path) not in HISTORIES:
        for n, line in enumerate(comment_text(path, lines), 1):
            m = ISSUE.search(line)
            if m:
                yield n, ("names an issue of the project's tracker (%r): say why, "
                          "not which issue asked" % m.group(0))
    if PATH_DOCS.match(path):
        paths = repo_path_pattern(root)
        for n, line in enumerate(lines, 1):
            for m in paths.finditer(line):
                named = m.group(1).rstrip(".")
                if not os.path.exists(os.path.join(root, named)):
                    yield n, "names %s, which does not exist" % named
    flat, starts = flatten(lines)
    for m in DOC_PATH.finditer(flat):
        target = m.group(1)
        n = line_of(starts, m.start())
        full = os.path.join(root, target)
        if not os.path.isfile(full):
            yield n, "cites %s, which does not exist" % target
            continue
        cited = CITED_HEADING.match(flat, m.end())
        if not cited:
            continue
        heading, rule = cited.group(1), cited.group(2)
        if heading.startswith("<") and heading.endswith(">"):
            continue  # a placeholder in a note that explains the form
        found, doc_lines = headings(full)
        if heading not in found:
            yield n, 'cites %s, "%s": no such heading' % (target, heading)
        elif rule and not has_rule(doc_lines, found[heading][1], found[heading][0], int(rule)):
            yield n, 'cites %s, "%s", rule %s: no such rule' % (target, heading, rule)


def main():
    bad = 0
    checked = 0
    for path in tracked_files():
        checked += 1
        text = open(path, encoding="utf-8", errors="replace").read()
        for n, message in check_text(path, text):
            print("%s:%d: %s" % (path, n, message))
            bad += 1
    if bad:
        print("references: %d bad reference(s) in %d files checked (docs/README.md says how "
              "to cite)" % (bad, checked))
        return 1
    print("references: %d files checked, every citation resolves" % checked)
    return 0


def self_test():
    """Each rule catches its bad example and passes its good one."""
    cases = [
        ("a.rs", "// see doc " + SECTION + "10.3\n", True),
        ("a.rs", "// see (" + SECTION + "4.4)\n", True),
        ("a.rs", "//! the pipeline of DESIGN" + ".md\n", True),
        ("a.rs", "/// (DESIGN I4)\n", True),
        ("a.md", "see `../" + "shared/docs/x.md`\n", True),
        ("a.rs", "// " + ISSUE_WORD + " 15: an idle session's memory\n", True),
        ("a.py", '"""Checked (' + ISSUE_WORD + ' 16)."""\n', True),
        ("a.py", 'X = "### Goals of ' + ISSUE_WORD + ' 15"  # a heading the report writes\n', False),
        ("a.rs", '// docs/client-protocol.md, "Notifications before replies"\n', False),
        ("a.rs", '// docs/client-protocol.md,\n// "Notifications before\n// replies"\n', False),
        ("a.rs", '// docs/client-protocol.md, "No such heading"\n', True),
        ("a.md", '`docs/client-protocol.md`, "No such heading"\n', True),
        ("a.rs", "// docs/no-such-file.md\n", True),
        ("a.rs", '// docs/recipes.md, "The lifecycle", rule 16\n', False),
        ("a.rs", '// docs/recipes.md, "The lifecycle", rule 99\n', True),
        ("a.rs", "// I2: memory is derived from disk (ZOOKEEPER-5094)\n", False),
        ("docs/a.md", "the walk starts in `server/src/conn.rs`\n", False),
        ("docs/a.md", "the walk starts in `server/src/no_such_file.rs`\n", True),
        ("docs/a.md", "`server/src/{conn,outbox}.rs`\n", False),
        ("server/README.md", "`server/src/no_such_file.rs`\n", False),
    ]
    failed = 0
    for path, text, want_bad in cases:
        got = list(check_text(path, text))
        if bool(got) != want_bad:
            failed += 1
            print("self-test: %r in %s: expected %s, got %s" %
                  (text, path, "a finding" if want_bad else "none", got))
    if failed:
        return 1
    print("references: self-test passed (%d cases)" % len(cases))
    return 0


if __name__ == "__main__":
    sys.exit(self_test() if "--self-test" in sys.argv[1:] else main())
