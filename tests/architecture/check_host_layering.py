#!/usr/bin/env python3
"""The host's layering rules (ARCHITECTURE.md), checked on the sources.

  check_host_layering.py SOURCE_DIR AREAS_FILE LITHE_CLI

AREAS_FILE is written by host/CMakeLists.txt: one line per area, "<area> <dependency>...", in
dependency order. Fails (exit 1, one line per violation: file:line, the rule, what was seen) when
  1. an area includes a header of an area it does not depend on (directly or through others),
     or the conformance harness, or a 1.3 compat header name (lithe/host/<name>.h);
  2. a file under host/ sits outside an area folder (host/CMakeLists.txt, cli/ and compat/ are
     the only others);
  3. a string literal in host/ or conformance/ names an algorithm a plugin registers (neither
     may know plugins by name: the names come from `lithe plugins --json`, and the conformance
     runner learns which algorithm reproduces an NNI class from the plugin's registration). A
     line whose comment says `nni-name` quotes NNI's own vocabulary (an NNI option value that
     happens to equal a plugin name), one whose comment says `op-name` quotes PyTorch's or
     ONNX's (an interpolation mode "linear"); neither is checked.
"""
import json
import pathlib
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"(lithe/(?:host|conformance)/[^"]+)"')
SOURCE_SUFFIXES = {".h", ".cpp", ".cu", ".cuh"}
NON_AREA = {"cli", "compat"}  # the CLI sits on top; compat only forwards 1.3 header names


def closure(area, deps):
    seen, todo = set(), list(deps[area])
    while todo:
        d = todo.pop()
        if d not in seen:
            seen.add(d)
            todo.extend(deps[d])
    return seen


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    root = pathlib.Path(sys.argv[1])
    deps = {}
    for line in pathlib.Path(sys.argv[2]).read_text().splitlines():
        if line.strip():
            name, *depends = line.split()
            deps[name] = depends
    host = root / "host"
    problems = []

    # 1. include direction
    for area in deps:
        allowed = closure(area, deps) | {area}
        for path in sorted((host / area).rglob("*")):
            if path.suffix not in SOURCE_SUFFIXES:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                parts = m.group(1).split("/")
                where = f"{path.relative_to(root)}:{number}"
                if parts[1] == "conformance":
                    problems.append(f"{where}: the host may not include the conformance harness, "
                                    f"got '{m.group(1)}'")
                elif len(parts) == 3:
                    problems.append(f"{where}: use the area header, not the 1.3 name "
                                    f"'{m.group(1)}' (host/compat is for users only)")
                elif parts[2] not in allowed:
                    problems.append(
                        f"{where}: area '{area}' may include only {sorted(allowed)}, got "
                        f"'{m.group(1)}' (area '{parts[2]}' is not below it)")

    # 2. every file in an area folder
    known = set(deps) | NON_AREA
    for path in sorted(host.iterdir()):
        if path.is_dir() and path.name not in known:
            problems.append(f"{path.relative_to(root)}: folder under host/ is not a declared area "
                            f"(areas: {sorted(deps)})")
        elif path.is_file() and path.name != "CMakeLists.txt":
            problems.append(f"{path.relative_to(root)}: file outside an area folder")

    # 3. no plugin name in the host
    listing = subprocess.run([sys.argv[3], "plugins", "--json"], capture_output=True, text=True,
                             check=True).stdout
    names = set()
    for plugin in json.loads(listing).get("plugins", []):
        if plugin.get("status") == "loaded":
            names.add(plugin["name"])
            names.update(entry.split()[-1] for entry in plugin.get("algorithms", []))
    if len(names) < 10:
        problems.append(f"'lithe plugins --json' listed {len(names)} algorithm names "
                        f"({sorted(names)}); expected every in-tree plugin's")
    literal = re.compile(r'"(' + "|".join(re.escape(n) for n in sorted(names)) + r')"')
    for path in sorted([*host.rglob("*"), *(root / "conformance").rglob("*")]):
        if path.suffix not in SOURCE_SUFFIXES:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code, _, comment = line.partition("//")
            m = literal.search(code)
            if m and "nni-name" not in comment and "op-name" not in comment:
                who = "the host" if path.is_relative_to(host) else "the conformance runner"
                problems.append(f"{path.relative_to(root)}:{number}: {who} names the plugin "
                                f"algorithm \"{m.group(1)}\"")

    for p in problems:
        print(p)
    if problems:
        print(f"FAIL: {len(problems)} layering violation(s)")
        return 1
    print(f"PASS: {len(deps)} areas, includes point down only, no plugin name in host/ or "
          f"conformance/ "
          f"({len(names)} algorithm names checked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
