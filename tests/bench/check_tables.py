#!/usr/bin/env python3
"""Checks the markdown tables a benchmark script printed (its --tiny mode, ctest -L bench).

    tests/bench/check_tables.py FILE WHO COLUMNS:ROWS...

FILE holds the script's output; each COLUMNS:ROWS is one table, in order: its column
count and how many rows it has below the header and separator. Every row must have the
header's column count, and no cell may be empty or read nan. Exits 1 (naming WHO and
what differs) unless the tables are exactly those.
"""
import sys


def tables(path):
    out, rows = [], None
    for line in open(path):
        line = line.rstrip("\n")
        if not line.startswith("|"):
            rows = None
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if rows is None:
            rows = []
            out.append((len(cells), rows))
        elif not set(line) <= set("|-: "):
            rows.append(cells)
    return out


def main():
    path, who, want = sys.argv[1], sys.argv[2], [tuple(map(int, w.split(":"))) for w in sys.argv[3:]]
    found = tables(path)
    got = [(cols, len(rows)) for cols, rows in found]
    problems = []
    if got != want:
        problems.append(f"tables (columns:rows) {got}, expected {want}")
    for i, (cols, rows) in enumerate(found):
        for r in rows:
            if len(r) != cols:
                problems.append(f"table {i + 1}: a row of {len(r)} cells, not {cols}: {' | '.join(r)}")
            elif any(c == "" or c.lower() == "nan" for c in r):
                problems.append(f"table {i + 1}: an empty or nan cell: {' | '.join(r)}")
    if problems:
        print(f"{who}: " + "; ".join(problems[:5]), file=sys.stderr)
        return 1
    print(f"{who}: ok ({', '.join(f'{len(rows)} rows of {cols} columns' for cols, rows in found)})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
