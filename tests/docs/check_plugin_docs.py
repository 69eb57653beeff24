#!/usr/bin/env python3
"""Every key a built-in algorithm declares (SDK 1.4 describe_options, printed by
`lithe plugins --describe NAME --json`) appears in its plugin's README key tables with the same
type and default, and every key those tables list is declared: the documentation and the
declaration that validates configs cannot drift apart.

usage: check_plugin_docs.py LITHE_EXECUTABLE PLUGINS_SOURCE_DIR
Prints "PASS: ..." and exits 0, or one line per disagreement and exits 1.
"""
import json
import pathlib
import re
import subprocess
import sys

# Keys every algorithm accepts: the host reads them, no plugin declares them.
HOST_KEYS = {"op_types", "op_names", "exclude"}

# README "type" column → declared type.
TYPE_WORDS = [
    (re.compile(r"^integer or "), "integer or object"),
    (re.compile(r"^list of strings"), "string list"),
    (re.compile(r"^list of integers"), "integer list"),
    (re.compile(r"^list of numbers"), "number list"),
    (re.compile(r"^(bool|integer|number|string|object)$"), None),
]


def readme_type(text):
    for pattern, declared in TYPE_WORDS:
        match = pattern.match(text)
        if match:
            return declared or match.group(1)
    return text


def readme_default(text):
    """'required', None (no default: '—' or empty) or the JSON value of the default."""
    text = text.strip().strip("`")
    if text == "required":
        return "required"
    if text in ("—", "-", ""):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def readme_rows(readme):
    """{key: (type, default)} for every row of a table whose header starts | key | type | default."""
    rows = {}
    in_table = False
    for line in readme.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else None
        if cells is None:
            in_table = False
            continue
        if cells[:3] == ["key", "type", "default"]:
            in_table = True
            continue
        if not in_table or set(line.replace("|", "").strip()) <= set("-: "):
            continue
        keys = re.findall(r"`([^`]+)`", cells[0])
        for key in keys:
            rows[key] = (readme_type(cells[1]) if len(cells) > 1 else "",
                         readme_default(cells[2]) if len(cells) > 2 else None)
    return rows


def lithe_json(lithe, *args):
    out = subprocess.run([lithe, "plugins", *args, "--json"], check=True, capture_output=True,
                         text=True)
    return json.loads(out.stdout)


def main():
    lithe, plugins_dir = sys.argv[1], pathlib.Path(sys.argv[2])
    problems = []
    checked_keys = 0
    checked_algorithms = 0
    listing = lithe_json(lithe)
    for plugin in listing["plugins"]:
        if plugin["status"] != "loaded":
            continue
        folder = pathlib.Path(plugin["path"]).name
        folder = re.sub(r"^(lib)?lithe_plugin_|\.so.*$", "", folder)
        readme = plugins_dir / folder / "README.md"
        if not readme.is_file():
            continue  # not a built-in plugin (a test fixture found on the search path)
        rows = readme_rows(readme)
        documented = {k for k in rows if k not in HOST_KEYS}
        declared_here = set()
        names = sorted({a.split(" ", 1)[1] for a in plugin["algorithms"]})
        for name in names:
            described = lithe_json(lithe, "--describe", name)
            if not any(k["declares_options"] for k in described["kinds"]):
                problems.append(f"{readme}: '{name}' declares no option keys")
                continue
            checked_algorithms += 1
            for spec in described["options"] + described["config_entry"]:
                key = spec["key"]
                declared_here.add(key)
                checked_keys += 1
                if key not in rows:
                    problems.append(f"{readme}: key '{key}' of '{name}' is declared but not in a "
                                    f"key table")
                    continue
                doc_type, doc_default = rows[key]
                if doc_type != spec["type"]:
                    problems.append(f"{readme}: key '{key}': the README says type '{doc_type}', "
                                    f"the declaration '{spec['type']}'")
                declared_default = "required" if spec["required"] else spec["default"]
                if doc_default != declared_default:
                    problems.append(f"{readme}: key '{key}': the README says default "
                                    f"{json.dumps(doc_default)}, the declaration "
                                    f"{json.dumps(declared_default)}")
        for key in sorted(documented - declared_here):
            problems.append(f"{readme}: key '{key}' is in a key table but no algorithm of the "
                            f"plugin declares it")
    if checked_algorithms == 0:
        problems.append(f"no built-in plugin with a README under {plugins_dir} was loaded")
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"PASS: {checked_keys} declared keys of {checked_algorithms} algorithms agree with "
          f"their plugin READMEs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
