#!/usr/bin/python3
"""Turns every ```cpp block of the given Markdown files into a C++ translation unit.

usage: extract_snippets.py OUT_DIR DOC.md...            writes OUT_DIR/<doc>_<n>.cpp + list.txt
       extract_snippets.py --verify OUT_DIR OBJ_DIR DOC.md...

A block that defines something at file level (a line starting with a declaration keyword, or
LITHE_PLUGIN) is compiled as it stands. Any other block is a sequence of statements: its
#include lines stay at file level and the rest becomes the body of a function, so the README's
"what a program does" examples compile as written, with nothing elided. `--verify` re-extracts
and checks that the files the build compiled are the current ones and that each left an object
file, so a stale build cannot pass for checked documentation.
"""
import pathlib
import re
import sys

FILE_LEVEL = re.compile(r"^(void|int|class|struct|namespace|template|static|using|LITHE_PLUGIN)\b")


def blocks(path):
    """(line number, text) of every ```cpp block."""
    out, current, start = [], None, 0
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if current is None and line.strip() == "```cpp":
            current, start = [], number
        elif current is not None and line.strip() == "```":
            out.append((start, "\n".join(current) + "\n"))
            current = None
        elif current is not None:
            current.append(line)
    if current is not None:
        sys.exit(f"{path}:{start}: ```cpp block is never closed")
    return out


def translation_unit(doc, line, text):
    header = f"// Extracted from {doc.name} line {line} by tests/docs/extract_snippets.py.\n"
    lines = text.splitlines()
    if any(FILE_LEVEL.match(l) for l in lines):
        return header + text
    includes = [l for l in lines if l.startswith("#include")]
    body = [l for l in lines if not l.startswith("#include")]
    return (header + "\n".join(includes) + "\n\n"
            "[[maybe_unused]] static void snippet() {\n" +
            "\n".join(("  " + l) if l else "" for l in body) + "\n}\n")


def extract(docs):
    units = {}
    for number, doc in enumerate(docs, 1):
        found = blocks(doc)
        for index, (line, text) in enumerate(found):
            name = f"doc{number}_{doc.stem}_{index + 1}.cpp"
            units[name] = translation_unit(doc, line, text)
    return units


def main(argv):
    verify = argv[1:2] == ["--verify"]
    args = argv[2:] if verify else argv[1:]
    if (verify and len(args) < 3) or (not verify and len(args) < 2):
        sys.exit(__doc__)
    out = pathlib.Path(args[0])
    objects = pathlib.Path(args[1]) if verify else None
    docs = [pathlib.Path(d) for d in (args[2:] if verify else args[1:])]
    units = extract(docs)
    if not units:
        sys.exit("FAIL: no ```cpp block found in " + ", ".join(map(str, docs)))
    if not verify:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in units.items():
            target = out / name
            if not target.exists() or target.read_text() != text:  # keep timestamps otherwise
                target.write_text(text)
        (out / "list.txt").write_text("".join(f"{out / n}\n" for n in sorted(units)))
        return 0
    problems = []
    for name, text in sorted(units.items()):
        generated = out / name
        if not generated.exists() or generated.read_text() != text:
            problems.append(f"{generated}: out of date with the documentation (re-run cmake)")
        if not list(objects.rglob(name + ".o")):
            problems.append(f"{name}: no object file under {objects} (was it compiled?)")
    if problems:
        print("FAIL:\n  " + "\n  ".join(problems))
        return 1
    print(f"PASS: {len(units)} C++ snippets of " + ", ".join(str(d) for d in docs) +
          " compile against the current headers")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
