#!/usr/bin/env python3
"""The host's layering rules (ARCHITECTURE.md), checked on the sources.

  check_host_layering.py SOURCE_DIR AREAS_FILE LITHE_CLI

AREAS_FILE is written by host/CMakeLists.txt: one line per area, "<area> <dependency>...", in
dependency order. Fails (exit 1, one line per violation: file:line, the rule, what was seen) when
  1. an area includes a header of an area it does not depend on (directly or through others),
     or the conformance harness, or a 1.3 compat header name (lithe/host/<name>.h);
  2. a file under host/ sits outside an area folder (host/CMakeLists.txt and cli/ are the only
     others);
  3. a string literal in host/ or conformance/ names an algorithm a plugin registers (neither
     may know plugins by name: the names come from `lithe plugins --json`, and the conformance
     runner learns which algorithm reproduces an NNI class from the plugin's registration). A
     line whose comment says `nni-name` quotes NNI's own vocabulary (an NNI option value that
     happens to equal a plugin name), one whose comment says `op-name` quotes PyTorch's or
     ONNX's (an interpolation mode "linear"); neither is checked;
  4. a string literal in a jobs-floor area (JOB_AREAS) spells a command-line flag ("--output"):
     jobs name their request's fields (field_ref), and each front end writes them in its words;
  5. a verb function of the CLI (`int run_<verb>(const std::vector<std::string>& args)` in
     host/cli) is longer than VERB_LINES lines: a verb parses options into a request, runs one
     job and prints its result. Verbs not yet moved onto jobs are listed in NOT_YET_THIN with
     the length they had; they may shrink, never grow.
"""
import json
import pathlib
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"(lithe/(?:host|conformance)/[^"]+)"')
SOURCE_SUFFIXES = {".h", ".cpp", ".cu", ".cuh"}
NON_AREA = {"cli"}  # the CLI sits on top
JOB_AREAS = {"jobs"}
FLAG_TEXT = re.compile(r'"[^"\n]*?(--[a-z][a-z0-9-]+)')
VERB = re.compile(r"^int (run_\w+)\(const std::vector<std::string>& args\) \{")
VERB_LINES = 150
# Verbs whose work has not moved into host/jobs yet (issue 44), with their length then.
NOT_YET_THIN = {"run_search": 566}


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
                                    f"'{m.group(1)}' (removed: lithe/host/<area>/<name>.h)")
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

    # 4. no command-line flag in the jobs floor
    for area in sorted(JOB_AREAS & set(deps)):
        for path in sorted((host / area).rglob("*")):
            if path.suffix not in SOURCE_SUFFIXES:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("//")[0] if not line.lstrip().startswith('"') else line
                m = FLAG_TEXT.search(code)
                if m:
                    problems.append(f"{path.relative_to(root)}:{number}: a job spells the "
                                    f"command-line flag '{m.group(1)}'; name the request field "
                                    f"(field_ref) and let the front end write it")

    # 5. thin verbs
    verbs = 0
    for path in sorted((host / "cli").glob("*.cpp")):
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines, 1):
            m = VERB.match(line)
            if not m:
                continue
            verbs += 1
            end = next((i for i in range(number, len(lines)) if lines[i] == "}"), len(lines))
            length = end - number + 2
            limit = NOT_YET_THIN.get(m.group(1), VERB_LINES)
            if length > limit:
                problems.append(f"{path.relative_to(root)}:{number}: verb function "
                                f"{m.group(1)} has {length} lines, over {limit} (a verb parses "
                                f"options into a request, runs one job and prints)")
    if verbs < 10:
        problems.append(f"host/cli: found {verbs} verb functions; expected every verb's "
                        f"(does VERB still match their signature?)")

    for p in problems:
        print(p)
    if problems:
        print(f"FAIL: {len(problems)} layering violation(s)")
        return 1
    print(f"PASS: {len(deps)} areas, includes point down only, no plugin name in host/ or "
          f"conformance/ ({len(names)} algorithm names checked), no flag in "
          f"{sorted(JOB_AREAS)}, {verbs} verbs within {VERB_LINES} lines "
          f"({len(NOT_YET_THIN)} not yet thin)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
